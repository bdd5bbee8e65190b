package local

import (
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/output"
)

const (
	// killBound is how long SIGKILL keeps being retried before a tree is
	// given up on (only a process stuck in an uninterruptible sleep gets that
	// far; its cgroup is then left for Cleanup).
	killBound = 10 * time.Second
	// drainTimeout bounds the wait for EOF on the pipes once the tree is gone.
	// Only a process outside the tree (one that escaped the process group when
	// no cgroup tracks it) can hold a pipe that long.
	drainTimeout = 500 * time.Millisecond
	// drainBound bounds the drain when the pipes keep holding unread bytes
	// (an escaped writer that never stops).
	drainBound = 10 * time.Second
	// readBufSize is the read size of each pipe.
	readBufSize = 64 << 10
)

// outputs are where one call's output goes.
type outputs struct {
	outTail, errTail *output.Tail
	outRing, errRing *output.Ring // background tasks only
	spill            *output.Spill
}

// newOutputs sizes the buffers of one call from its spec. The spill stays in
// memory up to both tails' worth, so output that fits the tails writes no
// file; once a tail overflows the spill has everything to write.
func newOutputs(spec executor.Spec, space *output.Space, spillDir, id string, background bool) *outputs {
	o := &outputs{
		outTail: output.NewTail(spec.TailBytes),
		errTail: output.NewTail(spec.TailBytes),
		spill:   space.NewSpill(spillDir+"/"+spec.Session, id+".log", spec.SpillLimit, 2*spec.TailBytes),
	}
	if background {
		o.outRing = output.NewRing(spec.BufferBytes)
		o.errRing = output.NewRing(spec.BufferBytes)
	}
	return o
}

func (o *outputs) truncated() bool { return o.outTail.Truncated() || o.errTail.Truncated() }

// finish writes the spill file if the result will point at it, and closes it.
func (o *outputs) finish() {
	if o.truncated() {
		o.spill.Materialize()
	}
	o.spill.Close()
}

// sink is one stream's writer: it feeds the stream's tail and ring, the
// call's shared spill and its live output, if any. It never blocks on a
// reader (executor.Live must not block either).
type sink struct {
	tail   *output.Tail
	ring   *output.Ring
	spill  *output.Spill
	live   executor.Live // foreground calls only
	stream string
}

func (s sink) Write(p []byte) (int, error) {
	s.tail.Write(p)
	s.spill.Write(p)
	if s.live != nil {
		s.live(executor.Chunk{Stream: s.stream, Data: p})
	}
	if s.ring != nil {
		s.ring.Write(p)
		// The reader fell behind: the spill file must exist (and it holds
		// everything) before the read that reports the loss points at it.
		if s.ring.Lost() > 0 {
			s.spill.Materialize()
		}
	}
	return len(p), nil
}

// proc is one running command and the supervisor that owns its lifetime.
type proc struct {
	id  string
	pid int
	cmd *exec.Cmd
	cg  *cgroup // nil: the process group alone
	// bornInside: the leader started in cg, so every process of the tree is
	// in it; false when the leader was moved in after it started.
	bornInside bool
	grace      time.Duration
	timeout    time.Duration // 0: none
	out        *outputs
	pipes      []*os.File    // read ends
	eof        chan struct{} // one send per pipe at its EOF (buffered)
	onDone     func()
	// Abilities of a sandbox's PID 1 (Config.PID1, pid1.go): the tag gid
	// tracking the tree (0: none), the OOM verdict (nil: not watched), and
	// the hook that gives the tag back and notes an OOM kill.
	tag          uint32
	tagGone      bool        // the tagged tree was seen gone (supervisor only)
	grant        string      // the tree's network grant (grant.go); under Executor.mu
	grantCg      grantCgroup // the cgroup it is bound to, if not a tag; under Executor.mu
	treeGone     func()      // called once the tree is gone, before its cgroup is released
	oomVerdict   func(syscall.WaitStatus) (killed bool, note string)
	oomKilled    bool
	beforeFinish func()
	logf         func(format string, args ...any) // nil: no log (Config.Logf)

	exited chan struct{} // the leader exited; it is not reaped yet
	killCh chan struct{} // closed by the first kill request

	mu            sync.Mutex
	killRequested bool
	finished      bool
	done          chan struct{} // closed, under mu, when everything below is set

	status   syscall.WaitStatus
	timedOut bool
	reaped   bool // the leader was reaped (supervisor only)
}

// kill asks the supervisor to end the tree. It reports whether the command
// had already finished; otherwise the caller waits for done.
func (p *proc) kill() (alreadyDone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return true
	}
	if !p.killRequested {
		p.killRequested = true
		close(p.killCh)
	}
	return false
}

// pump copies one pipe into its sink until EOF (or the drain deadline).
func (p *proc) pump(r *os.File, w sink) {
	defer func() { p.eof <- struct{}{} }()
	buf := make([]byte, readBufSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// waitLeader waits for the leader to exit without reaping it: the zombie
// holds the leader's pid and process-group id, so neither can be reused by
// an unrelated process while the supervisor still signals them.
//
// It waits on a pidfd in the runtime's poller, so a waiting command holds no
// OS thread: a sandbox's agent runs within a fixed number of threads
// (agent/supervisor.go) however many commands run. Where pidfds cannot be
// polled (old kernels, gVisor), it blocks a thread in waitid.
func (p *proc) waitLeader() {
	if waitPidfd(p.pid) {
		close(p.exited)
		return
	}
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	close(p.exited)
}

// waitPidfd waits, in the runtime's poller, until the child pid has exited,
// without reaping it. false: it could not wait that way (nothing happened).
func waitPidfd(pid int) bool {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	exited, tries := false, 0
	err = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
			switch {
			case err == unix.EINTR:
				continue
			case err != nil:
				// ECHILD cannot happen to an unreaped child; anything else
				// is for the blocking wait to find out.
				return true
			}
			// With WNOHANG and the child still running, Linux leaves
			// si_signo 0; SIGCHLD when it has exited.
			exited = info.Signo == int32(unix.SIGCHLD)
			tries++
			// The pidfd is readable once the child is gone, but a child
			// another process traces (the agent's exec guard) is waitable
			// by its parent only after the tracer has waited for it: a
			// readable pidfd whose child is not yet waitable is left to
			// the blocking wait rather than polled again and again (gVisor
			// keeps such a pidfd readable without ever making it waitable
			// this way).
			return exited || tries > 1
		}
	})
	return err == nil && exited
}

// supervise runs the command's life to its end: leader exit, timeout or kill
// request; then the whole tree's end, the reap, the cgroup's removal and the
// pipes' drain. Nothing is reported (done) before all of that happened.
func (p *proc) supervise() {
	var timer <-chan time.Time
	if p.timeout > 0 {
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-p.exited:
	case <-timer:
		p.timedOut = true
		p.terminate("timed out after " + p.timeout.String())
	case <-p.killCh:
		p.terminate("killed (a kill request, or its caller went away)")
	}
	<-p.exited
	// Whatever the leader left running goes the same way.
	p.terminate("its leader exited, leaving processes behind")

	p.reap()
	if p.treeGone != nil {
		// Before the cgroup can be another command's (grant.go).
		p.treeGone()
	}
	if p.cg != nil {
		// The leader is reaped and the tree gone: nothing refers to the
		// cgroup any more, so it can go back to the pool (cgroupPool). An
		// error leaves it for Cleanup; the call's result stands.
		p.cg.release()
		p.cg = nil
	}
	p.drain()
	if p.beforeFinish != nil {
		p.beforeFinish()
	}
	p.out.finish()
	if p.onDone != nil {
		// Before done, so whoever waited for the end sees its bookkeeping.
		p.onDone()
	}

	p.mu.Lock()
	p.finished = true
	close(p.done)
	p.mu.Unlock()
}

// reap reaps the exited leader, once, and records its status. Until then
// its zombie keeps its pid and process-group id from being reused.
func (p *proc) reap() {
	if p.reaped {
		return
	}
	p.reaped = true
	p.cmd.Wait()
	unregisterLeader(p.pid)
	if ps := p.cmd.ProcessState; ps != nil {
		p.status, _ = ps.Sys().(syscall.WaitStatus)
	}
}

// terminate ends the whole tree in two phases: SIGTERM to all of it, up to
// grace for it to go, then SIGKILL until nothing is left. It returns at once
// when the tree is already gone. why goes to the log. Each process gets the
// SIGTERM once: a catchable signal delivered twice would run a trap twice.
//
// With a cgroup the command was born in, the cgroup is the tree. Otherwise
// the process group is (the leader is in it, and the unreaped leader keeps
// its id from being reused), plus what signalOutsideGroup finds, and the
// group gets its SIGTERM before anything else: one system call whatever
// the tree's size, which the kernel delivers to every member, children
// being forked included, so a fork bomb cannot outrun it. What comes after
// it is not so cheap: treeEmpty's and signalOutsideGroup's scans of a tag
// read every process's /proc status, and a fork bomb in the same CPU quota
// (a Kubernetes pod: no pids cgroup of its own but the node's
// podPidsLimit) makes each scan slower as it grows; done first, a scan let
// a bomb fill the pod's memory (~1,600 processes in 256 MiB within a
// second on a loaded node), from which point the agent thrashed with it in
// memory reclaim for minutes and never got to the signal.
func (p *proc) terminate(why string) {
	inCgroup := p.cg != nil && p.bornInside
	sent := !inCgroup && p.signalGroup(unix.SIGTERM)
	empty := p.treeEmpty()
	if empty && !sent {
		return
	}
	p.log("command %s (pid %d, tag %d): %s: SIGTERM to its tree", p.id, p.pid, p.tag, why)
	switch {
	case empty:
		return
	case inCgroup:
		p.cg.signal(unix.SIGTERM)
	default:
		p.signalOutsideGroup(unix.SIGTERM)
	}
	if p.waitEmpty(p.grace) {
		return
	}
	p.log("command %s: its tree outlived the %s grace: SIGKILL", p.id, p.grace)
	deadline := time.Now().Add(killBound)
	for {
		p.killAll()
		if p.waitEmpty(50*time.Millisecond) || time.Now().After(deadline) {
			return
		}
	}
}

func (p *proc) log(format string, args ...any) {
	if p.logf != nil {
		p.logf(format, args...)
	}
}

// signalGroup sends sig to the process group, or, if it is empty, to the
// leader, which may have left it (setpgid), and reports whether anyone was
// there to get it.
func (p *proc) signalGroup(sig syscall.Signal) bool {
	err := unix.Kill(-p.pid, sig)
	if err == unix.ESRCH && !p.reaped {
		err = unix.Kill(p.pid, sig)
	}
	return err == nil
}

// signalOutsideGroup sends sig to the tree's processes that left its
// process group: those of its tag, and, with a cgroup joined after the
// start, the cgroup's members.
func (p *proc) signalOutsideGroup(sig syscall.Signal) {
	if p.tag != 0 {
		if out := tagSignalTree(p.tag, p.pid, sig); len(out) > 0 && sig != unix.SIGKILL {
			p.log("command %s: %s also to %v, outside its process group (tag %d)", p.id, unix.SignalName(sig), out, p.tag)
		}
	}
	if p.cg != nil {
		pids, _ := p.cg.procs()
		for _, pid := range pids {
			if st, err := readProcStat(pid); err == nil && st.pgrp != p.pid && pid != os.Getpid() {
				unix.Kill(pid, sig)
			}
		}
	}
}

// killAll sends SIGKILL to everything the tree may hold, redundantly: the
// cgroup (cgroup.kill, or frozen and signalled), the process group and the
// leader.
func (p *proc) killAll() {
	if p.cg != nil {
		p.cg.kill()
	}
	unix.Kill(-p.pid, unix.SIGKILL)
	if !p.reaped {
		unix.Kill(p.pid, unix.SIGKILL)
	}
	if p.tag != 0 {
		tagSignalTree(p.tag, p.pid, unix.SIGKILL)
	}
}

// treeEmpty reports whether the leader has exited and nothing of its tree is
// left: the cgroup is empty, or, without one, no live process is in the
// process group.
//
// With the process group alone, the leader is reaped as soon as it has
// exited, so that kill(-pgid, 0) can tell in one system call whether any
// process, zombies included, is left in the group (ESRCH: none); only when
// some is does a /proc scan look for a live one. The group's id stays
// reserved while any process is in the group, so signals to it reach no one
// else; once the group is empty, ESRCH ends the loop. What remains is a
// window of one poll between seeing the group non-empty and signalling it
// again, in which it would have to empty and its id be handed out to a new
// group: the pid counter would have to go all the way round in that time.
func (p *proc) treeEmpty() bool {
	select {
	case <-p.exited:
	default:
		return false
	}
	if p.cg != nil {
		return p.cg.empty()
	}
	if p.tag != 0 {
		// Once the leader exited and no live process carries the tag, none
		// ever will again: nothing is left to fork one.
		p.tagGone = !tagTreeAlive(p.tag)
		return p.tagGone
	}
	p.reap()
	return unix.Kill(-p.pid, 0) == unix.ESRCH || !groupAlive(p.pid)
}

// waitEmpty polls until the tree is gone or d has passed.
func (p *proc) waitEmpty(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for sleep := 500 * time.Microsecond; ; sleep = min(2*sleep, 20*time.Millisecond) {
		if p.treeEmpty() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(sleep, left))
	}
}

// drain waits for EOF on both pipes. The tree is gone, so normally every
// writer is too and EOF comes as soon as the readers have read what the
// pipes hold. A writer that escaped the tree only delays the call: once
// drainTimeout has passed with nothing left unread in the pipes, reading
// stops. Unread bytes extend the wait (readers starved of CPU on a loaded
// machine must not lose output that is already written), up to drainBound.
func (p *proc) drain() {
	start := time.Now()
	var t *time.Timer
	for range p.pipes {
		select {
		case <-p.eof:
			continue
		default:
		}
		if t == nil {
			t = time.NewTimer(drainTimeout)
			defer t.Stop()
		}
	wait:
		select {
		case <-p.eof:
		case <-t.C:
			if p.unread() && time.Since(start) < drainBound {
				t.Reset(drainTimeout / 10)
				goto wait
			}
			for _, r := range p.pipes {
				r.SetReadDeadline(time.Now())
			}
			<-p.eof
		}
	}
	for _, r := range p.pipes {
		r.Close()
	}
}

// unread reports whether a pipe still holds bytes its reader has not read
// (FIONREAD, which Linux spells TIOCINQ).
func (p *proc) unread() bool {
	for _, r := range p.pipes {
		rc, err := r.SyscallConn()
		if err != nil {
			continue
		}
		n := 0
		rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
		if n > 0 {
			return true
		}
	}
	return false
}

// exitStatus is the exact way a process ended: an exit code, or the name of
// the signal that killed it (ExitCode -1).
func exitStatus(ws syscall.WaitStatus) (code int, signal string) {
	if ws.Signaled() {
		name := unix.SignalName(ws.Signal())
		if name == "" {
			name = "SIG" + strconv.Itoa(int(ws.Signal()))
		}
		return -1, name
	}
	return ws.ExitStatus(), ""
}

// result is the foreground Result; valid once done is closed.
func (p *proc) result() executor.Result {
	r := executor.Result{
		Stdout:    p.out.outTail.String(),
		Stderr:    p.out.errTail.String(),
		TimedOut:  p.timedOut,
		TimeoutMs: p.timeout.Milliseconds(),
	}
	r.ExitCode, r.Signal = exitStatus(p.status)
	r.OOMKilled = p.oomKilled
	if p.out.truncated() {
		r.Truncated = true
		r.SpillPath = p.out.spill.Path()
		r.SpillError = p.out.spill.Err()
	}
	// A foreground call spills only when truncated; a background task
	// also when its reader fell behind memory, and its Wait reports that
	// file too (usage meters it).
	r.SpillBytes = p.out.spill.Stored()
	return r
}

// taskStatus is the status of a background task. A task is running until its
// tree is gone and its output drained, so a final status means every byte of
// output has been buffered.
func (p *proc) taskStatus() executor.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.finished {
		return executor.Status{State: executor.Running}
	}
	code, sig := exitStatus(p.status)
	if p.killRequested || sig != "" {
		return executor.Status{State: executor.Killed, ExitCode: code, Signal: sig}
	}
	return executor.Status{State: executor.Completed, ExitCode: code}
}
