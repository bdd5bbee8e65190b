package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	tasktypes "github.com/containerd/containerd/api/types/task"
	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostcgroup"
	"github.com/shellbox/shellbox/sandbox/hostdir"
	"github.com/shellbox/shellbox/usage"
)

// Defaults of Config.
const (
	DefaultAddress   = "/run/shellbox-containerd/containerd.sock"
	DefaultNamespace = "shellbox"
)

// DefaultRuntimeNames maps the Spec runtimes to containerd's shims.
var DefaultRuntimeNames = map[string]string{
	sandbox.RuntimeRunc:  "io.containerd.runc.v2",
	sandbox.RuntimeRunsc: "io.containerd.runsc.v1",
}

// Config configures a Runtime.
type Config struct {
	// Address is containerd's socket (DefaultAddress if empty).
	Address string
	// Namespace is the containerd namespace of every sandbox, image and
	// snapshot shellbox uses (DefaultNamespace if empty).
	Namespace string
	// Snapshotter is the snapshotter of the sandboxes' root file systems
	// ("" = the daemon's default, overlayfs).
	Snapshotter string
	// StateDir holds the sessions' host directories (hostdir). Required,
	// absolute, and short: a socket path must fit in 107 bytes.
	StateDir string
	// Quota says how the spill cap is enforced (hostdir.QuotaTmpfs
	// needs root).
	Quota hostdir.Quota
	// WorkspaceMedium is what the sessions' host workspaces are made of
	// (default hostdir.MediumDisk: ext4 images, loop-mounted).
	WorkspaceMedium hostdir.Medium
	// AgentBinary is the host path of the static agent, bind-mounted
	// read-only at sandbox.AgentPath. Required.
	AgentBinary string
	// RuntimeNames maps the Spec runtimes (runc, runsc) to containerd
	// runtime (shim) names; missing entries take DefaultRuntimeNames.
	RuntimeNames map[string]string
	// RuntimeConfigs maps a Spec runtime to the options file its shim reads
	// (containerd's runtimeoptions ConfigPath): runsc's runsc.toml, which
	// must set host-uds (create or all: else the host cannot reach the
	// agent's socket) and oci-seccomp (else gVisor ignores the seccomp
	// profile).
	RuntimeConfigs map[string]string
	// RuncRoot is runc's state directory ("" = the shim's default,
	// /run/containerd/runc): a daemon beside another containerd keeps its
	// own (.ci/setup-containerd.sh: /run/shellbox-containerd/runc).
	RuncRoot string
	// Checkpoint runs runsc sandboxes under containerd's runc v2 shim
	// with a runsc wrapper made from RuntimeConfigs[runsc] (required), so
	// that they can be checkpointed and restored (sandbox.Checkpointer,
	// checkpoint.go); off, they run under gVisor's shim, which cannot.
	Checkpoint bool
	// RestoreBackground restores with runsc restore --background: the
	// image's memory pages go on loading after the restore returns, and
	// the sandbox's first touch of a page not loaded yet waits for it
	// (it needs an uncompressed image: runsc checkpoint's default, as
	// here). With Checkpoint only.
	RestoreBackground bool
	// OnRestore, if set, is told where each successful Restore's time
	// went (a benchmark's phases, a server's log).
	OnRestore func(tenant, session string, t RestoreTimes)
}

// Runtime is the containerd backend of sandbox.Runtime: one container per
// session, id ContainerID(tenant, session), its task the agent.
type Runtime struct {
	cfg    Config
	client *client.Client
	dirs   *hostdir.Dirs

	mu    sync.Mutex
	locks map[string]*keyLock // by container id

	// cgroups are the cgroups of containers Usage read (usage.go).
	cgroups usage.Cgroups

	// cr is runsc under the runc shim (Config.Checkpoint; nil: off).
	cr *runscSetup
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

var (
	_ sandbox.Runtime       = (*Runtime)(nil)
	_ sandbox.Pinger        = (*Runtime)(nil)
	_ sandbox.RuntimeLister = (*Runtime)(nil)
	_ sandbox.Sweeper       = (*Runtime)(nil)
	_ sandbox.SessionState  = (*Runtime)(nil)
)

// New returns a Runtime with its own client of the daemon at cfg.Address.
// It does not contact the daemon (Ping does); Close releases the client.
func New(cfg Config) (*Runtime, error) {
	if cfg.Address == "" {
		cfg.Address = DefaultAddress
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	names := map[string]string{}
	for k, v := range DefaultRuntimeNames {
		names[k] = v
	}
	for k, v := range cfg.RuntimeNames {
		if k != sandbox.RuntimeRunc && k != sandbox.RuntimeRunsc {
			return nil, fmt.Errorf("%w: containerd: runtime names: %q is not a runtime (runc or runsc)", sandbox.ErrInvalid, k)
		}
		names[k] = v
	}
	cfg.RuntimeNames = names
	if !filepath.IsAbs(cfg.AgentBinary) {
		return nil, fmt.Errorf("%w: containerd: agent binary %q: must be an absolute host path", sandbox.ErrInvalid, cfg.AgentBinary)
	}
	dirs, err := hostdir.New(hostdir.Config{StateDir: cfg.StateDir, Quota: cfg.Quota, Medium: cfg.WorkspaceMedium})
	if err != nil {
		return nil, err
	}
	var cr *runscSetup
	if cfg.Checkpoint {
		if cr, err = setUpCheckpoint(cfg); err != nil {
			return nil, err
		}
	}
	c, err := client.New(cfg.Address, client.WithDefaultNamespace(cfg.Namespace), client.WithTimeout(5*time.Second),
		client.WithExtraDialOpts([]grpc.DialOption{grpc.WithConnectParams(reconnect)}))
	if err != nil {
		return nil, convert(err, cfg.Address, "connect")
	}
	return &Runtime{cfg: cfg, client: c, dirs: dirs, locks: map[string]*keyLock{}, cr: cr}, nil
}

// reconnect is how the client's connection dials the daemon again once it
// is lost (a containerd restart): every 100 ms, then less often, never
// more than 500 ms apart. The client's own (grpc's default backoff, capped
// at its 5 s timeout) waited out 1.9-3.4 s after a restarted daemon
// answered, failing every call that needed it meanwhile; a dial of a
// local socket costs next to nothing.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: 5 * time.Second,
}

// Close releases the client.
func (r *Runtime) Close() error { return r.client.Close() }

// Dirs returns the runtime's host directories.
func (r *Runtime) Dirs() *hostdir.Dirs { return r.dirs }

func (r *Runtime) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}

// lock serialises Create and Remove of one container id in this process:
// Create prepares (empties) the session's host directory only after seeing
// no container, which must still hold when it creates one.
func (r *Runtime) lock(id string) func() {
	r.mu.Lock()
	l := r.locks[id]
	if l == nil {
		l = &keyLock{}
		r.locks[id] = l
	}
	l.refs++
	r.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(r.locks, id)
		}
		r.mu.Unlock()
	}
}

// Create implements sandbox.Runtime: the session's host directory, then a
// container on a fresh snapshot of the image, then its task (the agent,
// with no stdio), started. Images are not pulled: spec.Image must be in the
// namespace (it is unpacked for the snapshotter if it is not yet). On any
// failure after the host directory, everything is removed again.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	return r.create(ctx, spec, "", nil)
}

// create is Create, or with image (an unpacked checkpoint image,
// checkpoint.go) a Restore: the host directory's files from the image,
// and the task restored rather than started afresh.
func (r *Runtime) create(ctx context.Context, spec sandbox.Spec, image string, times *RestoreTimes) (sandbox.Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := r.dirs.CheckSpec(spec); err != nil {
		return sandbox.Sandbox{}, err
	}
	if _, err := os.Stat(r.cfg.AgentBinary); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: agent binary: %v", sandbox.ErrUnavailable, err)
	}
	if err := r.checkShimOptions(spec.Runtime); err != nil {
		return sandbox.Sandbox{}, err
	}
	shim, shimOpts := r.shim(spec.Runtime)
	ctx = r.ctx(ctx)
	id := ContainerID(spec.Tenant, spec.Session)
	defer r.lock(id)()

	if _, err := r.client.LoadContainer(ctx, id); err == nil {
		return sandbox.Sandbox{}, fmt.Errorf("%w: %s/%s (container %s)", sandbox.ErrAlreadyExists, spec.Tenant, spec.Session, id)
	} else if !errdefs.IsNotFound(err) {
		return sandbox.Sandbox{}, r.convert(err, "load container %s", id)
	}
	img, err := r.image(ctx, spec.Image)
	if err != nil {
		return sandbox.Sandbox{}, err
	}

	dir, err := r.dirs.Prepare(spec.Tenant, spec.Session, spec.SpillBytes)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	mark := time.Now()
	if image != "" {
		if err := restoreHostFiles(image, dir); err != nil {
			_ = r.dirs.Remove(spec.Tenant, spec.Session)
			return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: restore: the host directory's files: %v", sandbox.ErrUnavailable, err)
		}
	}
	var (
		ctr  client.Container
		task client.Task
		done bool
		ws   string
		made bool
	)
	defer func() {
		if !done {
			r.undo(ctx, id, ctr, task, spec.Tenant, spec.Session, made)
		}
	}()
	if r.dirs.Workspaces() {
		if ws, made, err = r.dirs.Workspace(spec.Tenant, spec.Session, spec.WorkspaceBytes, spec.UID, spec.GID); err != nil {
			return sandbox.Sandbox{}, err
		}
		if image != "" {
			if err := importWorkspace(ctx, image, ws, spec.WorkspaceBytes); err != nil {
				return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: restore: the image's workspace: %v", sandbox.ErrUnavailable, err)
			}
		}
	}
	if times != nil {
		times.Files, mark = time.Since(mark), time.Now()
	}
	pins, err := r.dirs.Pin(spec.Tenant, spec.Session, spec.Mounts)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	// The sandbox has its own copies of the mounts once its task exists
	// (or there is no sandbox): a pin a failed release leaves bound is
	// cleared by the session's next Pin.
	defer pins.Release()
	// A snapshot under the id without a container is what a create that
	// crashed midway left: it is shellbox's (the id is), and in the way.
	if err := r.client.SnapshotService(r.cfg.Snapshotter).Remove(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return sandbox.Sandbox{}, r.convert(err, "remove stale snapshot %s", id)
	}
	if spec.TenantCPUs > 0 {
		// The shim makes the sandbox's cgroup below the tenant's, whose
		// quota is written first (containerd's host is this one).
		if err := hostcgroup.Ensure(spec.Tenant, spec.TenantCPUs); err != nil {
			return sandbox.Sandbox{}, fmt.Errorf("%w: tenantCpus %v of %s: %w", sandbox.ErrUnavailable, spec.TenantCPUs, spec.Tenant, err)
		}
	}
	opts := []client.NewContainerOpts{}
	if r.cfg.Snapshotter != "" {
		opts = append(opts, client.WithSnapshotter(r.cfg.Snapshotter))
	}
	opts = append(opts,
		client.WithNewSnapshot(id, img),
		client.WithRuntime(shim, shimOpts),
		client.WithContainerLabels(labels(spec, dir)),
		client.WithNewSpec(append([]oci.SpecOpts{oci.WithImageConfig(img)}, translate(spec, pins.Mounts(), r.cfg.AgentBinary, dir, ws)...)...),
	)
	ctr, err = r.client.NewContainer(ctx, id, opts...)
	if err != nil {
		if errdefs.IsAlreadyExists(err) {
			// Another process created it since LoadContainer (this one's
			// creates are serialised by lock): the snapshot is the
			// winner's, not ours to undo. (Its host directory was
			// emptied by Prepare: servers sharing a daemon and a state
			// directory must not race on one session.)
			done = true
			return sandbox.Sandbox{}, fmt.Errorf("%w: %s/%s (container %s): %v", sandbox.ErrAlreadyExists, spec.Tenant, spec.Session, id, err)
		}
		return sandbox.Sandbox{}, r.convert(err, "create container %s", id)
	}
	// No stdio: the agent's output goes nowhere (as Docker's "none" log
	// driver); it reports through its socket.
	task, err = ctr.NewTask(ctx, cio.NullIO, restoreOpts(image)...)
	if err != nil {
		if shimMissing(err) {
			return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: runtime %q (shim %s) is not available on containerd at %s: is its shim on containerd's PATH? (.ci/setup-containerd.sh): %v",
				sandbox.ErrUnavailable, spec.Runtime, shim, r.cfg.Address, err)
		}
		return sandbox.Sandbox{}, r.convert(err, "create task %s (runtime %s)", id, shim)
	}
	if err := task.Start(ctx); err != nil {
		if image != "" {
			return sandbox.Sandbox{}, r.convert(err, "restore task %s", id)
		}
		return sandbox.Sandbox{}, r.convert(err, "start task %s", id)
	}
	if image != "" {
		if times != nil {
			times.Runsc, mark = time.Since(mark), time.Now()
		}
		// The agent listens again (checkpoint.go).
		if err := r.hook(ctx, task, dir, hookRestore); err != nil {
			return sandbox.Sandbox{}, err
		}
		if times != nil {
			times.Agent = time.Since(mark)
		}
	}
	st, err := task.Status(ctx)
	if err != nil {
		return sandbox.Sandbox{}, r.convert(err, "task status %s", id)
	}
	if st.Status != client.Running {
		return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: task %s is %s right after start (exit code %d): is the agent binary static and runnable?",
			sandbox.ErrUnavailable, id, st.Status, st.ExitStatus)
	}
	if err := pins.Verify(spec.Runtime, int(task.Pid())); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("containerd: container %s: %w", id, err)
	}
	info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata)
	if err != nil {
		return sandbox.Sandbox{}, r.convert(err, "container info %s", id)
	}
	done = true
	sb := describe(info)
	sb.State = sandbox.StateRunning
	return sb, nil
}

// undo removes what a failed Create made, even if ctx ended: the session's
// workspace only if it made it (madeWorkspace), not one a sandbox left.
func (r *Runtime) undo(ctx context.Context, id string, ctr client.Container, task client.Task, tenant, session string, madeWorkspace bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if task != nil {
		_, _ = task.Delete(ctx, client.WithProcessKill)
	}
	if ctr != nil {
		_ = ctr.Delete(ctx, client.WithSnapshotCleanup)
	}
	_ = r.client.SnapshotService(r.cfg.Snapshotter).Remove(ctx, id)
	_ = r.dirs.Remove(tenant, session)
	if madeWorkspace {
		_, _ = r.dirs.RemoveWorkspace(tenant, session)
	}
}

// shim returns the containerd runtime and its options for a Spec runtime.
func (r *Runtime) shim(runtime string) (string, any) {
	if runtime == sandbox.RuntimeRunsc && r.cr != nil {
		return RuncShim, &runcoptions.Options{BinaryName: r.cr.wrapper, Root: r.cr.root}
	}
	name := r.cfg.RuntimeNames[runtime]
	if path := r.cfg.RuntimeConfigs[runtime]; path != "" {
		return name, &runtimeoptions.Options{TypeUrl: name + ".options", ConfigPath: path}
	}
	if runtime == sandbox.RuntimeRunc && r.cfg.RuncRoot != "" {
		return name, &runcoptions.Options{Root: r.cfg.RuncRoot}
	}
	return name, nil
}

// checkShimOptions refuses a runtime whose shim options could never give a
// sandbox the host can reach: gVisor's shim without an options file, or
// with one that does not set host-uds, starts runsc with the agent's socket
// inside the sandbox only, and the sandbox's readiness check would wait for
// it until the creation's timeout. The file is read at each creation, so
// that fixing it needs no restart.
func (r *Runtime) checkShimOptions(runtime string) error {
	if runtime != sandbox.RuntimeRunsc || !strings.Contains(r.cfg.RuntimeNames[runtime], "runsc") || r.cr != nil {
		// (With checkpoints on, New read the options file and checked
		// host-uds.) Not gVisor's shim: another (absent, or of its own kind) is
		// containerd's to refuse, naming it.
		return nil
	}
	path := r.cfg.RuntimeConfigs[runtime]
	if path == "" {
		return fmt.Errorf("%w: containerd: runtime runsc has no options file for gVisor's shim (containerd.runtimeConfigs.runsc): without one runsc runs without host-uds, and the host cannot reach the sandbox's agent (.ci/setup-containerd.sh writes %s)",
			sandbox.ErrUnavailable, "/etc/shellbox-containerd/runsc.toml")
	}
	var opts struct {
		RunscConfig map[string]string `toml:"runsc_config"`
	}
	if _, err := toml.DecodeFile(path, &opts); err != nil {
		return fmt.Errorf("%w: containerd: runtime runsc: gVisor's shim options file: %w", sandbox.ErrUnavailable, err)
	}
	switch opts.RunscConfig["host-uds"] {
	case "create", "all":
		return nil
	}
	return fmt.Errorf("%w: containerd: runtime runsc: gVisor's shim options file %s does not set host-uds (create or all) in [runsc_config]: the host cannot reach the sandbox's agent",
		sandbox.ErrUnavailable, path)
}

// image returns the image, unpacked for the snapshotter. A missing image is
// ErrUnavailable saying how to get it: shellbox never pulls.
func (r *Runtime) image(ctx context.Context, ref string) (client.Image, error) {
	img, err := r.client.GetImage(ctx, ref)
	if errdefs.IsNotFound(err) {
		// containerd stores short names as given by the importer; Docker's
		// save names them docker.io/library/<name>.
		if !strings.Contains(ref, "/") {
			if alt, err2 := r.client.GetImage(ctx, "docker.io/library/"+ref); err2 == nil {
				img, err = alt, nil
			}
		}
	}
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: containerd: image %q is not in namespace %q at %s (shellbox does not pull): build and import it with `shellbox image build --containerd`, or `ctr -n %s images import <image.tar>`",
				sandbox.ErrUnavailable, ref, r.cfg.Namespace, r.cfg.Address, r.cfg.Namespace)
		}
		return nil, r.convert(err, "get image %s", ref)
	}
	unpacked, err := img.IsUnpacked(ctx, r.cfg.Snapshotter)
	if err != nil {
		return nil, r.convert(err, "image %s", ref)
	}
	if !unpacked {
		if err := img.Unpack(ctx, r.cfg.Snapshotter); err != nil {
			return nil, r.convert(err, "unpack image %s", ref)
		}
	}
	return img, nil
}

// Get implements sandbox.Runtime.
func (r *Runtime) Get(ctx context.Context, tenant, session string) (sandbox.Sandbox, error) {
	ctx = r.ctx(ctx)
	id := ContainerID(tenant, session)
	c, err := r.client.ContainerService().Get(ctx, id)
	if err != nil {
		return sandbox.Sandbox{}, r.convert(err, "get container %s", id)
	}
	if c.Labels[sandbox.LabelManaged] != "true" {
		return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: container %s was not created by shellbox", sandbox.ErrConflict, id)
	}
	return r.withState(ctx, c)
}

// List implements sandbox.Runtime: the containers, then the task of each
// sandbox of owner. (Not the namespace's task list in one call: the daemon
// asks every shim for its state, and one hung shim, of any owner, would
// hold up every List.)
func (r *Runtime) List(ctx context.Context, owner string) ([]sandbox.Sandbox, error) {
	ctx = r.ctx(ctx)
	cs, err := r.client.ContainerService().List(ctx, `labels."`+sandbox.LabelManaged+`"==true`)
	if err != nil {
		return nil, r.convert(err, "list containers")
	}
	out := make([]sandbox.Sandbox, 0, len(cs))
	for _, c := range cs {
		// The owner is compared here, not in the filter: owners are free
		// text and the filter language would need them quoted.
		if owner != "" && c.Labels[sandbox.LabelOwner] != owner {
			continue
		}
		sb, err := r.withState(ctx, c)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			continue // removed meanwhile
		case ctx.Err() != nil:
			return nil, r.convert(ctx.Err(), "list")
		case err != nil:
			// A shim that does not answer: the sandbox is listed, in no
			// usable state, rather than hiding every other one.
			sb = describe(c)
			sb.State = sandbox.StateOther
		}
		out = append(out, sb)
	}
	return out, nil
}

// withState describes a container's sandbox with its task's state: no task
// is StateCreated (never started, or a Create that died midway).
func (r *Runtime) withState(ctx context.Context, c containers.Container) (sandbox.Sandbox, error) {
	sb := describe(c)
	resp, err := r.client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: c.ID})
	switch {
	case err == nil:
		sb.State, sb.OOMKilled = r.state(resp.Process.Status, c)
	case errdefs.IsNotFound(toNative(err)):
		if _, err := r.client.ContainerService().Get(ctx, c.ID); err != nil {
			return sandbox.Sandbox{}, r.convert(err, "get container %s", c.ID)
		}
		sb.State = sandbox.StateCreated
	default:
		return sandbox.Sandbox{}, r.convert(err, "get task %s", c.ID)
	}
	return sb, nil
}

// Remove implements sandbox.Runtime: SIGKILL to every process of the task
// (a paused one resumed first), wait, delete the task, the container and its snapshot, then the host
// directory. Already gone is success; a container shellbox did not create is
// ErrConflict and left alone.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	defer r.lock(id)()
	c, err := r.client.ContainerService().Get(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return r.convert(err, "get container %s", id)
	}
	if c.Labels[sandbox.LabelManaged] != "true" {
		return fmt.Errorf("%w: containerd: container %s was not created by shellbox: not removing it", sandbox.ErrConflict, id)
	}
	ctr, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return r.convert(err, "load container %s", id)
	}
	task, err := ctr.Task(ctx, nil)
	switch {
	case err == nil:
		// gVisor signals no process of a paused sandbox ("cannot signal
		// container … in state paused"): thawed first, it dies at once.
		if st, err := task.Status(ctx); err == nil && (st.Status == client.Paused || st.Status == client.Pausing) {
			_ = task.Resume(ctx)
		}
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return r.convert(err, "delete task %s", id)
		}
	case !errdefs.IsNotFound(err):
		return r.convert(err, "load task %s", id)
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return r.convert(err, "delete container %s", id)
	}
	// Only the directory this runtime would have made: a container of a
	// server with another state directory keeps its own.
	tenant, session := c.Labels[sandbox.LabelTenant], c.Labels[sandbox.LabelSession]
	if dir := c.Labels[LabelHostDir]; dir != "" && r.dirs.Check(tenant, session) == nil && dir == r.dirs.Path(tenant, session) {
		return r.dirs.Remove(tenant, session)
	}
	return nil
}

// Ping implements sandbox.Pinger.
func (r *Runtime) Ping(ctx context.Context) error {
	// containerd's dialer waits for a missing socket to appear until its
	// timeout: say at once that there is none.
	if fi, err := os.Stat(strings.TrimPrefix(r.cfg.Address, "unix://")); err != nil || fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%w: containerd at %s does not answer: is it running? (.ci/setup-containerd.sh): no socket there",
			sandbox.ErrUnavailable, r.cfg.Address)
	}
	if _, err := r.client.Version(r.ctx(ctx)); err != nil {
		return r.convert(err, "version")
	}
	return nil
}

// Runtimes implements sandbox.RuntimeLister: the Spec runtimes whose shim
// the daemon can start (it asks each shim for its info; a shim that is not
// installed fails with not found).
func (r *Runtime) Runtimes(ctx context.Context) ([]string, error) {
	ctx = r.ctx(ctx)
	var out []string
	for _, rt := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		shim, opts := r.shim(rt)
		_, err := r.client.RuntimeInfo(ctx, shim, opts)
		switch {
		case err == nil:
			out = append(out, rt)
		case isConnection(err):
			return nil, r.convert(err, "runtime info %s", shim)
		case shimMissing(err):
		default:
			// The shim exists but cannot describe itself (not every shim
			// implements -info): count it; Create says what is wrong.
			out = append(out, rt)
		}
	}
	return out, nil
}

// shimMissing reports the daemon's answer for a runtime whose shim binary
// is not installed ("binary not installed ...: file does not exist").
func shimMissing(err error) bool {
	err = toNative(err)
	return errdefs.IsNotFound(err) || strings.Contains(err.Error(), "binary not installed") ||
		strings.Contains(err.Error(), "executable file not found")
}

// RemoveSession implements sandbox.SessionState: the session's workspace,
// and its host directory if a container removed behind shellbox's back left
// it. The caller makes sure no sandbox of the session exists.
func (r *Runtime) RemoveSession(ctx context.Context, tenant, session string) (bool, error) {
	if err := r.dirs.Check(tenant, session); err != nil {
		return false, err
	}
	defer r.lock(ContainerID(tenant, session))()
	return r.dirs.RemoveSession(tenant, session)
}

// Sweep implements sandbox.Sweeper: it removes the host directories and
// workspaces under the state directory that neither a container on the
// daemon (of any owner: its agent uses the directory) nor live claims.
func (r *Runtime) Sweep(ctx context.Context, owner string, live func(tenant, session string) bool) ([]string, error) {
	all, err := r.List(ctx, "")
	if err != nil {
		return nil, err
	}
	return r.dirs.SweepUnused(all, live)
}

// state maps a task status to a sandbox state, and tells whether an exited
// task was killed by its memory cgroup's OOM killer.
func (r *Runtime) state(st tasktypes.Status, c containers.Container) (sandbox.State, bool) {
	switch st {
	case tasktypes.Status_RUNNING:
		return sandbox.StateRunning, false
	case tasktypes.Status_CREATED:
		return sandbox.StateCreated, false
	case tasktypes.Status_STOPPED:
		return sandbox.StateExited, oomKilled(c)
	}
	return sandbox.StateOther, false
}

// oomKilled reads the OOM kill count of the container's memory cgroup,
// which stays until the task is deleted. It is best effort: false when the
// cgroup cannot be read (another host, gVisor's own layout).
func oomKilled(c containers.Container) bool {
	s := specOf(c)
	if s == nil || s.Linux == nil || s.Linux.CgroupsPath == "" || strings.Contains(s.Linux.CgroupsPath, ":") {
		return false
	}
	p := filepath.Clean("/" + s.Linux.CgroupsPath)
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup", p, "memory.events"),             // v2
		filepath.Join("/sys/fs/cgroup/memory", p, "memory.oom_control"), // v1
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if n, ok := strings.CutPrefix(line, "oom_kill "); ok {
				v, _ := strconv.Atoi(strings.TrimSpace(n))
				return v > 0
			}
		}
	}
	return false
}

func specOf(c containers.Container) *specs.Spec {
	if c.Spec == nil {
		return nil
	}
	v, err := typeurl.UnmarshalAny(c.Spec)
	if err != nil {
		return nil
	}
	s, _ := v.(*specs.Spec)
	return s
}

// describe returns what a container's record says of its sandbox; State is
// the caller's.
func describe(c containers.Container) sandbox.Sandbox {
	sb := sandbox.Labelled(c.ID, c.Labels)
	sb.Image = c.Image
	sb.State = sandbox.StateOther
	sb.Created = c.CreatedAt
	if dir := c.Labels[LabelHostDir]; dir != "" {
		sb.Agent = hostdir.Endpoint(dir)
	}
	s := specOf(c)
	if s != nil {
		sb.Settings = s.Annotations[sandbox.LabelSettings]
	}
	if s != nil && s.Annotations[sandbox.LabelMounts] != "" {
		sb.Mounts, _ = sandbox.ParseMountsRecord(s.Annotations[sandbox.LabelMounts])
	} else if s != nil {
		for _, m := range s.Mounts {
			if m.Type != "bind" || m.Destination == sandbox.AgentPath || m.Destination == sandbox.HostDirMount || m.Destination == sandbox.WorkspacePath {
				continue
			}
			sb.Mounts = append(sb.Mounts, sandbox.Mount{Source: m.Source, Target: m.Destination, ReadOnly: slices.Contains(m.Options, "ro")})
		}
		slices.SortFunc(sb.Mounts, func(a, b sandbox.Mount) int { return strings.Compare(a.Target, b.Target) })
	}
	return sb
}
