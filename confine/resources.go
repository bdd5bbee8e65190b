package confine

import (
	"fmt"
	"strings"
)

// Runtimes a sandbox may run on. runc is the kernel's own isolation
// (namespaces, cgroups, seccomp); runsc is gVisor, a user-space kernel
// between the workload and the host's.
const (
	RuntimeRunc  = "runc"
	RuntimeRunsc = "runsc"
)

// CheckRuntime checks a runtime name; the error lists the runtimes.
func CheckRuntime(r string) error {
	if r != RuntimeRunc && r != RuntimeRunsc {
		return fmt.Errorf("%q: must be %q or %q", r, RuntimeRunc, RuntimeRunsc)
	}
	return nil
}

// MinMemory is the smallest memory limit container engines accept.
const MinMemory int64 = 6 << 20

// The resources of a sandbox where neither the tenant's policy nor the
// server's configuration says otherwise: runc, 1 CPU, 1 GiB memory, 256
// processes, 512 MiB workspace, 128 MiB /tmp, 64 MiB of spill files,
// commands as uid/gid 1000.
const (
	DefaultRuntime                = RuntimeRunc
	DefaultCPUs           float64 = 1
	DefaultMemoryBytes    int64   = 1 << 30
	DefaultPidsLimit      int64   = 256
	DefaultWorkspaceBytes int64   = 512 << 20
	DefaultTmpBytes       int64   = 128 << 20
	DefaultSpillBytes     int64   = 64 << 20
	DefaultUID                    = 1000
	DefaultGID                    = 1000
)

// PermissionNetwork is the sandbox permission (a call's
// sandbox_permissions) that, once a policy grants it for a call, lets the
// call's commands out through the egress relay beyond the allowlist.
const PermissionNetwork = "network"

// Resources are a sandbox's resource caps, the one shape of them for every
// layer: the server's configuration (sandbox.*, whose keys are the
// mapstructure tags), the session layer's defaults and the sandbox Spec.
// The tenant's policy (policies.SandboxSettings) names WorkspaceBytes
// DiskBytes, as its tests do.
type Resources struct {
	// CPUs is the CPU quota in cores (0.5 = half a core).
	CPUs float64 `mapstructure:"cpus"`
	// TenantCPUs is the CPU quota in cores of all the tenant's sandboxes
	// on one host together (a parent cgroup of the tenant's, on docker and
	// containerd; sandbox/hostcgroup); 0 is none, each sandbox bounded by
	// CPUs alone. At least CPUs when set. Kubernetes places every pod in
	// a cgroup of its own: there a namespace's ResourceQuota is the tool.
	TenantCPUs float64 `mapstructure:"tenantCpus"`
	// MemoryBytes caps memory, swap included (no swap). tmpfs pages count
	// towards it: the workspace and /tmp live in memory.
	MemoryBytes int64 `mapstructure:"memoryBytes"`
	// PidsLimit caps the workload's processes and threads: on runc all users
	// together (the pids cgroup, whose limit is sandbox.PidsCgroupLimit: the
	// agent's threads come on top); on runsc per uid inside the sandbox
	// (RLIMIT_NPROC, which gVisor counts among its own tasks), the host's
	// pids cgroup being sized for gVisor's threads (see sandbox/docker).
	PidsLimit int64 `mapstructure:"pidsLimit"`
	// WorkspaceBytes and TmpBytes cap the writable /workspace and /tmp. Both are
	// tmpfs: on overlay storage (fuse-overlayfs included) the engine cannot
	// quota a directory, and tmpfs's size is the one limit every runtime
	// (runc and gVisor) enforces. So their sum must stay below MemoryBytes.
	// (A runtime with SessionState keeps the workspace's tmpfs per session,
	// on the host: the sandbox is charged for the pages it writes.)
	// TmpBytes also sizes the /dev/shm tmpfs (the runtimes' default is 64
	// MiB whatever the policy says); its pages count towards MemoryBytes.
	WorkspaceBytes int64 `mapstructure:"workspaceBytes"`
	TmpBytes       int64 `mapstructure:"tmpBytes"`
	// SpillBytes caps the spill files of the session together (the full output
	// of commands whose output outgrew the tail). 0 disables spilling.
	SpillBytes int64 `mapstructure:"spillBytes"`
}

// DefaultResources are the Default* caps above.
func DefaultResources() Resources {
	return Resources{CPUs: DefaultCPUs, MemoryBytes: DefaultMemoryBytes, PidsLimit: DefaultPidsLimit,
		WorkspaceBytes: DefaultWorkspaceBytes, TmpBytes: DefaultTmpBytes, SpillBytes: DefaultSpillBytes}
}

// Backing is how a runtime family backs a sandbox's writable volumes, which
// decides what counts towards MemoryBytes. It is the one owner of that
// rule: the runtimes check a Spec by it at creation and the policy loader
// checks a tenant's settings by every Backing at load, so a policy that
// loads (and passes `shellbox policy check`) runs on every runtime.
type Backing int

const (
	// BackingHost: docker and containerd. /workspace and /tmp are tmpfs
	// charged to the sandbox's memory; spill files are on the host's disk.
	BackingHost Backing = iota
	// BackingPod: kube. /workspace, /tmp and the spill volume are
	// memory-backed emptyDirs, all three charged to the pod's memory.
	BackingPod
)

// Backings are every runtime family's.
var Backings = []Backing{BackingHost, BackingPod}

func (b Backing) String() string {
	if b == BackingPod {
		return "kube (/workspace, /tmp and spill are memory-backed emptyDirs charged to the pod)"
	}
	return "docker and containerd (the /workspace and /tmp tmpfs are charged to the sandbox)"
}

// MemoryError is a Resources whose MemoryBytes does not exceed what a
// Backing charges to it. Its Error names Resources' keys; a layer with
// other names for them (a policy's sandbox.disk) formats Parts itself.
type MemoryError struct {
	Backing     Backing
	MemoryBytes int64
	// Parts are the charged fields, by Resources' key, and their bytes.
	Parts []MemoryPart
	// Sum is the Parts' bytes together.
	Sum int64
}

// MemoryPart is one field MemoryError sums.
type MemoryPart struct {
	Key   string // workspaceBytes, tmpBytes or spillBytes
	Bytes int64
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("memoryBytes %d must exceed %s on %s", e.MemoryBytes, e.Terms(nil), e.Backing)
}

// Terms is "a + b (x + y = z bytes)", each key renamed by name (nil: kept).
func (e *MemoryError) Terms(name func(key string) string) string {
	keys, vals := make([]string, len(e.Parts)), make([]string, len(e.Parts))
	for i, p := range e.Parts {
		keys[i] = p.Key
		if name != nil {
			keys[i] = name(p.Key)
		}
		vals[i] = fmt.Sprint(p.Bytes)
	}
	return fmt.Sprintf("%s (%s = %d bytes)", strings.Join(keys, " + "), strings.Join(vals, " + "), e.Sum)
}

// CheckMemory returns a *MemoryError if r.MemoryBytes does not exceed the
// volumes b charges to memory: the limit would be spent before the volumes
// are full, and the sandbox killed (or, on kube, every pod refused).
func (r Resources) CheckMemory(b Backing) error {
	parts := []MemoryPart{{"workspaceBytes", r.WorkspaceBytes}, {"tmpBytes", r.TmpBytes}}
	if b == BackingPod {
		parts = append(parts, MemoryPart{"spillBytes", r.SpillBytes})
	}
	var sum int64
	for _, p := range parts {
		sum += p.Bytes
	}
	if sum < r.MemoryBytes {
		return nil
	}
	return &MemoryError{Backing: b, MemoryBytes: r.MemoryBytes, Parts: parts, Sum: sum}
}
