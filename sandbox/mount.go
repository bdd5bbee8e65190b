package sandbox

import (
	"encoding/json"
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
	// Root is the allowlist entry Source was allowed under: its resolved
	// source, Source itself or a directory above it. The runtime opens
	// Source beneath Root without following any symlink and mounts the
	// directory it opened, not the path (sandbox/hostdir.Pin): a symlink
	// swapped into Source's path after the check cannot redirect the mount.
	// Empty means Source.
	Root string `json:"root,omitempty"`
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
			case m.Root != "" && (strings.ContainsRune(m.Root, 0) || !filepath.IsAbs(m.Root) || filepath.Clean(m.Root) != m.Root):
				return invalid("mounts", "[%d]: root %q must be an absolute, clean host path", i, m.Root)
			case m.Root != "" && !confine.Within(m.Source, m.Root):
				return invalid("mounts", "[%d]: source %s is not below its root %s", i, m.Source, m.Root)
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

// EntryRoot is the directory m's source is opened beneath: Root, or
// Source when Root is empty.
func (m Mount) EntryRoot() string {
	if m.Root != "" {
		return m.Root
	}
	return m.Source
}

// LabelMounts is the label (Docker) or OCI annotation (containerd) that
// records a sandbox's mounts as they were allowed (JSON, MountsRecord):
// the engine's own record names the neutral paths the sources were pinned
// at for the mount (sandbox/hostdir.Pin), gone once the sandbox started.
const LabelMounts = "org.shellbox.mounts"

// MountsRecord is the value of LabelMounts for mounts.
func MountsRecord(mounts []Mount) string {
	rec := make([]Mount, len(mounts))
	for i, m := range mounts {
		rec[i] = Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly}
	}
	b, _ := json.Marshal(rec) // strings and bools only: cannot fail
	return string(b)
}

// ParseMountsRecord reads a LabelMounts value, sorted by target; ok is
// false for an empty or malformed one.
func ParseMountsRecord(v string) (mounts []Mount, ok bool) {
	if v == "" || json.Unmarshal([]byte(v), &mounts) != nil {
		return nil, false
	}
	if len(mounts) == 0 {
		return nil, true
	}
	slices.SortFunc(mounts, func(a, b Mount) int { return strings.Compare(a.Target, b.Target) })
	return mounts, true
}
