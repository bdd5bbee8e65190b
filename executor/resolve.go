package executor

import (
	"context"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/shellbox/shellbox/confine"
)

// Limits are an executor's defaults and caps. Every executor resolves requests
// through Limits.Resolve so defaults, clamping and lexical workdir rules are the
// same everywhere.
type Limits struct {
	// DefaultTimeout applies when a call names none.
	DefaultTimeout time.Duration `mapstructure:"defaultTimeout"`
	// MaxTimeout caps what a call may ask for.
	MaxTimeout time.Duration `mapstructure:"maxTimeout"`
	// Grace is the time between SIGTERM and SIGKILL.
	Grace time.Duration `mapstructure:"grace"`
	// TailBytes bounds each stream's tail in a foreground result.
	TailBytes int `mapstructure:"tailBytes"`
	// BufferBytes bounds each stream's unread output of a background task.
	BufferBytes int `mapstructure:"bufferBytes"`
	// SpillLimit caps one call's spill file.
	SpillLimit int64 `mapstructure:"spillLimit"`
}

// DefaultLimits are the defaults of the tool contract and the execution
// semantics (docs/architecture.md#the-tool-contract, docs/architecture.md#execution-semantics-every-executor).
func DefaultLimits() Limits {
	return Limits{
		DefaultTimeout: 120 * time.Second,
		MaxTimeout:     600 * time.Second,
		Grace:          2 * time.Second,
		TailBytes:      30000,
		BufferBytes:    1 << 20,
		SpillLimit:     1 << 30,
	}
}

// Validate reports the first limit that cannot work, naming it.
func (l Limits) Validate() error {
	switch {
	case l.DefaultTimeout <= 0:
		return Errorf(ErrInvalid, "defaultTimeout must be positive, got %s", l.DefaultTimeout)
	case l.MaxTimeout < l.DefaultTimeout:
		return Errorf(ErrInvalid, "maxTimeout (%s) is below defaultTimeout (%s)", l.MaxTimeout, l.DefaultTimeout)
	case l.Grace < 0:
		return Errorf(ErrInvalid, "grace must not be negative, got %s", l.Grace)
	case l.TailBytes <= 0:
		return Errorf(ErrInvalid, "tailBytes must be positive, got %d", l.TailBytes)
	case l.BufferBytes <= 0:
		return Errorf(ErrInvalid, "bufferBytes must be positive, got %d", l.BufferBytes)
	case l.SpillLimit < 0:
		return Errorf(ErrInvalid, "spillLimit must not be negative, got %d", l.SpillLimit)
	}
	return nil
}

// ValidSession checks a session id: it names directories and labels, so it is
// 1–64 characters of letters, digits, '.', '_' and '-', starting with a letter
// or digit.
func ValidSession(id string) error {
	if !confine.ValidID(id) {
		return Errorf(ErrInvalid, "invalid session id %q: want %s", id, confine.IDRule)
	}
	return nil
}

// Resolve turns req into a Spec. root is the session cwd (absolute, as the
// command sees it); base is the executor's base environment, KEY=VALUE, under
// the managed req.Env.
func (l Limits) Resolve(_ context.Context, req Request, root string, base []string) (Spec, error) {
	if err := ValidSession(req.Session); err != nil {
		return Spec{}, err
	}
	if strings.TrimSpace(req.Command) == "" {
		return Spec{}, Errorf(ErrInvalid, "invalid command: expected a non-empty string")
	}
	shell := req.Shell
	if shell == "" {
		shell = Bash
	}
	if shell != Bash && shell != Pwsh {
		return Spec{}, Errorf(ErrInvalid, "unknown shell %q", shell)
	}
	wd, err := LexicalWorkdir(req.Workdir, root)
	if err != nil {
		return Spec{}, err
	}
	env, err := MergeEnv(base, req.Env)
	if err != nil {
		return Spec{}, err
	}
	spec := Spec{
		Session:     req.Session,
		Shell:       shell,
		Command:     req.Command,
		Workdir:     wd,
		Root:        root,
		Grace:       l.Grace,
		Background:  req.Background,
		Env:         env,
		TailBytes:   l.TailBytes,
		BufferBytes: l.BufferBytes,
		SpillLimit:  l.SpillLimit,
		Permissions: req.Permissions,
		ExecRules:   req.ExecRules,
	}
	if !req.Background {
		spec.Timeout = l.ClampTimeout(req.Timeout)
	}
	return spec, nil
}

// ClampTimeout applies the default to zero and the cap to anything above it.
// Timeouts are whole milliseconds: a fraction rounds up.
func (l Limits) ClampTimeout(t time.Duration) time.Duration {
	if t <= 0 {
		t = l.DefaultTimeout
	}
	if t > l.MaxTimeout {
		t = l.MaxTimeout
	}
	if r := t % time.Millisecond; r != 0 {
		t += time.Millisecond - r
	}
	return t
}

// LexicalWorkdir resolves workdir against root by path rules alone and rejects
// one that leaves root. It is a first, cheap check: symlinks are resolved (and
// confined) where the files are, when the command starts.
func LexicalWorkdir(workdir, root string) (string, error) {
	if strings.ContainsRune(workdir, 0) {
		return "", Errorf(ErrInvalid, "invalid workdir: contains a NUL byte")
	}
	root = path.Clean(root)
	wd := workdir
	if wd == "" {
		return root, nil
	}
	if !path.IsAbs(wd) {
		wd = path.Join(root, wd)
	}
	wd = path.Clean(wd)
	if !Within(wd, root) {
		return "", WorkdirOutside(workdir, root)
	}
	return wd, nil
}

// Within reports whether p is root or below it (both clean and absolute).
func Within(p, root string) bool {
	if root == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

// MergeEnv returns base overlaid with managed, sorted by key. Keys must be
// non-empty and free of '=' and NUL; values free of NUL.
func MergeEnv(base []string, managed map[string]string) ([]string, error) {
	m := make(map[string]string, len(base)+len(managed))
	for _, kv := range base {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, Errorf(ErrInvalid, "invalid environment entry %q: want KEY=VALUE", kv)
		}
		m[k] = v
	}
	for k, v := range managed {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, Errorf(ErrInvalid, "invalid environment variable %q", k)
		}
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}
