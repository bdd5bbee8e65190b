package policies

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/executor"
)

// Classes of the errors of SessionMounts: each wraps one, the class of
// errdefs itself, which the server maps to a status.
var (
	// ErrNotAllowed: a session asked for something its tenant's policy
	// does not allow (a mount outside sandbox.mounts, or read-write where
	// the entry is read-only).
	ErrNotAllowed = errdefs.ErrNotAllowed
	// ErrInvalid: a malformed or impossible request (a relative source, a
	// target shellbox reserves, two overlapping targets, a source that is
	// not a directory).
	ErrInvalid = errdefs.ErrInvalid
	// ErrUnavailable: a directory the policy lists is not there.
	ErrUnavailable = errdefs.ErrUnavailable
)

// compileMounts checks sandbox.mounts: absolute host sources (not the whole
// filesystem), targets that are absolute and clear of what shellbox and the
// engine manage in a sandbox, no two targets overlapping (a session gets
// them all at once), at most confine.MaxMounts. Paths are cleaned.
func compileMounts(l *located, p *Policy, mounts []mountSchema) {
	if len(mounts) > confine.MaxMounts {
		l.addf("sandbox.mounts", "%d mounts: at most %d", len(mounts), confine.MaxMounts)
	}
	for i, m := range mounts {
		key := fmt.Sprintf("sandbox.mounts[%d]", i)
		src, tgt := filepath.Clean(m.Source), path.Clean(m.Target)
		switch {
		case !filepath.IsAbs(m.Source) || strings.ContainsRune(m.Source, 0):
			l.addf(key+".source", "%q must be an absolute host path", m.Source)
		case src == "/":
			l.addf(key+".source", "%q is the whole host filesystem", m.Source)
		}
		if err := confine.CheckMountTarget(tgt); err != nil {
			l.addf(key+".target", "%v", err)
		}
		for j, o := range p.Mounts {
			if confine.Overlaps(tgt, o.Target) {
				l.addf(key+".target", "%s overlaps sandbox.mounts[%d].target %s (a session gets every entry)", tgt, j, o.Target)
			}
		}
		ro := true
		if m.ReadOnly != nil {
			ro = *m.ReadOnly
		}
		p.Mounts = append(p.Mounts, Mount{Source: src, Target: tgt, ReadOnly: ro})
	}
}

// MountRequest is a mount a new session asks for.
type MountRequest struct {
	// Source is a host directory: a source of sandbox.mounts or a directory
	// below one.
	Source string
	// Target is where the sandbox sees it. Empty: the entry's target joined
	// with Source's path below the entry's source.
	Target string
	// ReadOnly asks for a read-only mount; false asks for read-write, which
	// only a read-write entry allows.
	ReadOnly bool
}

// mountError is an error of SessionMounts: its message names the request
// or the policy key, and it wraps its class.
type mountError struct {
	class error
	msg   string
}

func (e *mountError) Error() string { return e.msg }
func (e *mountError) Unwrap() error { return e.class }

func mountErrorf(class error, format string, args ...any) error {
	return &mountError{class: class, msg: fmt.Sprintf(format, args...)}
}

// SessionMounts returns the mounts of a new session of the tenant, with
// host sources resolved. requested nil: every entry of sandbox.mounts, as
// listed. Otherwise exactly the requested mounts (none for an empty list),
// each within the allowlist: its source, once symlinks are resolved on the
// host, is an entry's source or below it (the most specific entry decides),
// and it is read-write only where that entry is.
//
// It is the one part of the policy that looks at the host filesystem:
// containment is checked where the files are, after resolution, so a
// symlink below an allowed directory cannot lead out of it; a request whose
// path is not even lexically below an entry is refused before anything on
// the host is looked at, so the answers tell nothing about other paths.
// The resolved paths go to the sandbox (the session layer makes them its
// spec's mounts) with their entries' (Root): the sandbox opens each
// beneath its entry, following no symlink, and mounts what it opened, so a
// symlink swapped in after this check cannot redirect the mount.
func (p *Policy) SessionMounts(requested []MountRequest) ([]Mount, error) {
	if requested == nil {
		return p.defaultMounts()
	}
	if len(requested) > confine.MaxMounts {
		return nil, mountErrorf(ErrInvalid, "mounts: %d requested: at most %d", len(requested), confine.MaxMounts)
	}
	// The entries' sources resolved; "" where one does not resolve (it
	// allows nothing then).
	roots := make([]string, len(p.Mounts))
	for i, e := range p.Mounts {
		if r, err := filepath.EvalSymlinks(e.Source); err == nil {
			roots[i] = r
		}
	}
	out := make([]Mount, 0, len(requested))
	for i, r := range requested {
		key := fmt.Sprintf("mounts[%d]", i)
		m, err := p.sessionMount(key, r, roots)
		if err != nil {
			return nil, err
		}
		for j, o := range out {
			if confine.Overlaps(m.Target, o.Target) {
				return nil, mountErrorf(ErrInvalid, "%s: target %s overlaps the target %s of mounts[%d]", key, m.Target, o.Target, j)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// sessionMount checks one request against the entries, whose resolved
// sources are roots.
func (p *Policy) sessionMount(key string, r MountRequest, roots []string) (Mount, error) {
	if !filepath.IsAbs(r.Source) || strings.ContainsRune(r.Source, 0) {
		return Mount{}, mountErrorf(ErrInvalid, "%s: source %q must be an absolute host path", key, r.Source)
	}
	if len(p.Mounts) == 0 {
		return Mount{}, mountErrorf(ErrNotAllowed, "%s: policy %s allows no mounts (sandbox.mounts is empty)", key, p.Tenant)
	}
	src := filepath.Clean(r.Source)
	lexical := false
	for i, e := range p.Mounts {
		if executor.Within(src, e.Source) || roots[i] != "" && executor.Within(src, roots[i]) {
			lexical = true
			break
		}
	}
	if !lexical {
		return Mount{}, p.notUnder(key, r.Source)
	}
	resolved, err := filepath.EvalSymlinks(src)
	if err != nil {
		// Say what failed only if it failed inside the allowlist: a
		// symlink the tenant made in a read-write entry must not tell it
		// which paths exist elsewhere on the host.
		var pe *os.PathError
		if errors.As(err, &pe) && entryOf(pe.Path, roots) >= 0 {
			return Mount{}, mountErrorf(ErrInvalid, "%s: source %s: %v", key, r.Source, err)
		}
		return Mount{}, p.notUnder(key, r.Source)
	}
	best := entryOf(resolved, roots)
	if best < 0 {
		return Mount{}, p.notUnder(key, r.Source)
	}
	if fi, err := os.Stat(resolved); err != nil {
		return Mount{}, mountErrorf(ErrInvalid, "%s: source %s: %v", key, r.Source, err)
	} else if !fi.IsDir() {
		return Mount{}, mountErrorf(ErrInvalid, "%s: source %s is not a directory", key, r.Source)
	}
	e := p.Mounts[best]
	if !r.ReadOnly && e.ReadOnly {
		return Mount{}, mountErrorf(ErrNotAllowed, "%s: %s may only be mounted read-only: policy %s has sandbox.mounts[%d] (%s) with readOnly: true",
			key, r.Source, p.Tenant, best, e.Source)
	}
	target := r.Target
	if target == "" {
		rel, err := filepath.Rel(roots[best], resolved)
		if err != nil {
			return Mount{}, mountErrorf(ErrInvalid, "%s: source %s: %v", key, r.Source, err)
		}
		target = path.Join(e.Target, filepath.ToSlash(rel))
	}
	if err := confine.CheckMountTarget(target); err != nil {
		return Mount{}, mountErrorf(ErrInvalid, "%s: %v", key, err)
	}
	return Mount{Source: resolved, Target: target, ReadOnly: r.ReadOnly || e.ReadOnly, Root: roots[best]}, nil
}

// entryOf returns the entry whose resolved source (in roots) holds the resolved
// path p, the most specific one if several do, or -1.
func entryOf(p string, roots []string) int {
	best := -1
	for i, r := range roots {
		if r != "" && executor.Within(p, r) && (best < 0 || len(r) > len(roots[best])) {
			best = i
		}
	}
	return best
}

// notUnder is the refusal of a source outside every entry. It says the
// same whether the path exists or where its symlinks led: a tenant that
// can make symlinks (in a read-write entry) learns nothing of the host.
func (p *Policy) notUnder(key, source string) error {
	srcs := make([]string, len(p.Mounts))
	for i, e := range p.Mounts {
		srcs[i] = e.Source
	}
	return mountErrorf(ErrNotAllowed, "%s: source %s is not a directory policy %s allows, symlinks resolved (sandbox.mounts sources: %s)",
		key, source, p.Tenant, strings.Join(srcs, ", "))
}

// defaultMounts are the entries as listed, sources resolved. An entry whose
// directory is missing fails the session: it would start without what the
// operator meant it to have.
func (p *Policy) defaultMounts() ([]Mount, error) {
	out := make([]Mount, 0, len(p.Mounts))
	for i, e := range p.Mounts {
		key := fmt.Sprintf("sandbox.mounts[%d].source", i)
		resolved, err := filepath.EvalSymlinks(e.Source)
		if err != nil {
			return nil, mountErrorf(ErrUnavailable, "policy %s: %s: %v", p.Tenant, key, err)
		}
		if fi, err := os.Stat(resolved); err != nil {
			return nil, mountErrorf(ErrUnavailable, "policy %s: %s: %v", p.Tenant, key, err)
		} else if !fi.IsDir() {
			return nil, mountErrorf(ErrUnavailable, "policy %s: %s: %s is not a directory", p.Tenant, key, e.Source)
		}
		out = append(out, Mount{Source: resolved, Target: e.Target, ReadOnly: e.ReadOnly, Root: resolved})
	}
	return out, nil
}
