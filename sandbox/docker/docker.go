package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostcgroup"
	"github.com/shellbox/shellbox/sandbox/hostdir"
	"github.com/shellbox/shellbox/usage"
)

// API is the part of the Docker Engine client the backend uses; a
// *client.Client satisfies it. Every call here exists in API 1.41 (Engine
// 20.10), and the fields the backend sets too (CgroupnsMode is the newest,
// from 1.41), so it works on 20.10 and on current engines alike.
type API interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig,
		networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, options container.StartOptions) error
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerRemove(ctx context.Context, id string, options container.RemoveOptions) error
	Info(ctx context.Context) (system.Info, error)
	Ping(ctx context.Context) (types.Ping, error)
}

// Config is what the Docker runtime needs beyond the engine: where the
// sessions' host directories live and what it mounts into every sandbox.
type Config struct {
	// StateDir holds the sessions' host directories (sandbox/hostdir).
	// Required, absolute, short (the agent socket path must fit in 107
	// bytes).
	StateDir string
	// Quota says how the spill cap is enforced (default: a tmpfs, which
	// needs root).
	Quota hostdir.Quota
	// WorkspaceMedium is what the sessions' host workspaces are made of
	// (default hostdir.MediumDisk: ext4 images, loop-mounted).
	WorkspaceMedium hostdir.Medium
	// AgentBinary is the host path of the static agent binary, mounted
	// read-only at sandbox.AgentPath. Required.
	AgentBinary string
	// EngineRuntimes maps a Spec runtime (runc, runsc) to the name the
	// engine registered it under (daemon.json "runtimes"); a Spec runtime
	// not in the map uses its own name.
	EngineRuntimes map[string]string
}

// Runtime is the Docker backend of sandbox.Runtime.
type Runtime struct {
	api    API
	closer io.Closer // set when the Runtime made its client
	cfg    Config
	dirs   *hostdir.Dirs

	mu       sync.Mutex
	runtimes []string // engine runtimes seen by the last Info, nil before
	// cgroupDriver is the engine's (Info), read at the first creation
	// with a tenant cgroup.
	cgroupDriver string
	// cgroups are the cgroups of containers Usage read (usage.go).
	cgroups usage.Cgroups
}

var (
	_ sandbox.Runtime       = (*Runtime)(nil)
	_ sandbox.Pinger        = (*Runtime)(nil)
	_ sandbox.RuntimeLister = (*Runtime)(nil)
	_ sandbox.Sweeper       = (*Runtime)(nil)
	_ sandbox.SessionState  = (*Runtime)(nil)
	_ API                   = (*client.Client)(nil)
)

// New returns a Runtime on api. The caller keeps ownership of api.
func New(api API, cfg Config) (*Runtime, error) {
	dirs, err := hostdir.New(hostdir.Config{StateDir: cfg.StateDir, Quota: cfg.Quota, Medium: cfg.WorkspaceMedium})
	if err != nil {
		return nil, fmt.Errorf("docker runtime: %w", err)
	}
	if cfg.AgentBinary == "" || !filepath.IsAbs(cfg.AgentBinary) {
		return nil, fmt.Errorf("%w: docker runtime: agent binary %q: must be an absolute host path", sandbox.ErrInvalid, cfg.AgentBinary)
	}
	return &Runtime{api: api, cfg: cfg, dirs: dirs}, nil
}

// NewFromEnv returns a Runtime with its own client, configured from the
// environment (DOCKER_HOST, DOCKER_API_VERSION, DOCKER_CERT_PATH,
// DOCKER_TLS_VERIFY) and negotiating the API version with the engine, so the
// same binary talks to Engine 20.10 (API 1.41) and to current engines. Close
// releases the client.
func NewFromEnv(cfg Config) (*Runtime, error) {
	cli, err := NewClient()
	if err != nil {
		return nil, err
	}
	r, err := New(cli, cfg)
	if err != nil {
		cli.Close()
		return nil, err
	}
	r.closer = cli
	return r, nil
}

// engineRuntime is the engine's name for a Spec runtime.
func (r *Runtime) engineRuntime(name string) string {
	if n, ok := r.cfg.EngineRuntimes[name]; ok && n != "" {
		return n
	}
	return name
}

// NewClient returns a Docker client configured from the environment, with
// API version negotiation.
func NewClient() (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("%w: docker client: %v", sandbox.ErrUnavailable, err)
	}
	return cli, nil
}

// Close releases the client if NewFromEnv made it.
func (r *Runtime) Close() error {
	if r.closer != nil {
		return r.closer.Close()
	}
	return nil
}

// Create implements sandbox.Runtime. It prepares the session's host
// directory, creates the container under ContainerName and starts it; if
// it does not reach the running state both are removed again. Images are
// not pulled: spec.Image must be present.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return sandbox.Sandbox{}, err
	}
	if _, err := os.Stat(r.cfg.AgentBinary); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("%w: agent binary: %v", sandbox.ErrUnavailable, err)
	}
	if err := r.dirs.CheckSpec(spec); err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := r.checkRuntime(ctx, spec.Runtime); err != nil {
		return sandbox.Sandbox{}, err
	}
	name := ContainerName(spec.Tenant, spec.Session)
	// The host directory is (re)made empty below: never under a sandbox
	// that has it.
	switch _, err := r.api.ContainerInspect(ctx, name); {
	case err == nil:
		return sandbox.Sandbox{}, fmt.Errorf("%w: %s/%s (container %s)", sandbox.ErrAlreadyExists, spec.Tenant, spec.Session, name)
	case !isNotFound(err):
		return sandbox.Sandbox{}, convert(err, "inspect container %s", name)
	}
	dir, err := r.dirs.Prepare(spec.Tenant, spec.Session, spec.SpillBytes)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	var ws string
	var made bool
	if r.dirs.Workspaces() {
		if ws, made, err = r.dirs.Workspace(spec.Tenant, spec.Session, spec.WorkspaceBytes, spec.UID, spec.GID); err != nil {
			_ = r.dirs.Remove(spec.Tenant, spec.Session)
			return sandbox.Sandbox{}, err
		}
	}
	pins, err := r.dirs.Pin(spec.Tenant, spec.Session, spec.Mounts)
	if err != nil {
		_ = r.dirs.Remove(spec.Tenant, spec.Session)
		if made {
			_, _ = r.dirs.RemoveWorkspace(spec.Tenant, spec.Session)
		}
		return sandbox.Sandbox{}, err
	}
	sb, err := r.create(ctx, spec, pins, name, dir, ws)
	// The sandbox has its own copies of the mounts now (or there is no
	// sandbox): a pin a failed release leaves bound is cleared by the
	// session's next Pin.
	_ = pins.Release()
	if err != nil && !errors.Is(err, sandbox.ErrAlreadyExists) {
		// The directory is ours alone only if no sandbox uses it; a
		// workspace made now goes with it, one a sandbox left stays.
		_ = r.dirs.Remove(spec.Tenant, spec.Session)
		if made {
			_, _ = r.dirs.RemoveWorkspace(spec.Tenant, spec.Session)
		}
	}
	return sb, err
}

func (r *Runtime) create(ctx context.Context, spec sandbox.Spec, pins *hostdir.Pins, name, dir, ws string) (sandbox.Sandbox, error) {
	cfg, hc := translate(spec, pins.Mounts(), dir, ws, r.cfg.AgentBinary, r.engineRuntime(spec.Runtime))
	if spec.TenantCPUs > 0 {
		// The engine makes the sandbox's cgroup below the tenant's,
		// whose quota is written first (the engine's host is this one).
		if err := r.checkCgroupDriver(ctx); err != nil {
			return sandbox.Sandbox{}, err
		}
		if err := hostcgroup.Ensure(spec.Tenant, spec.TenantCPUs); err != nil {
			return sandbox.Sandbox{}, fmt.Errorf("%w: tenantCpus %v of %s: %w", sandbox.ErrUnavailable, spec.TenantCPUs, spec.Tenant, err)
		}
	}
	resp, err := r.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		if isNotFound(err) {
			return sandbox.Sandbox{}, fmt.Errorf("%w: image %q is not on the engine (shellbox does not pull; build the default image with `shellbox image build`, or load yours with `docker load`): %v",
				sandbox.ErrUnavailable, spec.Image, err)
		}
		if isConflict(err) {
			return sandbox.Sandbox{}, fmt.Errorf("%w: %s/%s (container %s): %v",
				sandbox.ErrAlreadyExists, spec.Tenant, spec.Session, name, err)
		}
		return sandbox.Sandbox{}, convert(err, "create container %s", name)
	}
	if err := r.api.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		r.removeDetached(ctx, resp.ID)
		return sandbox.Sandbox{}, convert(err, "start container %s", name)
	}
	info, err := r.api.ContainerInspect(ctx, resp.ID)
	if err != nil {
		r.removeDetached(ctx, resp.ID)
		return sandbox.Sandbox{}, convert(err, "inspect container %s", name)
	}
	sb := fromInspect(info)
	if sb.State != sandbox.StateRunning {
		r.removeDetached(ctx, resp.ID)
		code := 0
		if info.State != nil {
			code = info.State.ExitCode
		}
		return sandbox.Sandbox{}, fmt.Errorf("%w: container %s is %s right after start (exit code %d): is the agent binary static and runnable?",
			sandbox.ErrUnavailable, name, sb.State, code)
	}
	if info.State != nil {
		if err := pins.Verify(spec.Runtime, info.State.Pid); err != nil {
			r.removeDetached(ctx, resp.ID)
			return sandbox.Sandbox{}, fmt.Errorf("container %s: %w", name, err)
		}
	}
	return sb, nil
}

// Get implements sandbox.Runtime.
func (r *Runtime) Get(ctx context.Context, tenant, session string) (sandbox.Sandbox, error) {
	name := ContainerName(tenant, session)
	info, err := r.api.ContainerInspect(ctx, name)
	if err != nil {
		return sandbox.Sandbox{}, convert(err, "inspect container %s", name)
	}
	if info.Config == nil || info.Config.Labels[sandbox.LabelManaged] != "true" {
		return sandbox.Sandbox{}, fmt.Errorf("%w: container %s was not created by shellbox", sandbox.ErrConflict, name)
	}
	return fromInspect(info), nil
}

// List implements sandbox.Runtime.
func (r *Runtime) List(ctx context.Context, owner string) ([]sandbox.Sandbox, error) {
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true"))
	if owner != "" {
		f.Add("label", sandbox.LabelOwner+"="+owner)
	}
	cs, err := r.api.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, convert(err, "list containers")
	}
	out := make([]sandbox.Sandbox, 0, len(cs))
	for _, c := range cs {
		out = append(out, fromSummary(c))
	}
	return out, nil
}

// Remove implements sandbox.Runtime: a forced remove (SIGKILL, then
// delete) and the session's host directory, idempotent.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	info, err := r.api.ContainerInspect(ctx, id)
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return convert(err, "inspect container %s", id)
	}
	if err := r.removeContainer(ctx, id); err != nil {
		return err
	}
	if info.Config != nil && info.Config.Labels[sandbox.LabelManaged] == "true" &&
		hostDirOf(info.Mounts) == r.dirs.Path(info.Config.Labels[sandbox.LabelTenant], info.Config.Labels[sandbox.LabelSession]) {
		return r.dirs.Remove(info.Config.Labels[sandbox.LabelTenant], info.Config.Labels[sandbox.LabelSession])
	}
	return nil
}

// RemoveSession implements sandbox.SessionState: the session's workspace,
// and its host directory if a sandbox removed behind shellbox's back left
// it. The caller makes sure no sandbox of the session exists.
func (r *Runtime) RemoveSession(ctx context.Context, tenant, session string) (bool, error) {
	return r.dirs.RemoveSession(tenant, session)
}

// Sweep implements sandbox.Sweeper: host directories and workspaces of
// this runtime's state directory that neither a container on the engine
// (of any owner: its agent uses the directory) nor live claims.
func (r *Runtime) Sweep(ctx context.Context, owner string, live func(tenant, session string) bool) ([]string, error) {
	all, err := r.List(ctx, "")
	if err != nil {
		return nil, err
	}
	return r.dirs.SweepUnused(all, live)
}

func (r *Runtime) removeContainer(ctx context.Context, id string) error {
	err := r.api.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, isNotFound(err):
		return nil
	case isConflict(err):
		// "removal already in progress": someone else is removing it; it is
		// gone once inspect says so.
		for {
			if _, err := r.api.ContainerInspect(ctx, id); isNotFound(err) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: remove container %s: %v", sandbox.ErrUnavailable, id, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return convert(err, "remove container %s", id)
}

// Ping implements sandbox.Pinger.
func (r *Runtime) Ping(ctx context.Context) error {
	if _, err := r.api.Ping(ctx); err != nil {
		return convert(err, "ping")
	}
	return nil
}

// checkCgroupDriver refuses a tenant cgroup (sandbox.tenantCpus) on an
// engine whose cgroup driver is not cgroupfs: under systemd's a parent
// must be a slice, and its quota systemd's to set.
func (r *Runtime) checkCgroupDriver(ctx context.Context) error {
	r.mu.Lock()
	d := r.cgroupDriver
	r.mu.Unlock()
	if d == "" {
		info, err := r.api.Info(ctx)
		if err != nil {
			return convert(err, "info")
		}
		d = info.CgroupDriver
		r.mu.Lock()
		r.cgroupDriver = d
		r.mu.Unlock()
	}
	if d != "cgroupfs" {
		return fmt.Errorf("%w: sandbox.tenantCpus needs Docker's cgroupfs cgroup driver (daemon.json \"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]); this engine's is %q", sandbox.ErrUnavailable, d)
	}
	return nil
}

// Runtimes implements sandbox.RuntimeLister: the Spec runtimes whose
// engine runtime is registered with the engine.
func (r *Runtime) Runtimes(ctx context.Context) ([]string, error) {
	info, err := r.api.Info(ctx)
	if err != nil {
		return nil, convert(err, "info")
	}
	var out []string
	for _, name := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		if _, ok := info.Runtimes[r.engineRuntime(name)]; ok {
			out = append(out, name)
		}
	}
	r.mu.Lock()
	r.runtimes = out
	r.mu.Unlock()
	return out, nil
}

// checkRuntime fails early, and clearly, when the engine lacks a runtime;
// the engine's own error only comes at create. A runtime seen once is
// trusted from then on.
func (r *Runtime) checkRuntime(ctx context.Context, name string) error {
	r.mu.Lock()
	known := slices.Contains(r.runtimes, name)
	r.mu.Unlock()
	if known {
		return nil
	}
	have, err := r.Runtimes(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(have, name) {
		return fmt.Errorf("%w: runtime %q (engine runtime %q) is not registered with the Docker engine (have %v; .ci/setup-docker.sh registers runsc)",
			sandbox.ErrUnavailable, name, r.engineRuntime(name), have)
	}
	return nil
}

// removeDetached removes a container Create gave up on, even if ctx ended.
func (r *Runtime) removeDetached(ctx context.Context, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = r.removeContainer(rctx, id)
}

func fromInspect(info container.InspectResponse) sandbox.Sandbox {
	var labels map[string]string
	if info.Config != nil {
		labels = info.Config.Labels
	}
	sb := sandbox.Labelled(info.ID, labels)
	sb.State = sandbox.StateOther
	if info.Config != nil {
		sb.Settings = labels[sandbox.LabelSettings]
		sb.Image = info.Config.Image
	}
	if info.State != nil {
		sb.State = state(info.State.Status)
		sb.OOMKilled = info.State.OOMKilled
	}
	sb.Agent = endpoint(hostDirOf(info.Mounts))
	sb.Mounts = mountsOf(info.Mounts)
	if info.Config != nil {
		if ms, ok := sandbox.ParseMountsRecord(info.Config.Labels[sandbox.LabelMounts]); ok {
			sb.Mounts = ms
		}
	}
	sb.Created, _ = time.Parse(time.RFC3339Nano, info.Created)
	return sb
}

func fromSummary(c container.Summary) sandbox.Sandbox {
	sb := sandbox.Labelled(c.ID, c.Labels)
	sb.Settings = c.Labels[sandbox.LabelSettings]
	sb.Image = c.Image
	sb.State = state(c.State)
	sb.Agent = endpoint(hostDirOf(c.Mounts))
	sb.Mounts = mountsOf(c.Mounts)
	sb.Created = time.Unix(c.Created, 0)
	if ms, ok := sandbox.ParseMountsRecord(c.Labels[sandbox.LabelMounts]); ok {
		sb.Mounts = ms
	}
	return sb
}

// mountsOf returns the Spec.Mounts of a container: its binds other than
// the agent's, the host dir's and the workspace's, by target. (A container
// shellbox made records them in LabelMounts, as they were allowed: the
// engine's record names the pins they were mounted from.)
func mountsOf(mounts []container.MountPoint) []sandbox.Mount {
	var out []sandbox.Mount
	for _, m := range mounts {
		if m.Type != mount.TypeBind || m.Destination == sandbox.AgentPath || m.Destination == sandbox.HostDirMount || m.Destination == sandbox.WorkspacePath {
			continue
		}
		out = append(out, sandbox.Mount{Source: m.Source, Target: m.Destination, ReadOnly: !m.RW})
	}
	slices.SortFunc(out, func(a, b sandbox.Mount) int { return strings.Compare(a.Target, b.Target) })
	return out
}

// endpoint is the agent's endpoint in a host directory ("" : none).
func endpoint(dir string) agentapi.Endpoint {
	if dir == "" {
		return agentapi.Endpoint{}
	}
	return hostdir.Endpoint(dir)
}

func hostDirOf(mounts []container.MountPoint) string {
	for _, m := range mounts {
		if m.Destination == sandbox.HostDirMount {
			return m.Source
		}
	}
	return ""
}

func state(s container.ContainerState) sandbox.State {
	switch s {
	case container.StateCreated:
		return sandbox.StateCreated
	case container.StateRunning:
		return sandbox.StateRunning
	case container.StateExited:
		return sandbox.StateExited
	}
	return sandbox.StateOther
}
