package policies

import (
	"fmt"
	"path"
	"strings"
)

// The files section: who may put files into a session and take them out
// (PUT and GET /v1/sessions/{id}/files, `shellbox cp`), and how much at
// once. Transfers are not shell commands: the rule list does not see them,
// this section decides them.

// filesSchema is the files section of a policy file.
type filesSchema struct {
	MaxBytes   Bytes            `mapstructure:"maxBytes"`
	MaxEntries int              `mapstructure:"maxEntries"`
	Read       fileAccessSchema `mapstructure:"read"`
	Write      fileAccessSchema `mapstructure:"write"`
}

type fileAccessSchema struct {
	Allow []string `mapstructure:"allow"`
	Deny  []string `mapstructure:"deny"`
}

// DefaultFileMaxBytes caps one transfer of a tenant whose policy sets no
// files.maxBytes.
const DefaultFileMaxBytes = 1 << 30

// DefaultFileMaxEntries caps the entries of one tar transfer.
const DefaultFileMaxEntries = 100_000

// Files is a policy's files section, compiled.
type Files struct {
	// MaxBytes caps the bytes of one transfer (a file, or a tar stream).
	MaxBytes int64
	// MaxEntries caps the entries of one tar.
	MaxEntries int

	read, write fileAccess
}

// HasRules reports whether read or write globs decide transfers by path
// (then a transfer may not go through a symlink: the path decided must be
// the path reached).
func (f Files) HasRules() bool {
	return len(f.read.allow)+len(f.read.deny)+len(f.write.allow)+len(f.write.deny) > 0
}

// HasReadRules reports whether read globs decide downloads by path (then
// a file read must have no other name: a hard link's other names cannot
// be checked against the globs).
func (f Files) HasReadRules() bool {
	return len(f.read.allow)+len(f.read.deny) > 0
}

// fileAccess is one direction's globs; empty allow allows every path.
type fileAccess struct {
	allow, deny []fileGlob
}

type fileGlob struct {
	key string // the policy key, e.g. files.write.deny[0]
	src string
	m   matcher
}

func compileFiles(l *located, p *Policy, s *filesSchema) {
	p.Files = Files{MaxBytes: DefaultFileMaxBytes, MaxEntries: DefaultFileMaxEntries}
	if s.MaxBytes < 0 {
		l.addf("files.maxBytes", "%d: must not be negative", s.MaxBytes)
	} else if s.MaxBytes > 0 {
		p.Files.MaxBytes = int64(s.MaxBytes)
	}
	if s.MaxEntries < 0 {
		l.addf("files.maxEntries", "%d: must not be negative", s.MaxEntries)
	} else if s.MaxEntries > 0 {
		p.Files.MaxEntries = s.MaxEntries
	}
	p.Files.read = compileFileAccess(l, "files.read", s.Read)
	p.Files.write = compileFileAccess(l, "files.write", s.Write)
}

func compileFileAccess(l *located, key string, s fileAccessSchema) fileAccess {
	globs := func(sub string, list []string) []fileGlob {
		var out []fileGlob
		for i, g := range list {
			k := fmt.Sprintf("%s.%s[%d]", key, sub, i)
			if !strings.HasPrefix(g, "/") && !strings.HasPrefix(g, "*") {
				l.addf(k, "%q: a pattern matches the absolute path the session sees (/workspace/...), so it starts with / or *", g)
				continue
			}
			m, err := globMatcher(g)
			if err != nil {
				l.addf(k, "%v", err)
				continue
			}
			out = append(out, fileGlob{key: k, src: g, m: m})
		}
		return out
	}
	return fileAccess{allow: globs("allow", s.Allow), deny: globs("deny", s.Deny)}
}

// FileDecision is the verdict on one transfer.
type FileDecision struct {
	Allowed bool
	// Rule is the policy key that decided ("files.write.deny[0]"), or
	// "files.write.allow" when no allow pattern matched, or "files" for the
	// default (everything allowed).
	Rule string
	// Reason says why, naming the path and the pattern.
	Reason string
}

// FileAccess decides whether the file at p (absolute and clean, as the
// session sees it) may be read (write false) or written. A path is allowed
// when it matches an allow pattern (or the list is empty) and no deny
// pattern. Patterns are globs (* matches across slashes). For a directory
// transfer (a tar) p is the directory: the entries inside it are not
// decided one by one.
func (f Files) FileAccess(write bool, p string) FileDecision {
	a, dir := f.read, "read"
	if write {
		a, dir = f.write, "write"
	}
	p = path.Clean(p)
	for _, g := range a.deny {
		if g.m.MatchString(p) {
			return FileDecision{Rule: g.key, Reason: fmt.Sprintf("%s of %s is denied by %s %q", dir, p, g.key, g.src)}
		}
	}
	if len(a.allow) == 0 {
		return FileDecision{Allowed: true, Rule: "files"}
	}
	for _, g := range a.allow {
		if g.m.MatchString(p) {
			return FileDecision{Allowed: true, Rule: g.key}
		}
	}
	return FileDecision{Rule: "files." + dir + ".allow", Reason: fmt.Sprintf("%s of %s is not allowed: it matches no pattern of files.%s.allow", dir, p, dir)}
}

// AuditFile writes a transfer's decision to the audit log: tool
// "files.put" or "files.get", the path as the command. Writes are audited
// whether allowed or not, reads only when denied. An allowed write that
// cannot be audited must not happen: the error says so.
func (e *Engine) AuditFile(tenant, session string, write bool, p string, d FileDecision) error {
	if !write && d.Allowed {
		return nil
	}
	tool := "files.get"
	if write {
		tool = "files.put"
	}
	v := verdict{Decision: Deny, Rule: d.Rule, Reason: d.Reason}
	if d.Allowed {
		v.Decision = Allow
	}
	rec := Record{Tenant: tenant, Session: session, Tool: tool, Command: p}
	if err := e.audit(rec, v); err != nil {
		return fmt.Errorf("the audit log cannot be written: %w", err)
	}
	return nil
}
