package confine

import (
	"fmt"
	"path"
	"strings"
)

// Paths inside every sandbox.
const (
	// AgentPath is where the agent binary is bind-mounted, read-only; it is
	// the sandbox's PID 1.
	AgentPath = "/.shellbox/agent"
	// HostDirMount is the agent's directory: its socket (single-host
	// runtimes) and spill files (spill/) are there. A single-host runtime
	// bind-mounts the session's host directory on it; Kubernetes an emptyDir.
	HostDirMount = "/run/shellbox"
	// WorkspacePath is the writable, size-limited working directory.
	WorkspacePath = "/workspace"
	// TmpPath is the writable, size-limited /tmp.
	TmpPath = "/tmp"
)

// MaxMounts bounds a sandbox's host directory mounts.
const MaxMounts = 32

// reservedTargets are the paths inside a sandbox that shellbox, the kernel
// or the engine own. A mount may be neither at, above nor below one of them:
// above would hide them, below would put a host directory inside shellbox's
// own mounts. /etc/hosts, /etc/hostname and /etc/resolv.conf are the
// engine's bind mounts; a mount above them (/etc) would make the engine
// create its mount points in the host directory.
var reservedTargets = []string{
	path.Dir(AgentPath), HostDirMount, WorkspacePath, TmpPath,
	"/proc", "/sys", "/dev", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf",
}

// CheckMountTarget checks the target of a mount: an absolute, clean path
// that does not overlap a path shellbox or the engine manages inside every
// sandbox. The error says which.
func CheckMountTarget(target string) error {
	switch {
	case strings.ContainsRune(target, 0):
		return fmt.Errorf("target %q contains a NUL byte", target)
	case !path.IsAbs(target):
		return fmt.Errorf("target %q must be an absolute path", target)
	case path.Clean(target) != target:
		return fmt.Errorf("target %q is not clean (%s)", target, path.Clean(target))
	}
	for _, r := range reservedTargets {
		if Overlaps(target, r) {
			return fmt.Errorf("target %q overlaps %s, which shellbox or the engine manages in every sandbox", target, r)
		}
	}
	return nil
}

// Within reports whether p is dir or below it (both clean, slash-separated).
func Within(p, dir string) bool { return within(p, dir) }

// within reports whether p is dir or below it (both clean, slash-separated).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Overlaps reports whether two clean paths are the same or one is below the
// other.
func Overlaps(a, b string) bool { return within(a, b) || within(b, a) }
