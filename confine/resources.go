package confine

import "fmt"

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
