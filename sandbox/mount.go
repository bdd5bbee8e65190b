package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/shellbox/shellbox/confine"
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
const MaxMounts = confine.MaxMounts

// CheckMountTarget checks the target of a mount: an absolute, clean path
// that does not overlap a path shellbox or the engine manages inside every
// sandbox (confine.CheckMountTarget). The error says which.
func CheckMountTarget(target string) error { return confine.CheckMountTarget(target) }

// Overlaps reports whether two clean paths are the same or one is below the
// other.
func Overlaps(a, b string) bool { return confine.Overlaps(a, b) }

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
