package containerd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostcgroup"
)

// LabelHostDir records a sandbox's host directory on its container, so Get,
// List and Remove find it without the Spec.
const LabelHostDir = "org.shellbox.hostdir"

// maxIDLen is the longest container id containerd accepts
// (core/identifiers).
const maxIDLen = 76

// partLen bounds each of the tenant and session parts of a container id, so
// that "shellbox-" + 2 parts + the hash stays within maxIDLen.
const partLen = 24

// ContainerID returns the container id of a session's sandbox:
// shellbox-<tenant>-<session>-<hash>. containerd ids are stricter than
// Docker names (alphanumeric components joined by single '.', '_' or '-', at
// most 76 bytes), so each id is sanitised (other characters become '-',
// runs of separators collapse to one), cut to 24 bytes, and followed by a
// hash of the exact pair: pairs that sanitise or cut alike never share an
// id. The id makes a second create for a session fail, and lets Get find a
// session's sandbox with one lookup.
func ContainerID(tenant, session string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + session))
	id := "shellbox"
	for _, p := range []string{part(tenant), part(session)} {
		if p != "" {
			id += "-" + p
		}
	}
	return id + "-" + hex.EncodeToString(sum[:5])
}

// part is one id sanitised to identifier components and cut to partLen.
func part(id string) string {
	var b strings.Builder
	sep := true // at the start, a separator would be the second in a row
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
			sep = false
		case !sep:
			if r == '.' || r == '_' {
				b.WriteRune(r)
			} else {
				b.WriteByte('-')
			}
			sep = true
		}
	}
	s := b.String()
	if len(s) > partLen {
		s = s[:partLen]
	}
	return strings.TrimRight(s, "._-")
}

// Capabilities the agent (PID 1, uid 0) keeps: SETUID and SETGID to start
// each command as the sandbox user with its own supplementary group, KILL to
// signal commands that are no longer its uid's. A command gets none of them:
// changing uid from 0 to non-zero clears the permitted and effective sets,
// and no-new-privileges stops setuid binaries from getting any back. The
// same set as sandbox/docker.
//
// CAP_SETPCAP is for the agent's first act: it empties the bounding set
// (which commands inherit) of all its threads, then drops CAP_SETPCAP
// (agent, capabilities.go), so a command's CapBnd is 0.
var agentCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP"}

// runscContainerType is the annotation by which gVisor's shim tells a
// sandbox's root container (specutils.ContainerdContainerTypeAnnotation).
const runscContainerType = "io.kubernetes.cri.container-type"

// labels returns the container's labels: spec.Labels plus the reserved
// org.shellbox.* labels and the host directory.
func labels(spec sandbox.Spec, hostDir string) map[string]string {
	l := spec.ReservedLabels()
	l[LabelHostDir] = hostDir
	return l
}

// records are the OCI annotations that keep what the container's own
// record cannot say: spec.Mounts as allowed (the mounts name pinned
// paths) and spec.Settings (labels are bounded by 4,096 bytes).
func records(spec sandbox.Spec) map[string]string {
	a := map[string]string{sandbox.LabelMounts: sandbox.MountsRecord(spec.Mounts)}
	if spec.Settings != "" {
		a[sandbox.LabelSettings] = spec.Settings
	}
	return a
}

// translate turns a validated Spec into the OCI spec options of its
// container, to apply after the image's config (oci.WithImageConfig, which
// needs the image and is the caller's). binds are spec.Mounts as the
// engine mounts them (their sources pinned at neutral paths, hostdir.Pin;
// spec.Mounts themselves are recorded in the annotation LabelMounts),
// agentBinary is the agent's host path, hostDir the session's host
// directory, workspace the session's host workspace ("": none, the sandbox
// gets a tmpfs of its own). It is pure; every hardening decision of the
// containerd backend is here, and they are Docker's (sandbox/docker's
// translate), spelled in OCI terms.
func translate(spec sandbox.Spec, binds []sandbox.Mount, agentBinary, hostDir, workspace string) []oci.SpecOpts {
	env := slices.Clone(spec.Env)
	env = append(env, sandbox.EnvSpillBytes+"="+strconv.FormatInt(spec.SpillBytes, 10))

	args := append([]string{sandbox.AgentPath}, spec.AgentArgs...)
	if spec.Network == sandbox.NetworkEgress {
		// Still no interface but loopback (the namespaces below): the
		// agent's proxy listens there and the server relays its connections.
		args = append(args, "--egress-listen", egresswire.DefaultListen)
	}

	// The commands' limit, plus the agent's and its exec guard's threads
	// (agentapi.PidsCgroupLimit).
	pids := agentapi.PidsCgroupLimit(spec.PidsLimit)
	quota, period := sandbox.CPUQuota(spec.CPUs)
	rlimits := []oci.SpecOpts{
		oci.WithRlimit(&specs.POSIXRlimit{Type: "RLIMIT_CORE", Hard: 0, Soft: 0}),
		// No POSIX message queues (as sandbox/docker): mq_open that creates
		// one fails, so /dev/mqueue is no writable space.
		oci.WithRlimit(&specs.POSIXRlimit{Type: "RLIMIT_MSGQUEUE", Hard: 0, Soft: 0}),
		// No RLIMIT_NOFILE: the sandbox inherits the daemon's, as Docker's
		// containers inherit dockerd's. containerd's default spec sets 1024,
		// which builds outgrow; a higher one fails where root cannot raise
		// its hard limit (no CAP_SYS_RESOURCE).
		withoutRlimit("RLIMIT_NOFILE"),
	}
	if spec.Runtime == sandbox.RuntimeRunsc {
		// Under gVisor the pids cgroup counts the gVisor kernel's host
		// threads, not the workload's processes: the workload's limit is
		// RLIMIT_NPROC, which gVisor counts per uid among its own tasks, and
		// the cgroup stays as a host backstop (as sandbox/docker does; on
		// runc RLIMIT_NPROC would count the uid's processes across the host).
		pids = runscHostPids(spec.PidsLimit)
		n := uint64(spec.PidsLimit)
		rlimits = append(rlimits,
			oci.WithRlimit(&specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: n, Soft: n}),
			// gVisor's shim gives a container its stdio (/dev/null here)
			// only when it is a sandbox's root, which it reads from this
			// annotation (CRI sets it). Without it, `runsc create` runs with
			// the shim's output pipe, the sandbox process inherits it, and
			// the shim waits for it to close forever: task create hangs.
			oci.WithAnnotations(map[string]string{runscContainerType: "sandbox"}))
	}

	mounts := []specs.Mount{
		{
			// Docker mounts a read-only cgroupfs (of the sandbox's own cgroup
			// namespace); the agent reads it to tell whether it can give
			// commands cgroups of their own.
			Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
			Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"},
		},
		{
			// tmpfs is the only way to cap the writable directories: overlay
			// snapshots have no per-container quota. "exec": agents run
			// scripts they write to /workspace and /tmp.
			Destination: sandbox.TmpPath, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"rw", "exec", "nosuid", "nodev", fmt.Sprintf("size=%d", spec.TmpBytes), "mode=1777"},
		},
		workspaceMount(spec, workspace),
		{
			Destination: sandbox.AgentPath, Type: "bind", Source: agentBinary,
			Options: []string{"rbind", "ro", "rprivate"},
		},
		{
			// Recursive, so the spill tmpfs mounted on the host's spill/ is
			// what the sandbox sees too. Writable, for the agent (uid 0);
			// commands cannot write: the directories are root's, 0755.
			Destination: sandbox.HostDirMount, Type: "bind", Source: hostDir,
			Options: []string{"rbind", "rw", "rprivate"},
		},
	}
	for _, m := range binds {
		// Non-recursive ("bind", not "rbind"): an allowlisted directory
		// should not bring whatever the host mounted under it, nor leave
		// those mounts writable under a read-only bind. no-new-privileges
		// and the empty capability sets make setuid files inert; the device
		// cgroup (runc) or gVisor's own device table keeps device nodes
		// closed.
		rw := "rw"
		if m.ReadOnly {
			rw = "ro"
		}
		mounts = append(mounts, specs.Mount{
			Destination: m.Target, Type: "bind", Source: m.Source,
			Options: []string{"bind", rw, "rprivate"},
		})
	}

	caps := slices.Clone(agentCaps)
	if spec.Runtime == sandbox.RuntimeRunsc {
		// For the egress proxy's lookups (sandbox.GVisorLookupCaps).
		caps = append(caps, sandbox.GVisorLookupCaps...)
	}
	zero := 0
	opts := []oci.SpecOpts{
		// The agent is PID 1, as root: it runs each command as spec.UID:GID.
		oci.WithProcessArgs(args...),
		oci.WithEnv(env),
		oci.WithProcessCwd(sandbox.WorkspacePath),
		oci.WithUIDGID(0, 0),
		oci.WithHostname("sandbox"),
		oci.WithCapabilities(caps),
		oci.WithAmbientCapabilities(nil),
		oci.WithNoNewPrivileges,
		// After the capabilities: the default profile allows the syscalls
		// the capabilities grant (as Docker's does), so it must see them.
		seccomp.WithDefaultProfile(),
		oci.WithRootFSReadonly(),
		// New namespaces of every kind Docker gives: a network namespace
		// with no interface but loopback (runc brings lo up in a new
		// namespace; gVisor's netstack sees only lo), private IPC (so
		// /dev/shm and mqueue are the sandbox's own) and cgroup.
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.PIDNamespace}),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace}),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.IPCNamespace}),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.UTSNamespace}),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.MountNamespace}),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.CgroupNamespace}),
		// containerd's default spec has a writable tmpfs on /run; Docker's
		// has none (the image's /run, read-only).
		oci.WithoutRunMount,
		oci.WithoutMounts("/sys/fs/cgroup", sandbox.TmpPath, sandbox.WorkspacePath, sandbox.AgentPath, sandbox.HostDirMount),
		oci.WithMounts(mounts),
		withShmSize(spec.TmpBytes),
		oci.WithAnnotations(records(spec)),
		oci.WithDefaultUnixDevices,
		oci.WithMemoryLimit(uint64(spec.MemoryBytes)),
		oci.WithMemorySwap(spec.MemoryBytes),  // = the limit: no swap
		oci.WithCPUCFS(quota, uint64(period)), // over sandbox.CPUPeriod, not 100 ms
		withTenantCgroup(spec),
		oci.WithPidsLimit(pids),
		func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
			s.Process.OOMScoreAdj = &zero // as Docker: the agent raises its commands' own
			return nil
		},
	}
	return append(opts, rlimits...)
}

// workspaceMount is /workspace: the session's host workspace, a tmpfs of
// spec.WorkspaceBytes that shellbox mounted on the host (sandbox/hostdir)
// and that outlives the container, so the session's next sandbox finds its
// files; without one, a tmpfs of the sandbox's own.
func workspaceMount(spec sandbox.Spec, workspace string) specs.Mount {
	if workspace != "" {
		return specs.Mount{
			Destination: sandbox.WorkspacePath, Type: "bind", Source: workspace,
			Options: []string{"bind", "rw", "nosuid", "nodev", "rprivate"},
		}
	}
	return specs.Mount{
		Destination: sandbox.WorkspacePath, Type: "tmpfs", Source: "tmpfs",
		Options: []string{"rw", "exec", "nosuid", "nodev", fmt.Sprintf("size=%d", spec.WorkspaceBytes),
			fmt.Sprintf("uid=%d", spec.UID), fmt.Sprintf("gid=%d", spec.GID), "mode=0755"},
	}
}

// withTenantCgroup places the sandbox's cgroup below its tenant's when
// the tenant has a quota of all its sandboxes together (Spec.TenantCPUs,
// sandbox/hostcgroup; Create writes the quota first): cgroupfs's path
// <parent>/<container id>. Without one, containerd's default
// (/<namespace>/<id>).
func withTenantCgroup(spec sandbox.Spec) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, c *containers.Container, s *specs.Spec) error {
		if spec.TenantCPUs <= 0 {
			return nil
		}
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		parent, err := hostcgroup.Parent(spec.Tenant)
		if err != nil {
			return fmt.Errorf("%w: %w", sandbox.ErrInvalid, err)
		}
		s.Linux.CgroupsPath = parent + "/" + c.ID
		return nil
	}
}

// withShmSize sizes the /dev/shm tmpfs of containerd's default spec (64
// MiB): as big as /tmp, the same scratch budget of the policy, as
// sandbox/docker does (ShmSize).
func withShmSize(bytes int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		for i, m := range s.Mounts {
			if m.Destination != "/dev/shm" {
				continue
			}
			opts := slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return strings.HasPrefix(o, "size=") })
			s.Mounts[i].Options = append(opts, "size="+strconv.FormatInt(bytes, 10))
			return nil
		}
		return fmt.Errorf("%w: containerd: the default spec has no /dev/shm mount to size", sandbox.ErrUnavailable)
	}
}

// withoutRlimit removes an rlimit of the spec.
func withoutRlimit(typ string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Process != nil {
			s.Process.Rlimits = slices.DeleteFunc(s.Process.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == typ })
		}
		return nil
	}
}

// runscHostPids is the host pids cgroup limit of a gVisor sandbox whose
// workload may have n tasks (sandbox/docker measured it on runsc 2022-12).
func runscHostPids(n int64) int64 { return 16*n + 512 }
