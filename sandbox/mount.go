package sandbox

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Mount is a host directory bind-mounted into a sandbox.
type Mount struct {
	// Source is the host directory: absolute, clean and already resolved
	// (no symlink in it), since whoever allowed it checked that path. It
	// must exist and be a directory when the sandbox is created.
	Source string `json:"source"`
	// Target is where commands see it: absolute, clean, apart from every
	// path shellbox or the engine manages (CheckMountTarget) and from the
	// other mounts' targets.
	Target string `json:"target"`
	// ReadOnly mounts it read-only.
	ReadOnly bool `json:"readOnly"`
}

// MaxMounts bounds a sandbox's mounts.
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
		if within(target, r) || within(r, target) {
			return fmt.Errorf("target %q overlaps %s, which shellbox or the engine manages in every sandbox", target, r)
		}
	}
	return nil
}

// within reports whether p is dir or below it (both clean, slash-separated).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Overlaps reports whether two clean paths are the same or one is below the
// other.
func Overlaps(a, b string) bool { return within(a, b) || within(b, a) }

// WithMounts sets the sandbox's host directory mounts (replacing any
// before). Sources must be absolute and clean host paths, targets pass
// CheckMountTarget, and no two targets overlap.
func WithMounts(mounts ...Mount) Opt {
	return func(s *Spec) error {
		if len(mounts) > MaxMounts {
			return invalid("mounts", "%d mounts: at most %d", len(mounts), MaxMounts)
		}
		for i, m := range mounts {
			switch {
			case strings.ContainsRune(m.Source, 0):
				return invalid("mounts", "[%d]: source %q contains a NUL byte", i, m.Source)
			case !filepath.IsAbs(m.Source) || filepath.Clean(m.Source) != m.Source:
				return invalid("mounts", "[%d]: source %q must be an absolute, clean host path", i, m.Source)
			}
			if err := CheckMountTarget(m.Target); err != nil {
				return invalid("mounts", "[%d]: %v", i, err)
			}
			for j, o := range mounts[:i] {
				if Overlaps(m.Target, o.Target) {
					return invalid("mounts", "[%d]: target %s overlaps the target %s of mounts[%d]", i, m.Target, o.Target, j)
				}
			}
		}
		s.Mounts = slices.Clone(mounts)
		return nil
	}
}

// CheckMountSources checks, on the host, that every mount source of s is
// a directory that exists and is still the resolved path it was when
// allowed (a symlink swapped into it since is refused). Backends call it
// when they create the sandbox. What remains is the window between this
// check and the engine's mount, which the engine resolves again; paths an
// untrusted party can rename inside should not be allowlisted.
func (s Spec) CheckMountSources() error {
	for i, m := range s.Mounts {
		real, err := filepath.EvalSymlinks(m.Source)
		if err != nil {
			return invalid("mounts", "[%d]: source: %v", i, err)
		}
		if real != m.Source {
			return invalid("mounts", "[%d]: source %s now resolves to %s (a symlink was put in its path since it was allowed)", i, m.Source, real)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return invalid("mounts", "[%d]: source: %v", i, err)
		}
		if !fi.IsDir() {
			return invalid("mounts", "[%d]: source %s is not a directory", i, m.Source)
		}
	}
	return nil
}
