package docker

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/system"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostcgroup"
	"github.com/shellbox/shellbox/sandbox/hostdir"
)

// tr translates with the host directory and agent the tests expect, and no
// host workspace.
func tr(spec sandbox.Spec) (*container.Config, *container.HostConfig) {
	return translate(spec, spec.Mounts, "/state/sessions/acme/s:1", "", "/opt/agent", spec.Runtime)
}

// TestTranslateWorkspace: a session's host workspace replaces the
// sandbox's own tmpfs at /workspace, bound alone (not what may be mounted
// below it), and is not one of the Spec's mounts when read back.
func TestTranslateWorkspace(t *testing.T) {
	spec := testSpec(t)
	_, hc := translate(spec, spec.Mounts, "/state/sessions/acme/s:1", "/state/workspaces/acme/s:1", "/opt/agent", spec.Runtime)
	if _, ok := hc.Tmpfs[sandbox.WorkspacePath]; ok {
		t.Errorf("a tmpfs at /workspace besides the host workspace: %v", hc.Tmpfs)
	}
	if _, ok := hc.Tmpfs[sandbox.TmpPath]; !ok {
		t.Errorf("/tmp lost its tmpfs: %v", hc.Tmpfs)
	}
	var found []mount.Mount
	for _, m := range hc.Mounts {
		if m.Target == sandbox.WorkspacePath {
			found = append(found, m)
		}
	}
	if len(found) != 1 || found[0].Type != mount.TypeBind || found[0].Source != "/state/workspaces/acme/s:1" || found[0].ReadOnly ||
		found[0].BindOptions == nil || !found[0].BindOptions.NonRecursive {
		t.Errorf("workspace mounts %+v, want one writable non-recursive bind of the host workspace", found)
	}
	got := mountsOf([]container.MountPoint{
		{Type: mount.TypeBind, Source: "/state/workspaces/acme/s:1", Destination: sandbox.WorkspacePath, RW: true},
		{Type: mount.TypeBind, Source: "/data", Destination: "/data", RW: true},
	})
	if len(got) != 1 || got[0].Target != "/data" {
		t.Errorf("mountsOf: %+v, want /data only", got)
	}
}

func testSpec(t *testing.T, opts ...sandbox.Opt) sandbox.Spec {
	t.Helper()
	s, err := sandbox.NewSpec("acme", "s:1", append([]sandbox.Opt{
		sandbox.WithImage("img:1"), sandbox.WithAgentArgs("--v"),
		sandbox.WithLabels(map[string]string{"x": "y"}), sandbox.WithEnv("K", "V"),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.Owner = "srv"
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTranslateEgress: a sandbox with egress still has no network interface
// but loopback; its agent runs the proxy there, and the label records it
// for a server that re-adopts the sandbox.
func TestTranslateEgress(t *testing.T) {
	cfg, hc := tr(testSpec(t, sandbox.WithNetwork(sandbox.NetworkEgress)))
	if !slices.Equal(cfg.Cmd, []string{"--v", "--egress-listen", "127.0.0.1:3128"}) {
		t.Errorf("cmd %q", cfg.Cmd)
	}
	if hc.NetworkMode != "none" || cfg.Labels[sandbox.LabelNetwork] != "egress" {
		t.Errorf("network mode %q, label %q", hc.NetworkMode, cfg.Labels[sandbox.LabelNetwork])
	}
	cfg, _ = tr(testSpec(t))
	if cfg.Labels[sandbox.LabelNetwork] != "none" || slices.Contains(cfg.Cmd, "--egress-listen") {
		t.Errorf("no egress: cmd %q, label %q", cfg.Cmd, cfg.Labels[sandbox.LabelNetwork])
	}
}

func TestTranslateRunc(t *testing.T) {
	spec := testSpec(t)
	cfg, hc := tr(spec)

	if cfg.User != "0:0" || cfg.WorkingDir != "/workspace" || !slices.Equal(cfg.Entrypoint, []string{"/.shellbox/agent"}) ||
		!slices.Equal(cfg.Cmd, []string{"--v"}) || cfg.Image != "img:1" {
		t.Errorf("config: %+v", cfg)
	}
	if !slices.Equal(cfg.Env, []string{"K=V", "SHELLBOX_SPILL_BYTES=67108864"}) {
		t.Errorf("env %v", cfg.Env)
	}
	for k, v := range map[string]string{
		"org.shellbox.managed": "true", "org.shellbox.tenant": "acme", "org.shellbox.session": "s:1",
		"org.shellbox.owner": "srv", "org.shellbox.runtime": "runc", "x": "y",
	} {
		if cfg.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], v)
		}
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Equal(hc.CapAdd, []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP"}) {
		t.Errorf("caps: drop %v add %v", hc.CapDrop, hc.CapAdd)
	}
	if !slices.Equal(hc.SecurityOpt, []string{"no-new-privileges"}) {
		t.Errorf("SecurityOpt %v", hc.SecurityOpt)
	}
	if !hc.ReadonlyRootfs || hc.NetworkMode != "none" || hc.Runtime != "runc" || hc.Privileged ||
		hc.LogConfig.Type != "none" || hc.Init == nil || *hc.Init || hc.OomScoreAdj != 0 ||
		hc.IpcMode != "private" || hc.CgroupnsMode != "private" || hc.AutoRemove {
		t.Errorf("host config: %+v", hc)
	}
	r := hc.Resources
	if r.Memory != sandbox.GiB || r.MemorySwap != sandbox.GiB || r.CPUQuota != 10000 || r.CPUPeriod != 10000 || r.NanoCPUs != 0 || r.CgroupParent != "" || *r.PidsLimit != agentapi.PidsCgroupLimit(256) {
		t.Errorf("resources: %+v", r)
	}
	if hc.Tmpfs["/tmp"] != "rw,exec,nosuid,nodev,size=134217728,mode=1777" ||
		hc.Tmpfs["/workspace"] != "rw,exec,nosuid,nodev,size=536870912,uid=1000,gid=1000,mode=0755" {
		t.Errorf("tmpfs %v", hc.Tmpfs)
	}
	want := []mount.Mount{
		{Type: "bind", Source: "/opt/agent", Target: "/.shellbox/agent", ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: "rprivate"}},
		{Type: "bind", Source: "/state/sessions/acme/s:1", Target: "/run/shellbox", BindOptions: &mount.BindOptions{Propagation: "rprivate"}},
	}
	if len(hc.Mounts) != 2 || hc.Mounts[0].Source != want[0].Source || !hc.Mounts[0].ReadOnly ||
		hc.Mounts[1].Source != want[1].Source || hc.Mounts[1].ReadOnly || hc.Mounts[1].Target != "/run/shellbox" {
		t.Errorf("mounts %+v", hc.Mounts)
	}
	if slices.ContainsFunc(r.Ulimits, func(u *container.Ulimit) bool { return u.Name == "nproc" }) {
		t.Errorf("runc must not use RLIMIT_NPROC (host-wide per uid)")
	}
	// No message queues; /dev/shm as big as /tmp.
	if !slices.ContainsFunc(r.Ulimits, func(u *container.Ulimit) bool { return u.Name == "msgqueue" && u.Soft == 0 && u.Hard == 0 }) {
		t.Errorf("ulimits %+v: want msgqueue 0", r.Ulimits)
	}
	if hc.ShmSize != 134217728 {
		t.Errorf("ShmSize %d, want /tmp's 134217728", hc.ShmSize)
	}
}

func TestTranslateRunsc(t *testing.T) {
	_, hc := tr(testSpec(t, sandbox.WithRuntime(sandbox.RuntimeRunsc), sandbox.WithPidsLimit(100)))
	if hc.Runtime != "runsc" || *hc.PidsLimit != 16*100+512 {
		t.Errorf("runtime %q pids %d", hc.Runtime, *hc.PidsLimit)
	}
	i := slices.IndexFunc(hc.Ulimits, func(u *container.Ulimit) bool { return u.Name == "nproc" })
	if i < 0 || hc.Ulimits[i].Soft != 100 || hc.Ulimits[i].Hard != 100 {
		t.Errorf("ulimits %+v", hc.Ulimits)
	}
	// The egress proxy's lookup capabilities, under gVisor only.
	if want := []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}; !slices.Equal(hc.CapAdd, want) {
		t.Errorf("CapAdd %v, want %v", hc.CapAdd, want)
	}
}

// Host directory mounts are binds after shellbox's own, read-only as asked,
// rprivate and non-recursive under either runtime.
func TestTranslateMounts(t *testing.T) {
	for _, rt := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		_, hc := tr(testSpec(t, sandbox.WithRuntime(rt), sandbox.WithMounts(
			sandbox.Mount{Source: "/srv/data", Target: "/data", ReadOnly: true},
			sandbox.Mount{Source: "/srv/scratch", Target: "/scratch"},
		)))
		if len(hc.Mounts) != 4 {
			t.Fatalf("%s: mounts %+v", rt, hc.Mounts)
		}
		want := []mount.Mount{
			{Type: "bind", Source: "/srv/data", Target: "/data", ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: "rprivate", NonRecursive: true}},
			{Type: "bind", Source: "/srv/scratch", Target: "/scratch", ReadOnly: false,
				BindOptions: &mount.BindOptions{Propagation: "rprivate", NonRecursive: true}},
		}
		for i, w := range want {
			g := hc.Mounts[2+i]
			if g.Type != w.Type || g.Source != w.Source || g.Target != w.Target || g.ReadOnly != w.ReadOnly ||
				g.BindOptions == nil || *g.BindOptions != *w.BindOptions {
				t.Errorf("%s: mount %d = %+v (bind %+v), want %+v", rt, i, g, g.BindOptions, w)
			}
		}
	}
}

func TestContainerName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)
	names := map[string]bool{}
	for _, p := range [][2]string{{"a-b", "c"}, {"a", "b-c"}, {"t", "s:1"}, {"t", "s_1"}, {"u@x", "s"}} {
		n := ContainerName(p[0], p[1])
		if !valid.MatchString(n) {
			t.Errorf("%q is not a valid container name", n)
		}
		if names[n] {
			t.Errorf("%v collides: %s", p, n)
		}
		names[n] = true
	}
	if ContainerName("t", "s") != ContainerName("t", "s") {
		t.Errorf("not deterministic")
	}
}

// errAPI answers every call with one error; only the error mapping is under
// test (the engine's behaviour is tested against a real engine).
type errAPI struct {
	API
	err error
}

func (e errAPI) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	return container.InspectResponse{}, e.err
}

func (e errAPI) ContainerRemove(context.Context, string, container.RemoveOptions) error { return e.err }

func (e errAPI) Info(context.Context) (system.Info, error) { return system.Info{}, e.err }

func TestErrorClasses(t *testing.T) {
	ctx := context.Background()
	newRT := func(api API) *Runtime {
		r, err := New(api, Config{StateDir: t.TempDir(), AgentBinary: "/nonexistent/agent", Quota: hostdir.QuotaAgent})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := newRT(errAPI{err: cerrdefs.ErrNotFound.WithMessage("No such container")})
	if _, err := r.Get(ctx, "t", "s"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("not found: %v", err)
	}
	if err := r.Remove(ctx, "x"); err != nil {
		t.Errorf("Remove of a missing container: %v", err)
	}
	r = newRT(errAPI{err: errors.New("Cannot connect to the Docker daemon")})
	if _, err := r.Get(ctx, "t", "s"); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("unreachable: %v", err)
	}
	if _, err := r.Create(ctx, testSpec(t)); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "agent binary") {
		t.Errorf("Create with a missing agent binary: %v", err)
	}
	if _, err := New(errAPI{}, Config{StateDir: "relative", AgentBinary: "/a"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("relative state dir: %v", err)
	}
	if _, err := New(errAPI{}, Config{StateDir: "/s"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("no agent binary: %v", err)
	}
	r = newRT(errAPI{err: context.DeadlineExceeded})
	if _, err := r.Get(ctx, "t", "s"); !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: %v", err)
	}
}

// A tenant with a quota of all its sandboxes together has them below its
// cgroup (sandbox/hostcgroup); one without keeps Docker's default parent.
func TestTranslateTenantCgroup(t *testing.T) {
	spec := testSpec(t)
	spec.CPUs, spec.TenantCPUs = 0.5, 2
	_, hc := tr(spec)
	want, err := hostcgroup.Parent(spec.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	if hc.CgroupParent != want || hc.CPUQuota != 5000 || hc.CPUPeriod != 10000 {
		t.Errorf("tenantCpus 2: parent %q, cpu %d per %d; want %q, 5000 per 10000", hc.CgroupParent, hc.CPUQuota, hc.CPUPeriod, want)
	}
}
