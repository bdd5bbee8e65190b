package local

import (
	"errors"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PID1 is what the runner does differently as a sandbox's PID 1
// (cmd/shellbox-agent): package agent/pid1 implements it, and
// agent/supervisor.go builds the executor with it (Config.PID1). The
// runner's own path calls it at two points: launch, before and around the
// fork of a leader (Tag, Fork), and the supervisor, once the tree is gone
// (Untag, and the verdict WatchOOM returned). Its methods are called
// concurrently, for different commands.
//
// What stays the runner's, because it is its state: the leaders a reaper
// must spare (leaders.go, NotLeaders; every Executor registers its leaders,
// hooks or not), the tracking of a tagged tree (tagtree.go) and the network
// grants bound to trees (grant.go).
type PID1 interface {
	// Tag returns a supplementary group unique to the command among the
	// live ones, for a tree no cgroup tracks: the command's Credential
	// gets it, and the tree is then every process carrying it
	// (tagtree.go). 0 and no error: no tag, the process group alone. It is
	// called before each fork (launch holds off the reaper meanwhile); an
	// error fails the start.
	Tag() (gid uint32, err error)
	// Untag gives back a tag Tag returned: after a start that failed, or
	// once the tree is gone and no live process carries it. A tag whose
	// tree outlived its kill (a process stuck in an uninterruptible sleep)
	// is never given back, so that process cannot join a later tree.
	Untag(gid uint32)
	// Fork runs start, which forks a leader (for example with this
	// process's OOM score raised around it, for the child to inherit). An
	// error with the child started is the caller's to kill.
	Fork(start func() error) error
	// InheritsOOMScore reports whether Fork gives every child
	// Config.OOMScoreAdj, which is then not written after the start.
	InheritsOOMScore() bool
	// WatchOOM is called as a command starts, before its leader is forked.
	// The func it returns (nil: none) is called once, when the command's
	// tree is gone and its output drained, with the leader's status: it
	// says whether the OOM killer ended the command, and the line its
	// stderr then ends with.
	WatchOOM() func(status syscall.WaitStatus) (killed bool, note string)
}

// fork runs start, which forks the leader, through Config.PID1 if set.
func (e *Executor) fork(start func() error) error {
	if e.cfg.PID1 == nil {
		return start()
	}
	return e.cfg.PID1.Fork(start)
}

// tag returns the tag for a tree no cgroup tracks (PID1.Tag); 0: none.
func (e *Executor) tag() (uint32, error) {
	if e.cfg.PID1 == nil {
		return 0, nil
	}
	return e.cfg.PID1.Tag()
}

// inheritsOOMScore reports whether Config.PID1 gives each child its score.
func (e *Executor) inheritsOOMScore() bool {
	return e.cfg.PID1 != nil && e.cfg.PID1.InheritsOOMScore()
}

// watchOOM is PID1.WatchOOM, nil without Config.PID1.
func (e *Executor) watchOOM() func(syscall.WaitStatus) (bool, string) {
	if e.cfg.PID1 == nil {
		return nil
	}
	return e.cfg.PID1.WatchOOM()
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

// afterExit runs once p's tree is gone and its output drained, before the
// result is final: it gives p's tag back and notes an OOM kill.
func (e *Executor) afterExit(p *proc) {
	if p.tag != 0 {
		// A tagged process that outlived the kill loop (stuck in an
		// uninterruptible sleep) keeps its tag for good.
		if p.tagGone || !tagTreeAlive(p.tag) {
			e.cfg.PID1.Untag(p.tag)
		}
	}
	if p.oomVerdict != nil {
		if killed, note := p.oomVerdict(p.status); killed {
			p.oomKilled = true
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
