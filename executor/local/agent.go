package local

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// What the executor does differently when it is a sandbox's PID 1
// (cmd/shellbox-agent): tag groups (tag.go), the inherited OOM score and OOM
// reporting (oom.go), and reaping (reap.go, used by the agent directly). The
// hooks into the common path are: launch allocates the tag and forks through
// e.fork, and the supervisor calls p.beforeFinish (e.afterExit) once the tree
// is gone and the output drained.

// checkAgent validates the agent fields of a Config.
func (c Config) checkAgent() error {
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

// initAgent sets up the agent abilities cfg asks for.
func (e *Executor) initAgent() error {
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

// fork runs start, which forks the leader, with this process's OOM score
// raised when OOMScoreAdjInherit asks for it.
func (e *Executor) fork(start func() error) error {
	if e.oom == nil {
		return start()
	}
	return e.oom.around(start)
}

// launchRetrying is launch, tried again with a fresh command while the
// fork fails with EAGAIN, as bash retries its own forks: a sandbox's pids
// limit is reached for a moment when a burst of short-lived processes (a
// loop of `(cmd &)`) outruns their exits or, on slow storage, their execs.
// It gives up after about 1.3 s, so a sandbox that stays full (a fork bomb
// in a background task) fails the call with the fork's error.
func (e *Executor) launchRetrying(p *proc, newCmd func() *exec.Cmd, h *hierarchy) error {
	err := e.launch(p, newCmd(), h)
	for d := 10 * time.Millisecond; errors.Is(err, syscall.EAGAIN) && d <= 640*time.Millisecond; d *= 2 {
		time.Sleep(d)
		err = e.launch(p, newCmd(), h)
	}
	return err
}

// oomSample is the OOM-kill counter now, or -1 when none is watched.
func (e *Executor) oomSample() int64 {
	if e.memcg == nil {
		return -1
	}
	n, err := e.memcg.kills()
	if err != nil {
		return -1
	}
	return n
}

// afterExit runs once p's tree is gone and its output drained, before the
// result is final: it frees p's tag and notes an OOM kill.
func (e *Executor) afterExit(p *proc) {
	if p.tag != 0 {
		// A tagged process that outlived the kill loop (stuck in an
		// uninterruptible sleep) keeps its tag for good.
		if p.tagGone || !tagTreeAlive(p.tag) {
			e.tags.put(p.tag)
		}
	}
	if p.oomBase >= 0 && killedLikeOOM(p.status) {
		if n, err := e.memcg.kills(); err == nil && n > p.oomBase {
			p.oomKilled = true
			note := e.memcg.oomNote()
			if b := p.out.errTail.Bytes(); len(b) > 0 && b[len(b)-1] != '\n' {
				note = "\n" + note
			}
			sink{tail: p.out.errTail, ring: p.out.errRing, spill: p.out.spill}.Write([]byte(note))
		}
	}
}

// killStarted kills a leader that started although launch fails.
func killStarted(pid int) {
	unix.Kill(-pid, unix.SIGKILL)
	unix.Kill(pid, unix.SIGKILL)
}
