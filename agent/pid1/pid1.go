package pid1

import (
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/shellbox/shellbox/executor/local"
)

// Config configures an Executor: the runner's own Config (local.Config),
// and what a sandbox's PID 1 adds to it.
type Config struct {
	local.Config

	// TagGroups, when Count > 0, tracks the tree of a command that has no
	// cgroup by a supplementary group unique to it (tag.go). Needs
	// Credential with a non-zero Uid, so commands cannot drop it.
	TagGroups GroupRange
	// OOMScoreAdjInherit applies OOMScoreAdj by raising this process's own
	// score around each fork, so the command inherits it, instead of writing
	// the command's score after it starts (which fails for a command of
	// another user when this process lacks CAP_DAC_OVERRIDE).
	OOMScoreAdjInherit bool
	// MemoryCgroup is the memory cgroup whose OOM-kill counter tells an OOM
	// kill from a plain SIGKILL (Result.OOMKilled): "" for none, "auto" for
	// this process's own, or a cgroup directory.
	MemoryCgroup string
}

// Executor is the runner (local.Executor) with the abilities of a sandbox's
// PID 1 as its Config.PID1. It is safe for concurrent use.
type Executor struct {
	*local.Executor
	cfg Config
	// nil unless configured; set before New returns, read only after.
	tags  *tagPool
	oom   *oomSelf
	memcg *memcg
}

// New validates cfg and builds the executor: the runner's New with hooks
// (hooks) that hand out tags, raise the OOM score around forks and report
// OOM kills as cfg asks. Errors name the Config field.
func New(cfg Config) (*Executor, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	e := &Executor{cfg: cfg}
	lc := cfg.Config
	lc.PID1 = hooks{e}
	le, err := local.New(lc)
	if err != nil {
		return nil, err
	}
	if err := e.init(); err != nil {
		return nil, err
	}
	e.Executor = le
	return e, nil
}

// check validates the PID-1 fields of a Config.
func (c Config) check() error {
	if c.TagGroups.Count > 0 {
		switch {
		case c.Credential == nil || c.Credential.Uid == 0:
			return fmt.Errorf("local: TagGroups needs a Credential with a non-zero Uid: a command running as root could drop its tag")
		case c.Credential.NoSetGroups:
			return fmt.Errorf("local: TagGroups needs supplementary groups to be set (Credential.NoSetGroups is true)")
		case c.TagGroups.First == 0 || uint64(c.TagGroups.First)+uint64(c.TagGroups.Count) > 1<<32-1:
			return fmt.Errorf("local: TagGroups must be a range of non-zero gids below 4294967295, got %d+%d", c.TagGroups.First, c.TagGroups.Count)
		}
	}
	if c.OOMScoreAdjInherit && c.OOMScoreAdj == 0 {
		return fmt.Errorf("local: OOMScoreAdjInherit needs a non-zero OOMScoreAdj")
	}
	if c.MemoryCgroup != "" && c.MemoryCgroup != "auto" && !filepath.IsAbs(c.MemoryCgroup) {
		return fmt.Errorf("local: MemoryCgroup must be \"\", \"auto\" or an absolute cgroup directory, got %q", c.MemoryCgroup)
	}
	return nil
}

// init sets up the abilities cfg asks for.
func (e *Executor) init() error {
	e.tags = newTagPool(e.cfg.TagGroups)
	if e.cfg.OOMScoreAdjInherit {
		o, err := newOOMSelf(e.cfg.OOMScoreAdj)
		if err != nil {
			return err
		}
		e.oom = o
	}
	switch mc := e.cfg.MemoryCgroup; {
	case mc == "auto":
		e.memcg = findMemcg()
	case mc != "":
		m := &memcg{dir: filepath.Clean(mc), v2: !exists(filepath.Join(mc, "memory.oom_control"))}
		if _, err := m.kills(); err != nil {
			return fmt.Errorf("local: MemoryCgroup %s: %w", mc, err)
		}
		e.memcg = m
	}
	return nil
}

// MemoryCgroup is the memory cgroup whose OOM kills are reported, for logs;
// "" when none is watched.
func (e *Executor) MemoryCgroup() string {
	if e.memcg == nil {
		return ""
	}
	return e.memcg.dir
}

// hooks are e's abilities as the runner calls them (local.PID1).
type hooks struct{ e *Executor }

var _ local.PID1 = hooks{}

// Tag hands out a tag from the pool; none without TagGroups.
func (h hooks) Tag() (uint32, error) {
	if h.e.tags == nil {
		return 0, nil
	}
	return h.e.tags.get()
}

// Untag frees a tag for reuse.
func (h hooks) Untag(gid uint32) { h.e.tags.put(gid) }

// Fork runs start with this process's OOM score raised, with
// OOMScoreAdjInherit.
func (h hooks) Fork(start func() error) error {
	if h.e.oom == nil {
		return start()
	}
	return h.e.oom.around(start)
}

// InheritsOOMScore is OOMScoreAdjInherit.
func (h hooks) InheritsOOMScore() bool { return h.e.cfg.OOMScoreAdjInherit }

// WatchOOM samples the memory cgroup's OOM-kill counter as a command
// starts; the verdict compares it with the counter at the end (oom.go).
func (h hooks) WatchOOM() func(syscall.WaitStatus) (bool, string) {
	m := h.e.memcg
	if m == nil {
		return nil
	}
	base, err := m.kills()
	if err != nil {
		return nil
	}
	return func(status syscall.WaitStatus) (bool, string) {
		if !killedLikeOOM(status) {
			return false, ""
		}
		if n, err := m.kills(); err == nil && n > base {
			return true, m.oomNote()
		}
		return false, ""
	}
}
