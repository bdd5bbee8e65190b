package containerd

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostcgroup"
)

const (
	testAgent   = "/opt/shellbox/agent"
	testHostDir = "/var/lib/shellbox/sessions/t/s"
)

func testSpec(t *testing.T, opts ...sandbox.Opt) sandbox.Spec {
	t.Helper()
	spec, err := sandbox.NewSpec("acme", "s1", append([]sandbox.Opt{
		sandbox.WithImage("shellbox-test:latest"),
		sandbox.WithEnv("A", "1"),
		sandbox.WithLabels(map[string]string{"x": "y"}),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	spec.Owner = "srv"
	spec.AgentArgs = []string{"--uid", "1000"}
	return spec
}

// generate applies translate to containerd's default spec, as Create does
// after the image's config, without a host workspace.
func generate(t *testing.T, spec sandbox.Spec) *specs.Spec {
	t.Helper()
	return generateWith(t, spec, "")
}

func generateWith(t *testing.T, spec sandbox.Spec, workspace string) *specs.Spec {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), "shellbox")
	s, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: ContainerID(spec.Tenant, spec.Session)},
		translate(spec, spec.Mounts, testAgent, testHostDir, workspace)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTranslateProcess(t *testing.T) {
	s := generate(t, testSpec(t))
	p := s.Process
	if want := []string{sandbox.AgentPath, "--uid", "1000"}; !slices.Equal(p.Args, want) {
		t.Errorf("args %q, want %q", p.Args, want)
	}
	if p.User.UID != 0 || p.User.GID != 0 {
		t.Errorf("agent runs as %d:%d, want 0:0", p.User.UID, p.User.GID)
	}
	if p.Cwd != sandbox.WorkspacePath {
		t.Errorf("cwd %q", p.Cwd)
	}
	for _, kv := range []string{"A=1", sandbox.EnvSpillBytes + "=67108864"} {
		if !slices.Contains(p.Env, kv) {
			t.Errorf("env %q lacks %q", p.Env, kv)
		}
	}
	if !p.NoNewPrivileges {
		t.Error("no-new-privileges off")
	}
	c := p.Capabilities
	for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted} {
		got := slices.Sorted(slices.Values(set))
		if want := []string{"CAP_KILL", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID"}; !slices.Equal(got, want) {
			t.Errorf("%s capabilities %q, want %q", name, got, want)
		}
	}
	if len(c.Inheritable) != 0 || len(c.Ambient) != 0 {
		t.Errorf("inheritable %q, ambient %q: want none", c.Inheritable, c.Ambient)
	}
	if p.OOMScoreAdj == nil || *p.OOMScoreAdj != 0 {
		t.Errorf("oom_score_adj %v, want 0", p.OOMScoreAdj)
	}
	if s.Hostname != "sandbox" {
		t.Errorf("hostname %q", s.Hostname)
	}
	rl := map[string]uint64{}
	for _, r := range p.Rlimits {
		if r.Soft != r.Hard {
			t.Errorf("%s: soft %d != hard %d", r.Type, r.Soft, r.Hard)
		}
		rl[r.Type] = r.Hard
	}
	if v, ok := rl["RLIMIT_CORE"]; !ok || v != 0 {
		t.Errorf("RLIMIT_CORE %d (set: %v), want 0", v, ok)
	}
	if v, ok := rl["RLIMIT_MSGQUEUE"]; !ok || v != 0 {
		t.Errorf("RLIMIT_MSGQUEUE %d (set: %v), want 0: no message queues", v, ok)
	}
	if _, ok := rl["RLIMIT_NOFILE"]; ok {
		t.Error("RLIMIT_NOFILE set: the sandbox inherits the daemon's, as on Docker")
	}
	if _, ok := rl["RLIMIT_NPROC"]; ok {
		t.Error("RLIMIT_NPROC set on runc: it would count the uid's processes host-wide")
	}
}

func TestTranslateRootAndSeccomp(t *testing.T) {
	s := generate(t, testSpec(t))
	if s.Root == nil || !s.Root.Readonly {
		t.Error("root file system writable")
	}
	sc := s.Linux.Seccomp
	if sc == nil || sc.DefaultAction != specs.ActErrno || len(sc.Syscalls) == 0 {
		t.Fatalf("seccomp %+v: want the default profile (deny by default)", sc)
	}
	// The default profile allows privileged syscalls only for the
	// capabilities granted: with none of SYS_ADMIN, mount stays denied.
	for _, rule := range sc.Syscalls {
		if rule.Action == specs.ActAllow && slices.Contains(rule.Names, "mount") {
			t.Errorf("seccomp allows mount: %+v", rule)
		}
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/sys/firmware"} {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			t.Errorf("%s not masked", p)
		}
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/bus"} {
		if !slices.Contains(s.Linux.ReadonlyPaths, p) {
			t.Errorf("%s not read-only", p)
		}
	}
}

func TestTranslateNamespaces(t *testing.T) {
	s := generate(t, testSpec(t))
	got := map[specs.LinuxNamespaceType]string{}
	for _, ns := range s.Linux.Namespaces {
		if _, dup := got[ns.Type]; dup {
			t.Errorf("namespace %s twice", ns.Type)
		}
		got[ns.Type] = ns.Path
	}
	for _, typ := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace,
		specs.UTSNamespace, specs.MountNamespace, specs.CgroupNamespace} {
		path, ok := got[typ]
		if !ok {
			t.Errorf("no new %s namespace", typ)
		} else if path != "" {
			// A path would join an existing namespace (the host's, a CNI's).
			t.Errorf("%s namespace joins %s", typ, path)
		}
	}
	if _, ok := got[specs.UserNamespace]; ok {
		t.Error("user namespace: Docker's hardening has none")
	}
}

func TestTranslateResources(t *testing.T) {
	s := generate(t, testSpec(t, sandbox.WithCPUs(1.5), sandbox.WithMemory(768*sandbox.MiB), sandbox.WithPidsLimit(100)))
	r := s.Linux.Resources
	if r.Memory == nil || r.Memory.Limit == nil || *r.Memory.Limit != 768*sandbox.MiB {
		t.Errorf("memory %+v", r.Memory)
	}
	if r.Memory.Swap == nil || *r.Memory.Swap != 768*sandbox.MiB {
		t.Errorf("memory+swap %v, want = memory (no swap)", r.Memory.Swap)
	}
	if r.CPU == nil || r.CPU.Quota == nil || *r.CPU.Quota != 15000 || r.CPU.Period == nil || *r.CPU.Period != 10000 {
		t.Errorf("cpu %+v, want quota 15000 per 10000 (sandbox.CPUPeriod)", r.CPU)
	}
	if r.Pids == nil || r.Pids.Limit == nil || *r.Pids.Limit != agentapi.PidsCgroupLimit(100) {
		t.Errorf("pids %+v", r.Pids)
	}
	// Devices: deny everything first, then only the standard nodes.
	if len(r.Devices) == 0 || r.Devices[0].Allow || r.Devices[0].Access != "rwm" || r.Devices[0].Major != nil {
		t.Errorf("first device rule %+v, want deny all", r.Devices)
	}
	for _, d := range r.Devices[1:] {
		if d.Allow && (d.Major == nil || d.Type == "a") {
			t.Errorf("device rule %+v allows a whole class", d)
		}
	}
}

func TestTranslateRunsc(t *testing.T) {
	s := generate(t, testSpec(t, sandbox.WithRuntime(sandbox.RuntimeRunsc), sandbox.WithPidsLimit(64)))
	if got := *s.Linux.Resources.Pids.Limit; got != runscHostPids(64) {
		t.Errorf("host pids %d, want the backstop %d", got, runscHostPids(64))
	}
	if got := s.Annotations[runscContainerType]; got != "sandbox" {
		t.Errorf("annotation %s = %q: gVisor's shim hangs in create unless the container is a sandbox root", runscContainerType, got)
	}
	i := slices.IndexFunc(s.Process.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == "RLIMIT_NPROC" })
	if i < 0 || s.Process.Rlimits[i].Hard != 64 || s.Process.Rlimits[i].Soft != 64 {
		t.Errorf("rlimits %+v: want RLIMIT_NPROC 64", s.Process.Rlimits)
	}
	// The egress proxy's lookup capabilities, under gVisor only.
	c := s.Process.Capabilities
	for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted} {
		got := slices.Sorted(slices.Values(set))
		if want := []string{"CAP_DAC_READ_SEARCH", "CAP_KILL", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_PTRACE"}; !slices.Equal(got, want) {
			t.Errorf("%s capabilities %q, want %q", name, got, want)
		}
	}
	if len(c.Inheritable) != 0 || len(c.Ambient) != 0 {
		t.Errorf("inheritable %q, ambient %q: want none", c.Inheritable, c.Ambient)
	}
}

func TestTranslateMounts(t *testing.T) {
	spec := testSpec(t, sandbox.WithUser(1234, 2345), sandbox.WithWorkspaceSize(100*sandbox.MiB),
		sandbox.WithTmpSize(50*sandbox.MiB), sandbox.WithMounts(
			sandbox.Mount{Source: "/srv/data", Target: "/data", ReadOnly: true},
			sandbox.Mount{Source: "/srv/out", Target: "/out"},
		))
	s := generate(t, spec)
	by := map[string]specs.Mount{}
	for _, m := range s.Mounts {
		if _, dup := by[m.Destination]; dup {
			t.Errorf("two mounts on %s", m.Destination)
		}
		by[m.Destination] = m
	}
	has := func(m specs.Mount, opts ...string) {
		t.Helper()
		for _, o := range opts {
			if !slices.Contains(m.Options, o) {
				t.Errorf("%s: options %q lack %q", m.Destination, m.Options, o)
			}
		}
	}
	if _, ok := by["/run"]; ok {
		t.Error("writable /run tmpfs: Docker has none")
	}
	ws := by[sandbox.WorkspacePath]
	if ws.Type != "tmpfs" {
		t.Errorf("workspace %+v", ws)
	}
	has(ws, "size=104857600", "uid=1234", "gid=2345", "mode=0755", "nosuid", "nodev", "exec")
	tmp := by[sandbox.TmpPath]
	if tmp.Type != "tmpfs" {
		t.Errorf("tmp %+v", tmp)
	}
	has(tmp, "size=52428800", "mode=1777", "nosuid", "nodev", "exec")

	agent := by[sandbox.AgentPath]
	if agent.Source != testAgent || agent.Type != "bind" {
		t.Errorf("agent mount %+v", agent)
	}
	has(agent, "ro", "rprivate")
	hd := by[sandbox.HostDirMount]
	if hd.Source != testHostDir {
		t.Errorf("host dir mount %+v", hd)
	}
	has(hd, "rbind", "rw") // recursive: the spill tmpfs shows through

	data, out := by["/data"], by["/out"]
	if data.Source != "/srv/data" || out.Source != "/srv/out" {
		t.Errorf("mounts %+v %+v", data, out)
	}
	has(data, "bind", "ro", "rprivate")
	has(out, "bind", "rw", "rprivate")
	for _, m := range []specs.Mount{data, out} {
		if slices.Contains(m.Options, "rbind") {
			t.Errorf("%s recursive: %q", m.Destination, m.Options)
		}
	}

	// Docker's /dev/shm and mqueue: private, noexec, nosuid, nodev; the
	// cgroupfs read-only. /dev/shm is as big as /tmp (50 MiB here), once.
	has(by["/dev/shm"], "nosuid", "noexec", "nodev", "mode=1777", "size=52428800")
	if n := len(slices.DeleteFunc(slices.Clone(by["/dev/shm"].Options), func(o string) bool { return !strings.HasPrefix(o, "size=") })); n != 1 {
		t.Errorf("/dev/shm: %d size options: %q", n, by["/dev/shm"].Options)
	}
	if by["/dev/mqueue"].Type != "mqueue" {
		t.Errorf("mqueue %+v", by["/dev/mqueue"])
	}
	has(by["/dev/mqueue"], "nosuid", "noexec", "nodev")
	has(by["/sys/fs/cgroup"], "ro", "nosuid", "noexec", "nodev")
	has(by["/sys"], "ro")
	has(by["/proc"], "nosuid", "noexec", "nodev")
}

// TestTranslateWorkspace: a session's host workspace replaces the
// sandbox's own tmpfs at /workspace, bound alone (not recursively),
// nosuid and nodev, and is not one of the Spec's mounts when read back.
func TestTranslateWorkspace(t *testing.T) {
	const ws = "/state/workspaces/acme/s1"
	s := generateWith(t, testSpec(t), ws)
	var found []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == sandbox.WorkspacePath {
			found = append(found, m)
		}
	}
	if len(found) != 1 || found[0].Type != "bind" || found[0].Source != ws ||
		!slices.Equal(found[0].Options, []string{"bind", "rw", "nosuid", "nodev", "rprivate"}) {
		t.Errorf("workspace mounts %+v, want one bind of %s", found, ws)
	}
	spec, err := typeurl.MarshalAny(s)
	if err != nil {
		t.Fatal(err)
	}
	sb := describe(containers.Container{ID: "x", Spec: spec})
	for _, m := range sb.Mounts {
		if m.Target == sandbox.WorkspacePath {
			t.Errorf("the workspace is listed as a Spec mount: %+v", sb.Mounts)
		}
	}
}

func TestTranslateEgress(t *testing.T) {
	s := generate(t, testSpec(t, sandbox.WithNetwork(sandbox.NetworkEgress)))
	if !slices.Equal(s.Process.Args[len(s.Process.Args)-2:], []string{"--egress-listen", egresswire.DefaultListen}) {
		t.Errorf("args %q: want the egress proxy", s.Process.Args)
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace && ns.Path != "" {
			t.Errorf("egress joins netns %s: want loopback only", ns.Path)
		}
	}
}

func TestLabels(t *testing.T) {
	spec := testSpec(t)
	l := labels(spec, testHostDir)
	want := map[string]string{
		sandbox.LabelManaged: "true", sandbox.LabelTenant: "acme", sandbox.LabelSession: "s1",
		sandbox.LabelOwner: "srv", sandbox.LabelRuntime: "runc", sandbox.LabelNetwork: "none",
		LabelHostDir: testHostDir, "x": "y",
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("label %s = %q, want %q", k, l[k], v)
		}
	}
	if len(l) != len(want) {
		t.Errorf("labels %v", l)
	}
	if spec.Labels[sandbox.LabelManaged] != "" {
		t.Error("labels changed the spec's map")
	}
}

func TestContainerID(t *testing.T) {
	long := strings.Repeat("x", 64)
	pairs := [][2]string{
		{"acme", "s1"}, {"a-b", "c"}, {"a", "b-c"}, {"a.b", "c"}, {"a_b", "c"},
		{long, long}, {long, long[:63]}, {"a@b:c", "d..e--f"}, {"9", "_"}, {"Ü", "ß"},
		{"a", "-"}, {"a", "."},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		id := ContainerID(p[0], p[1])
		if err := identifiers.Validate(id); err != nil {
			t.Errorf("%q/%q: %q: %v", p[0], p[1], id, err)
		}
		if len(id) > maxIDLen {
			t.Errorf("%q: %d bytes", id, len(id))
		}
		if o, dup := seen[id]; dup {
			t.Errorf("%q/%q and %q/%q share %q", p[0], p[1], o[0], o[1], id)
		}
		seen[id] = p
		if ContainerID(p[0], p[1]) != id {
			t.Errorf("%q: not deterministic", id)
		}
	}
	if id := ContainerID("acme", "s1"); !strings.HasPrefix(id, "shellbox-acme-s1-") {
		t.Errorf("id %q: want shellbox-<tenant>-<session>-<hash>", id)
	}
}

// A tenant with a quota of all its sandboxes together has them below its
// cgroup (sandbox/hostcgroup); one without keeps containerd's default.
func TestTranslateTenantCgroup(t *testing.T) {
	s := generate(t, testSpec(t))
	if want := "/shellbox/" + ContainerID("acme", "s1"); s.Linux.CgroupsPath != want {
		t.Errorf("without tenantCpus: cgroupsPath %q, want containerd's default %q", s.Linux.CgroupsPath, want)
	}
	s = generate(t, testSpec(t, sandbox.WithCPUs(0.5), sandbox.WithTenantCPUs(2)))
	parent, err := hostcgroup.Parent("acme")
	if err != nil {
		t.Fatal(err)
	}
	if want := parent + "/" + ContainerID("acme", "s1"); s.Linux.CgroupsPath != want {
		t.Errorf("tenantCpus 2: cgroupsPath %q, want %q", s.Linux.CgroupsPath, want)
	}
	if r := s.Linux.Resources.CPU; r == nil || *r.Quota != 5000 || *r.Period != 10000 {
		t.Errorf("tenantCpus 2: the sandbox's own cpu %+v, want 5000 per 10000", r)
	}
}
