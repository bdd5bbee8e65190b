//go:build linux && amd64

package execguard

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/internal/clip"
	"github.com/shellbox/shellbox/internal/cmdmatch"
	"github.com/shellbox/shellbox/internal/threads"
)

// ptrace(2) requests, options and events not all in x/sys/unix.
const (
	ptraceCont        = 7
	ptraceGetRegs     = 12
	ptraceSetRegs     = 13
	ptraceGetEventMsg = 0x4201
	ptraceSeize       = 0x4206
	ptraceListen      = 0x4208

	optTraceFork    = 0x2
	optTraceVfork   = 0x4
	optTraceClone   = 0x8
	optTraceExec    = 0x10
	optTraceSeccomp = 0x80

	evFork    = 1
	evVfork   = 2
	evClone   = 3
	evExec    = 4
	evSeccomp = 7
	evStop    = 128

	sysExecve   = 59
	sysExecveat = 322
)

// seizeOptions follow every process and thread, and stop at execs.
const seizeOptions = optTraceFork | optTraceVfork | optTraceClone | optTraceExec | optTraceSeccomp

// Bounds of what the guard reads and keeps.
const (
	maxArgvBytes = 4 << 20 // argv and path of one exec, as the kernel bounds them (ARG_MAX)
	maxArgs      = 1 << 17
	maxWatches   = 4096 // registrations not yet claimed, and leaders known gone
	// parkTimeout bounds how long an exec waits for its call's rules
	// (which the agent sends as soon as the leader has started).
	parkTimeout = 10 * time.Second
	// nameTimeout bounds how long a new process or thread stays stopped
	// waiting for its parent's fork event (placeholder); past it, it is
	// taken for an orphan.
	nameTimeout = 10 * time.Second
)

// Arg is the first argument that makes shellbox-agent the guard.
const Arg = "exec-guard"

// tracee is what the guard knows of one traced thread.
type tracee struct {
	agent bool // a thread of the agent
	call  *call
	// fresh: a process the agent started, before its first exec.
	fresh bool
	// shimNext: the leader's first exec was let through; its next may be
	// the shim's exec of the call's own command line, once.
	shimNext bool
	// skipExec: the exec it stopped at was the agent's own; its
	// PTRACE_EVENT_EXEC is not checked again.
	skipExec bool
	// expect: the exec it stopped at was let through as the call's own
	// command line; PTRACE_EVENT_EXEC checks that this is what ran.
	expect []string
	// placeholder: stopped at its first stop before its parent's fork
	// event named it; it stays stopped until then (or until it is taken
	// for an orphan: unnamed).
	placeholder bool
	// newborn: named by its parent's event, its own first stop not seen.
	newborn bool
	// orphan: its parent's event never named it (the parent was killed
	// as it forked) or its parent was unknown: it runs, with the orphans'
	// call, whose every exec is refused, until a late event names it.
	orphan bool
}

// pending is a placeholder's wait for its parent's event.
type pending struct {
	since time.Time
	// resolved: creator and polled are known. A placeholder is read from
	// /proc only if its parent's event has not come by the time the
	// guard would block, or a traced process exits (resolve): mostly the
	// event is there already, and the read is saved.
	resolved bool
	creator  int // the process that forked it, as /proc said (0: unknown)
	// polled: nothing the guard waits for is sure to come if the event
	// does not (its creator is the agent, whose exit ends the guard, or
	// unknown): the loop polls, to take it for an orphan at nameTimeout.
	// Any other creator reports either the event or its exit.
	polled bool
}

// call is one call's process tree, named by its leader.
type call struct {
	leader int
	argv   []string
	rules  *rules // nil until the agent's watch arrives
}

type guard struct {
	agentPID int
	out      chan report // to the agent, bounded; dropped when full
	logf     func(string, ...any)
	ids      *identities

	tracees map[int]*tracee
	parked  map[int]time.Time // tids stopped at an exec, waiting
	unnamed map[int]pending   // placeholders, waiting for their parent's event
	npolled int               // of unnamed, those polled
	// unresolved: of unnamed, those not yet read from /proc.
	unresolved int
	// mem reads the memory of the tracee at hand; one for all.
	mem mem
	// diedUnnamed are tids that exited before either their first stop or
	// their parent's event was seen: a late event must not make an entry
	// for them (their tid may be another's by then). Bounded: maxWatches.
	diedUnnamed map[int]bool
	// orphans is the call of every orphan: no rules come for it, each
	// exec is refused.
	orphans *call

	mu      sync.Mutex
	watches map[int]*watch // by leader pid, not yet claimed
	gone    map[int]bool   // leaders that exited before their watch came
	order   []int          // of watches and gone, oldest first
}

// Main runs the guard process: args are what follows Arg. Its fd 3 is the
// socket to the agent, its parent the agent. It returns when the agent
// closes the socket.
func Main(args []string, stderr io.Writer) int {
	runtime.LockOSThread() // every ptrace request comes from this thread
	// Its threads share the sandbox's pids cgroup with the commands:
	// made now, while it can (agentapi.GuardTasks), with one processor
	// (with two, the start made a thread more than that now and then).
	// Two only from the loop on (guardProcs).
	runtime.GOMAXPROCS(1)
	threads.Reserve(agentapi.GuardTasks)
	// Every stop of a tracee sends its tracer a SIGCHLD, which the Go
	// runtime would take in a handler (interrupting and restarting the
	// wait4 it is in, per stop). Ignored: wait4 is woken all the same
	// (the kernel's __wake_up_parent does not depend on it), and the
	// guard has no children of its own, whom SIG_IGN would reap.
	signal.Ignore(unix.SIGCHLD)
	fs := flag.NewFlagSet(Arg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fsuid := fs.Int("fsuid", -1, "file-system uid to read the commands' memory and files as")
	fsgid := fs.Int("fsgid", -1, "file-system gid, likewise")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// Non-blocking: its reader and writer wait in the runtime's network
	// poller, not each in a thread of its own blocked in read or write,
	// which leaves the threads of the second processor (GC workers, a
	// thread that spins to hand work over) within GuardTasks.
	unix.SetNonblock(3, true)
	conn := os.NewFile(3, "exec-guard")
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "shellbox-agent exec-guard: "+format+"\n", a...) }
	g := &guard{agentPID: os.Getppid(), out: make(chan report, 256), logf: logf, ids: newIdentities(),
		tracees: map[int]*tracee{}, parked: map[int]time.Time{}, unnamed: map[int]pending{}, diedUnnamed: map[int]bool{},
		orphans: orphanCall(), watches: map[int]*watch{}, gone: map[int]bool{}}
	// The agent names this process its tracer (PR_SET_PTRACER, for Yama's
	// ptrace_scope 1, which gVisor applies) and then says go.
	var goAhead watch
	if err := readFrame(conn, &goAhead); err != nil {
		logf("no go-ahead from the agent: %v", err)
		return 1
	}
	if err := g.seizeAgent(); err != nil {
		writeFrame(conn, report{Failed: err.Error()})
		return 1
	}
	// Non-dumpable: no process without CAP_SYS_PTRACE reads this one's
	// memory or fds.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// The commands' memory, files and /proc links are opened as their
	// user: the kernel's check (ptrace_may_access with
	// PTRACE_MODE_FSCREDS) compares the file-system uid and gid with
	// theirs. Where the file-system ids cannot be set apart (gVisor's
	// setfsuid changes nothing), the guard becomes their user whole; they
	// may then signal it, which ends only their own execs.
	if err := actAs(*fsuid, *fsgid); err != nil {
		writeFrame(conn, report{Failed: err.Error()})
		return 1
	}
	if err := writeFrame(conn, report{Ready: true}); err != nil {
		return 1
	}
	go func() {
		for r := range g.out {
			if writeFrame(conn, r) != nil {
				// The agent is gone: as when its socket closes.
				os.Exit(0)
			}
		}
	}()
	go func() {
		for {
			var w watch
			if err := readFrame(conn, &w); err != nil {
				if !errors.Is(err, io.EOF) {
					logf("reading from the agent: %v", err)
				}
				// The agent is gone or closed the guard: the tracees are
				// detached as this process exits.
				os.Exit(0)
			}
			if w.Sync != 0 {
				// After every refusal told so far: tell queues a refusal
				// before its process goes on. Never waited for: with the
				// queue full (the agent behind), the agent's sync gives up
				// after its bound, and the watches behind it still come in.
				select {
				case g.out <- report{Sync: w.Sync}:
				default:
				}
				continue
			}
			g.addWatch(&w)
		}
	}()
	runtime.GOMAXPROCS(guardProcs)
	g.loop()
	return 0
}

// guardProcs is the guard's processors once it runs: the tracing
// thread's, and one idle, so that a wait4 that blocks keeps its
// processor. With one, the runtime's monitor takes the processor of every
// wait4 that blocks past its tick (20 µs: nearly all) and wakes a thread
// to hold it, and, having taken one, polls every 20 µs again: about a
// third of the guard's CPU and half its context switches. With an idle
// one it takes none (runtime/proc.go, retake) and backs off to 10 ms.
// The threads it needs stay within GuardTasks (TestConcurrentCallsEnd
// counts them): the start, which may make one more with two, is done
// with one.
const guardProcs = 2

// seizeAgent seizes every thread of the agent, again until a pass finds
// no new one: a thread a seized one creates is traced from its birth
// (PTRACE_O_TRACECLONE), one made by a thread not yet seized is found by
// the next pass.
func (g *guard) seizeAgent() error {
	for pass := 0; ; pass++ {
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(g.agentPID) + "/task")
		if err != nil {
			return fmt.Errorf("list the agent's threads: %w", err)
		}
		added := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if _, ok := g.tracees[tid]; ok {
				continue
			}
			_, _, errno := unix.Syscall6(unix.SYS_PTRACE, ptraceSeize, uintptr(tid), 0, seizeOptions, 0, 0)
			if errno == unix.ESRCH {
				continue
			}
			if errno == unix.EPERM && tracerOf(tid) == unix.Gettid() {
				// Made by a thread seized already, and traced from its
				// birth: its first stop is on its way. (TracerPid is the
				// tracing thread's id, this one's.)
				g.tracees[tid] = &tracee{agent: true, newborn: true}
				added++
				continue
			}
			if errno != 0 {
				return fmt.Errorf("ptrace(PTRACE_SEIZE) the agent's thread %d: %w", tid, errno)
			}
			g.tracees[tid] = &tracee{agent: true}
			added++
		}
		if added == 0 {
			return nil
		}
		if pass > 100 {
			return errors.New("the agent's threads kept changing while they were seized")
		}
	}
}

// addWatch takes the agent's registration of a call's leader.
func (g *guard) addWatch(w *watch) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone[w.PID] {
		delete(g.gone, w.PID)
		return
	}
	g.watches[w.PID] = w
	g.remember(w.PID)
}

// remember records pid in the bounded order of watches and gone.
func (g *guard) remember(pid int) {
	g.order = append(g.order, pid)
	for len(g.order) > maxWatches {
		old := g.order[0]
		g.order = g.order[1:]
		if !slices.Contains(g.order, old) {
			delete(g.watches, old)
			delete(g.gone, old)
		}
	}
}

// claim returns the rules of c, from its watch if it has come; false: not
// yet.
func (g *guard) claim(c *call) (*rules, bool) {
	if c.rules != nil {
		return c.rules, true
	}
	g.mu.Lock()
	w, ok := g.watches[c.leader]
	delete(g.watches, c.leader)
	g.mu.Unlock()
	if !ok {
		return nil, false
	}
	rs, err := compile(w.Rules)
	if err != nil {
		// Rules that do not compile refuse everything but the start.
		g.logf("call of pid %d: %v: every exec is refused", c.leader, err)
		rs = &rules{policy: "(invalid)", specs: []cmdmatch.Spec{{Rule: "invalid-rules", Decision: cmdmatch.Deny, Reason: err.Error()}},
			rules: []cmdmatch.Rule{{}}} // no matcher: matches every command
	}
	c.rules, c.argv = rs, w.Argv
	return rs, true
}

// leaderGone forgets a leader that exited.
func (g *guard) leaderGone(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.watches[pid]; ok {
		delete(g.watches, pid)
		return
	}
	g.gone[pid] = true
	g.remember(pid)
}

// pollWait4 takes any tracee's stop or exit that is there already (0:
// none), with a raw system call: none the Go runtime must account for.
func pollWait4(ws *unix.WaitStatus) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(ws)), unix.WALL|unix.WNOHANG, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// yieldEvery is how often the tracing goroutine passes through the
// scheduler (runtime.Gosched). It never would otherwise (it waits in
// system calls, not on the scheduler), and the runtime's monitor then
// takes it for a goroutine that runs too long: every 10 ms it preempts
// it with a signal, takes its processor, and polls every 20 µs again.
// A yield of a goroutine locked to its thread costs two threads'
// wake-ups; the preemption that, the signal, and the monitor's polls.
const yieldEvery = 5 * time.Millisecond

func (g *guard) loop() {
	lastYield := time.Now()
	for {
		if now := time.Now(); now.Sub(lastYield) > yieldEvery {
			runtime.Gosched()
			lastYield = now
		}
		// A wait that may block is a system call the runtime knows of, so
		// the guard's other goroutines run meanwhile (and a garbage
		// collection's stop-the-world is not held until the next stop);
		// with a processor idle it keeps its own (above). Polled: a
		// parked exec waits for its rules, a placeholder for its parent's
		// event, each up to a bound (retry).
		var ws unix.WaitStatus
		var tid int
		var err error
		switch {
		case g.waiting():
			tid, err = pollWait4(&ws)
		case g.unresolved > 0:
			// Before it blocks, the placeholders whose parent's event has
			// not come are read from /proc (resolve), which may make them
			// orphans or polled.
			if tid, err = pollWait4(&ws); err == nil && tid == 0 {
				g.resolve(false)
				continue
			}
		default:
			tid, err = unix.Wait4(-1, &ws, unix.WALL, nil)
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ECHILD:
			// Nothing traced (the agent is gone).
			time.Sleep(50 * time.Millisecond)
			continue
		case err != nil:
			g.logf("wait4: %v", err)
			time.Sleep(50 * time.Millisecond)
			continue
		case tid == 0:
			g.retry()
			if g.waiting() {
				time.Sleep(200 * time.Microsecond)
			}
			continue
		}
		g.handle(tid, ws)
		if g.waiting() || len(g.unnamed) > 0 {
			g.retry()
		}
	}
}

// waiting reports whether the loop must poll: a parked exec waits for
// its rules, or a placeholder for an event nothing else would wake the
// loop for.
func (g *guard) waiting() bool { return len(g.parked) > 0 || g.npolled > 0 }

// named forgets tid's wait for its parent's event, if any.
func (g *guard) named(tid int) {
	if p, ok := g.unnamed[tid]; ok {
		if p.polled {
			g.npolled--
		}
		if !p.resolved {
			g.unresolved--
		}
		delete(g.unnamed, tid)
	}
}

// retry tries the parked execs again and takes the placeholders that
// waited too long for orphans.
func (g *guard) retry() {
	if len(g.parked) > 0 {
		g.retryParked()
	}
	for tid, p := range g.unnamed {
		if time.Since(p.since) > nameTimeout {
			g.orphan(tid, fmt.Sprintf("no fork event of its parent named it within %s", nameTimeout))
		}
	}
}

func (g *guard) handle(tid int, ws unix.WaitStatus) {
	if ws.Exited() || ws.Signaled() {
		t := g.tracees[tid]
		delete(g.tracees, tid)
		delete(g.parked, tid)
		g.named(tid)
		if t == nil {
			// Gone before its first stop and its parent's event were seen:
			// that event, if it still comes, is stale.
			if len(g.diedUnnamed) >= maxWatches {
				clear(g.diedUnnamed)
			}
			g.diedUnnamed[tid] = true
		}
		if t != nil && t.call != nil && t.call.leader == tid {
			// Its tree may outlive it: its rules stay with the call.
			g.claim(t.call)
			g.leaderGone(tid)
		}
		if g.unresolved > 0 {
			// tid may have been the creator of one whose creator is not
			// known yet: known now, after its exit (its children are
			// another's by then, which resolve takes into account).
			g.resolve(true)
		}
		if len(g.unnamed) > 0 {
			g.creatorGone(tid)
		}
		return
	}
	if !ws.Stopped() {
		return
	}
	sig := ws.StopSignal()
	ev := int(uint32(ws)>>16) & 0xff
	t := g.tracees[tid]
	switch {
	case ev == evStop:
		if t == nil {
			// A new process or thread, stopped before its parent's event
			// named it: it stays stopped until that event says what it is,
			// so nothing it does is unattributed; or, if the event never
			// comes (its parent was killed as it forked), until it is taken
			// for an orphan.
			g.placeholder(tid)
			return
		}
		if t.placeholder {
			return // still waiting (it cannot have run)
		}
		if t.isNew() {
			// Its first stop (PTRACE_EVENT_STOP with SIGTRAP, or SIGSTOP
			// in a group-stop): it starts.
			cont(tid, 0)
			return
		}
		switch sig {
		case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
			// A group-stop: stay stopped, as without a tracer, until a
			// SIGCONT (reported as a PTRACE_EVENT_STOP with SIGTRAP).
			_, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceListen, uintptr(tid), 0, 0, 0, 0)
			if e != 0 && e != unix.ESRCH {
				// Not left stopped where no SIGCONT could wake it.
				g.logf("PTRACE_LISTEN of %d: %v: continued instead", tid, e)
				cont(tid, 0)
			}
		default:
			cont(tid, 0)
		}
	case sig == unix.SIGTRAP && (ev == evFork || ev == evVfork || ev == evClone):
		msg, err := eventMsg(tid)
		if err == nil {
			g.born(tid, t, int(msg), ev)
		}
		// Else it was killed in the stop (ESRCH): its child, never
		// named, is taken for an orphan (creatorGone, retry).
		cont(tid, 0)
	case sig == unix.SIGTRAP && ev == evSeccomp:
		g.exec(tid, t)
	case sig == unix.SIGTRAP && ev == evExec:
		g.execed(tid)
	case sig == unix.SIGTRAP && ev != 0:
		cont(tid, 0)
	default:
		// A signal on its way to the tracee: deliver it.
		cont(tid, int(sig))
	}
}

// isNew is true for a tracee created by its parent's event whose own first
// stop has not been seen (it is marked seen then).
func (t *tracee) isNew() bool {
	if t.newborn {
		t.newborn = false
		return true
	}
	return false
}

// placeholder records tid, stopped at its first stop before its parent's
// event. What created it is read from /proc only if that event does not
// follow at once (resolve).
func (g *guard) placeholder(tid int) {
	delete(g.diedUnnamed, tid) // the tid is this one's now
	g.tracees[tid] = &tracee{placeholder: true}
	g.unnamed[tid] = pending{since: time.Now()}
	g.unresolved++
}

// resolve reads from /proc what created each placeholder not yet read,
// and takes for an orphan one whose parent is gone. exited: a traced
// process exited just now (perhaps its creator, which then reports
// neither its event nor, resolved after its exit, is named as the
// creator): a placeholder whose creator is another traced process is
// polled, so that it waits no longer than nameTimeout.
func (g *guard) resolve(exited bool) {
	for tid, p := range g.unnamed {
		if p.resolved {
			continue
		}
		p.resolved = true
		g.unresolved--
		tgid, ppid := parentOf(tid)
		creator := ppid
		if tgid != tid {
			creator = tgid // a thread: its process made it
		}
		p.creator = creator
		p.polled = exited || creator <= 0 || creator == g.agentPID
		if p.polled {
			g.npolled++
		}
		g.unnamed[tid] = p
		if tgid == tid && ppid > 0 {
			switch {
			case g.tracees[ppid] == nil:
				// A process whose parent the guard does not trace: its parent
				// was killed as it forked, and it was handed to a reaper
				// outside.
				g.orphan(tid, fmt.Sprintf("its parent is gone (it now has %d) and no fork event named it", ppid))
			case ppid == g.agentPID && !g.sameGroup(tid, ppid):
				// The agent's own child is in the agent's process group until
				// it runs: this one was adopted by the agent (the sandbox's
				// reaper) when its parent was killed as it forked.
				g.orphan(tid, "its parent is gone (the agent adopted it) and no fork event named it")
			}
		}
	}
}

// sameGroup reports whether a and b are in one process group (true if
// unknown: a wait, not a decision).
func (g *guard) sameGroup(a, b int) bool {
	pa, err := unix.Getpgid(a)
	if err != nil {
		return true
	}
	pb, err := unix.Getpgid(b)
	return err != nil || pa == pb
}

// creatorGone takes for orphans the placeholders the process gone made:
// once its leader's exit is reported, none of its threads is left to
// report a fork event (a thread killed in its event stop, or before the
// guard waited for it, never reports it).
func (g *guard) creatorGone(pid int) {
	for tid, p := range g.unnamed {
		if p.creator == pid {
			g.orphan(tid, fmt.Sprintf("its parent, pid %d, ended before its fork event was reported", pid))
		}
	}
}

// orphan continues a placeholder its parent's event will not name, closed:
// it runs with the orphans' call, whose every exec is refused, and so does
// what it starts; a late event still names it (born).
func (g *guard) orphan(tid int, why string) {
	g.named(tid)
	t := g.tracees[tid]
	if t == nil || !t.placeholder {
		return
	}
	*t = tracee{orphan: true, call: g.orphans}
	g.logf("pid %d: %s: it goes on, every exec it or what it starts makes refused", tid, why)
	cont(tid, 0)
}

// orphanCall is the call of orphans: its one rule refuses every exec.
func orphanCall() *call {
	return &call{rules: &rules{policy: "(none)", specs: []cmdmatch.Spec{{Rule: "exec-check", Decision: cmdmatch.Deny,
		Reason: "the exec guard cannot tell which call this process belongs to (its parent was killed as it forked), so no exec of it runs"}},
		rules: []cmdmatch.Rule{{}}}} // no matcher: matches every command
}

// born records child, created by parent's (thread ptid's) fork, vfork or
// clone (ev).
func (g *guard) born(ptid int, parent *tracee, child int, ev int) {
	if g.diedUnnamed[child] {
		// It is gone already, and its tid may be another's soon.
		delete(g.diedUnnamed, child)
		return
	}
	var nt tracee
	switch {
	case parent == nil:
		// A parent the guard has no record of: what it made cannot be
		// attributed to a call.
		g.logf("pid %d: made by %d, of which the guard has no record: taken for an orphan", child, ptid)
		nt.orphan, nt.call = true, g.orphans
	case parent.agent && ev == evClone:
		nt.agent = true // a thread of the agent
	case parent.agent:
		// A process the agent starts: a call's leader.
		nt.call, nt.fresh = &call{leader: child}, true
		g.mu.Lock()
		delete(g.gone, child)
		g.mu.Unlock()
	default:
		nt.call = parent.call
	}
	old, ok := g.tracees[child]
	switch {
	case ok && old.placeholder:
		// Its first stop came first; it waited for this.
		g.named(child)
		g.tracees[child] = &nt
		cont(child, 0)
	case ok && old.orphan && !nt.orphan:
		// Taken for an orphan, and named after all: it runs already (its
		// first stop is past); what it started as an orphan stays one.
		g.logf("pid %d: its parent's fork event came late; it is checked as its call's from now on", child)
		*old = nt
	default:
		nt.newborn = true
		g.tracees[child] = &nt
	}
}

// parentOf reads the thread group and parent of tid from /proc (0: not
// known): the start of its status file (Name, at most 64 bytes escaped,
// Umask, State, Tgid, Ngid, Pid, PPid), with raw system calls and no
// allocation.
func parentOf(tid int) (tgid, ppid int) {
	var path [40]byte
	p := append(strconv.AppendInt(append(path[:0], "/proc/"...), int64(tid), 10), "/status\x00"...)
	cwd := unix.AT_FDCWD
	fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(&p[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return 0, 0
	}
	var buf [512]byte
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
	if e != 0 {
		return 0, 0
	}
	return statusField(buf[:n], "\nTgid:"), statusField(buf[:n], "\nPPid:")
}

// statusField is the number after name in a /proc status file (0: none).
func statusField(b []byte, name string) int {
	i := bytes.Index(b, []byte(name))
	if i < 0 {
		return 0
	}
	b = b[i+len(name):]
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	n, ok := 0, false
	for ; len(b) > 0 && b[0] >= '0' && b[0] <= '9'; b = b[1:] {
		n, ok = n*10+int(b[0]-'0'), true
		if n > 1<<30 {
			return 0
		}
	}
	if !ok || len(b) == 0 || b[0] != '\n' {
		return 0 // cut short: not known
	}
	return n
}

// The ptrace requests of a stop: raw system calls, none of which blocks
// (the tracee is stopped), so none the Go runtime must account for.

func cont(tid, sig int) {
	unix.RawSyscall6(unix.SYS_PTRACE, ptraceCont, uintptr(tid), 0, uintptr(sig), 0, 0)
}

func getRegs(tid int, regs *unix.PtraceRegs) error {
	if _, _, e := unix.RawSyscall6(unix.SYS_PTRACE, ptraceGetRegs, uintptr(tid), 0, uintptr(unsafe.Pointer(regs)), 0, 0); e != 0 {
		return e
	}
	return nil
}

func setRegs(tid int, regs *unix.PtraceRegs) error {
	if _, _, e := unix.RawSyscall6(unix.SYS_PTRACE, ptraceSetRegs, uintptr(tid), 0, uintptr(unsafe.Pointer(regs)), 0, 0); e != 0 {
		return e
	}
	return nil
}

func eventMsg(tid int) (uint, error) {
	var msg uint
	if _, _, e := unix.RawSyscall6(unix.SYS_PTRACE, ptraceGetEventMsg, uintptr(tid), 0, uintptr(unsafe.Pointer(&msg)), 0, 0); e != 0 {
		return 0, e
	}
	return msg, nil
}

// retryParked tries the parked execs again; one waiting too long is refused.
func (g *guard) retryParked() {
	for tid, since := range g.parked {
		t := g.tracees[tid]
		if t != nil && time.Since(since) > parkTimeout {
			delete(g.parked, tid)
			g.refuseUnknown(tid, t)
			continue
		}
		g.exec(tid, t)
	}
}

// exec decides an exec tid is stopped at (its seccomp stop).
func (g *guard) exec(tid int, t *tracee) {
	if t == nil || t.placeholder || (!t.agent && t.call == nil) {
		// A thread stopped at an exec that the guard has no call for
		// (none is known to get here): its exec is refused, and it is an
		// orphan from now on.
		g.logf("pid %d: an exec by a thread the guard cannot attribute to a call: refused, and an orphan from now on", tid)
		g.named(tid)
		t = &tracee{orphan: true, call: g.orphans}
		g.tracees[tid] = t
	}
	t.skipExec = false
	if t.agent {
		cont(tid, 0)
		return
	}
	t.expect = nil
	if t.fresh {
		// The agent's own exec of what it starts (no code but the
		// agent's has run in this process).
		t.fresh, t.skipExec, t.shimNext = false, true, true
		delete(g.parked, tid)
		cont(tid, 0)
		return
	}
	rs, ok := g.claim(t.call)
	if !ok {
		g.park(tid)
		return
	}
	delete(g.parked, tid)
	shimNext := t.shimNext
	t.shimNext = false
	if len(rs.rules) == 0 {
		cont(tid, 0)
		return
	}
	var regs unix.PtraceRegs
	if err := getRegs(tid, &regs); err != nil {
		return // gone
	}
	var pathPtr, argvPtr uint64
	dirfd, flags := int(unix.AT_FDCWD), 0
	switch regs.Orig_rax {
	case sysExecve:
		pathPtr, argvPtr = regs.Rdi, regs.Rsi
	case sysExecveat:
		dirfd, pathPtr, argvPtr, flags = int(int32(regs.Rdi)), regs.Rsi, regs.Rdx, int(regs.R8)
	default:
		cont(tid, 0)
		return
	}
	m := &g.mem
	m.reset(tid)
	defer m.close()
	budget := maxArgvBytes
	p, err := m.str(pathPtr, &budget)
	var argv []string
	if err == nil {
		argv, err = m.argv(argvPtr, &budget)
	}
	if err != nil {
		g.refuse(tid, t, &regs, rs, &refusal{Rule: "exec-check", Decision: "deny",
			Reason: "the exec check could not read the command: " + err.Error()}, argv)
		return
	}
	if len(argv) == 0 {
		// execve(path, NULL): the program runs as its path.
		argv = []string{p}
	}
	if shimNext && tid == t.call.leader && slices.Equal(argv, t.call.argv) {
		// The shim's exec of the command line the reader judged, right
		// after the agent's own: once, and PTRACE_EVENT_EXEC checks that
		// this is what ran.
		t.expect = t.call.argv
		cont(tid, 0)
		return
	}
	file := procPath(tid, dirfd, p, flags)
	if r := rs.decide(namesOf(argv, p), argv, file, g.ids); r != nil {
		g.refuse(tid, t, &regs, rs, r, argv)
		return
	}
	cont(tid, 0)
}

func (g *guard) park(tid int) {
	if _, ok := g.parked[tid]; !ok {
		g.parked[tid] = time.Now()
	}
}

// refuseUnknown refuses an exec of a process whose call's rules never came.
func (g *guard) refuseUnknown(tid int, t *tracee) {
	var regs unix.PtraceRegs
	if err := getRegs(tid, &regs); err != nil {
		return
	}
	g.logf("pid %d: no rules for its call came within %s: its exec is refused", tid, parkTimeout)
	rs := &rules{policy: "(unknown)"}
	g.refuse(tid, t, &regs, rs, &refusal{Rule: "exec-check", Decision: "deny",
		Reason: fmt.Sprintf("no rules for this process's call came within %s", parkTimeout)}, nil)
}

// refuse makes the exec tid is stopped at fail with EPERM, and says so.
func (g *guard) refuse(tid int, t *tracee, regs *unix.PtraceRegs, rs *rules, r *refusal, argv []string) {
	regs.Orig_rax = ^uint64(0)                  // skip the system call
	regs.Rax = uint64(^uintptr(unix.EPERM) + 1) // -EPERM
	if err := setRegs(tid, regs); err != nil {
		// It cannot be made to fail: it must not run.
		unix.Kill(tid, unix.SIGKILL)
	}
	g.tell(tid, t, rs, r, argv, false)
	cont(tid, 0)
}

// execed re-checks, at PTRACE_EVENT_EXEC, what did run: the new image's
// argv and executable, which nothing can change any more.
func (g *guard) execed(tid int) {
	if msg, err := eventMsg(tid); err == nil && int(msg) != tid {
		// A thread other than the leader exec'd and took the leader's pid.
		// The old leader is gone unreported, whatever it was stopped at.
		delete(g.parked, tid)
		if t, ok := g.tracees[int(msg)]; ok {
			g.tracees[tid] = t
			delete(g.tracees, int(msg))
		}
		delete(g.parked, int(msg))
	}
	t := g.tracees[tid]
	if t == nil || t.agent || t.skipExec || t.call == nil {
		if t != nil {
			t.skipExec = false
		}
		cont(tid, 0)
		return
	}
	rs, ok := g.claim(t.call)
	if !ok || len(rs.rules) == 0 {
		// No rules yet is no rules: a process of a call whose rules
		// never came ran its first exec before (the agent's own); any
		// later one waits at its seccomp stop.
		cont(tid, 0)
		return
	}
	proc := "/proc/" + strconv.Itoa(tid)
	argv, err := readCmdline(proc + "/cmdline")
	exe, exeErr := os.Readlink(proc + "/exe")
	var r *refusal
	switch {
	case err != nil:
		r = &refusal{Rule: "exec-check", Decision: "deny", Reason: "the exec check could not read what ran: " + err.Error()}
	case exeErr != nil:
		// An executable the commands' user cannot read makes the process
		// unreadable too: what cannot be checked does not run.
		r = &refusal{Rule: "exec-check", Decision: "deny", Reason: "the exec check could not read the program that ran: " + exeErr.Error()}
	case t.expect != nil:
		if !slices.Equal(argv, t.expect) {
			r = &refusal{Rule: "exec-check", Decision: "deny", Reason: "what ran is not the call's command line"}
		}
	default:
		if len(argv) == 0 {
			argv = []string{exe}
		}
		r = rs.decide(namesOf(argv, exe), argv, proc+"/exe", g.ids)
	}
	t.expect = nil
	if r != nil {
		unix.Kill(tid, unix.SIGKILL)
		g.tell(tid, t, rs, r, argv, true)
	}
	cont(tid, 0)
}

// tell reports a refusal to the agent, which writes its line into the
// call's stderr and its log.
func (g *guard) tell(tid int, t *tracee, rs *rules, r *refusal, argv []string, killed bool) {
	rep := report{PID: tid, Policy: rs.policy, Rule: r.Rule, Decision: r.Decision, Argv: clipList(argv), Killed: killed,
		Why: r.Reason, Line: rs.message(r, argv, killed)}
	if t.call != nil {
		rep.Leader = t.call.leader
	}
	select {
	case g.out <- rep:
	default:
		// The agent is behind: this refusal is not told (the exec still
		// failed).
	}
}

// clipList bounds argv for a report.
func clipList(argv []string) []string {
	if len(argv) > 32 {
		argv = argv[:32]
	}
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = clip.To(a, 256)
	}
	return out
}

// procPath is a path the guard can open for the file an exec names, as the
// tracee resolves it: through its root, its cwd, or its dirfd.
func procPath(tid, dirfd int, p string, flags int) string {
	proc := "/proc/" + strconv.Itoa(tid)
	switch {
	case p == "" && flags&unix.AT_EMPTY_PATH != 0:
		return proc + "/fd/" + strconv.Itoa(dirfd)
	case p == "":
		return ""
	case p[0] == '/':
		return proc + "/root" + p
	case dirfd == unix.AT_FDCWD:
		return proc + "/cwd/" + p
	default:
		return proc + "/fd/" + strconv.Itoa(dirfd) + "/" + p
	}
}

// readCmdline reads a /proc/<pid>/cmdline, bounded. (Raw system calls:
// an os.File's set-up and finalizer cost more than the read of a short
// command line.)
func readCmdline(file string) ([]string, error) {
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: file, Err: err}
	}
	defer unix.Close(fd)
	var first [4096]byte
	b := first[:0]
	for len(b) <= maxArgvBytes {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(cap(b), maxArgvBytes+1-len(b)))
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: file, Err: err}
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	if len(b) > maxArgvBytes {
		return nil, fmt.Errorf("argv longer than %d bytes", maxArgvBytes)
	}
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil, nil
	}
	parts := bytes.Split(b, []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out, nil
}

// mem reads a stopped tracee's memory: with process_vm_readv (one
// system call a read), or, where that is refused (it checks the guard's
// real ids, not the file-system ids it acts as: a guard that runs as
// another user than the commands, without CAP_SYS_PTRACE), from
// /proc/<tid>/mem, or word by word with PTRACE_PEEKDATA where that cannot
// be opened either. It reads a page at a time and keeps the last one: an
// exec's path, argv array and strings are mostly on one page of the
// shell's heap, read with one system call, not one each.
type mem struct {
	tid    int
	fd     int // /proc/<tid>/mem, -1 if not open
	opened bool
	// page holds n bytes of the tracee's memory from base.
	base  uint64
	n     int
	page  [pageSize]byte
	fills int // reads of the tracee's memory since reset
}

const pageSize = 4096

// noVMReadv is set once process_vm_readv was refused: it will be again.
var noVMReadv bool

// reset makes m read tid's memory, with nothing kept from before.
func (m *mem) reset(tid int) {
	m.tid, m.fd, m.opened, m.n, m.fills = tid, -1, false, 0, 0
}

func (m *mem) close() {
	if m.fd >= 0 {
		unix.Close(m.fd)
		m.fd = -1
	}
	m.n = 0
}

// read returns the tracee's bytes from addr, at least one and not past
// addr's page: from the page kept, or read into it.
func (m *mem) read(addr uint64) ([]byte, error) {
	if m.n > 0 && addr >= m.base && addr < m.base+uint64(m.n) {
		return m.page[addr-m.base : m.n], nil
	}
	m.n = 0
	base, n, err := m.fill(addr)
	if n <= int(addr-base) {
		// Nothing at addr (the page's start was read from a file that
		// ends before it: not for memory).
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	m.base, m.n = base, n
	return m.page[addr-base : n], nil
}

// fill reads the page addr is on (mapped whole or not at all) into
// m.page, from base, its start (or, word by word, from addr).
func (m *mem) fill(addr uint64) (base uint64, n int, err error) {
	m.fills++
	base = addr &^ (pageSize - 1)
	if !noVMReadv {
		local := []unix.Iovec{{Base: &m.page[0], Len: pageSize}}
		remote := []unix.RemoteIovec{{Base: uintptr(base), Len: pageSize}}
		n, err := unix.ProcessVMReadv(m.tid, local, remote, 0)
		switch {
		case err == nil && n > 0:
			return base, n, nil
		case err == unix.EPERM || err == unix.ENOSYS:
			noVMReadv = true
		case err == unix.ESRCH:
			return base, 0, err
		}
		// EFAULT (nothing mapped at addr) and the rest: as the file says.
	}
	if !m.opened {
		m.opened = true
		var path [40]byte
		p := append(strconv.AppendInt(append(path[:0], "/proc/"...), int64(m.tid), 10), "/mem"...)
		if fd, err := unix.Open(string(p), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			m.fd = fd
		}
	}
	if m.fd >= 0 {
		for {
			n, err := unix.Pread(m.fd, m.page[:], int64(base))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return base, 0, err
			}
			return base, n, nil
		}
	}
	// Word by word, a system call each: a few words from addr, not past
	// its page's end.
	n, err = unix.PtracePeekData(m.tid, uintptr(addr), m.page[:min(64, int(base+pageSize-addr))])
	return addr, n, err
}

// str reads a NUL-terminated string at addr, charging budget.
func (m *mem) str(addr uint64, budget *int) (string, error) {
	if addr == 0 {
		return "", errors.New("a null pointer")
	}
	var out []byte
	for {
		b, err := m.read(addr)
		if err != nil {
			return "", fmt.Errorf("read at %#x: %w", addr, err)
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			*budget -= i + 1
			if *budget < 0 {
				return "", fmt.Errorf("argv longer than %d bytes", maxArgvBytes)
			}
			if out == nil {
				return string(b[:i]), nil // one allocation: the string
			}
			return string(append(out, b[:i]...)), nil
		}
		*budget -= len(b)
		if *budget < 0 {
			return "", fmt.Errorf("argv longer than %d bytes", maxArgvBytes)
		}
		out = append(out, b...)
		addr += uint64(len(b))
	}
}

// argv reads a NULL-terminated array of string pointers at addr.
func (m *mem) argv(addr uint64, budget *int) ([]string, error) {
	var out []string
	if addr == 0 {
		return nil, nil // Linux runs it with an empty argv
	}
	var ptrs [64]uint64
	for {
		// The pointers are copied out before their strings are read (which
		// may replace the page kept).
		b, err := m.read(addr)
		if err == nil && len(b) < 8 {
			err = io.ErrUnexpectedEOF // a pointer cut by the page's end: not for memory
		}
		if err != nil {
			return nil, fmt.Errorf("read at %#x: %w", addr, err)
		}
		k := min(len(b)/8, len(ptrs))
		for i := range k {
			ptrs[i] = uint64(b[8*i]) | uint64(b[8*i+1])<<8 | uint64(b[8*i+2])<<16 | uint64(b[8*i+3])<<24 |
				uint64(b[8*i+4])<<32 | uint64(b[8*i+5])<<40 | uint64(b[8*i+6])<<48 | uint64(b[8*i+7])<<56
			if ptrs[i] == 0 {
				k = i + 1 // none past the end
				break
			}
		}
		for _, p := range ptrs[:k] {
			if p == 0 {
				return out, nil
			}
			if len(out) >= maxArgs {
				return nil, fmt.Errorf("more than %d arguments", maxArgs)
			}
			if out == nil {
				out = make([]string, 0, 8)
			}
			s, err := m.str(p, budget)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		addr += uint64(8 * k)
	}
}

// actAs sets this thread's file-system uid and gid (-1: leave), or, where
// they do not take, this thread's real and effective ids. This thread alone (the raw system calls, not Go's, which
// change every thread): the guard's other threads stay the agent's user,
// and count against no limit of the commands' user (RLIMIT_NPROC).
func actAs(uid, gid int) error {
	if uid < 0 && gid < 0 {
		return nil
	}
	if gid >= 0 {
		unix.Setfsgid(gid)
	}
	if uid >= 0 {
		unix.Setfsuid(uid)
	}
	// setfsuid(-1) changes nothing and returns the current fsuid.
	curU, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	curG, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	if (uid < 0 || int(curU) == uid) && (gid < 0 || int(curG) == gid) {
		return nil
	}
	// The real and effective ids: gVisor checks /proc/<pid>/exe and mem
	// against the real one. The saved ones stay the agent's. (The
	// commands may then signal this thread's process: see the package
	// doc.)
	keep := ^uintptr(0) // -1: unchanged
	if gid >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), keep); e != 0 {
			return fmt.Errorf("exec guard: setresgid(%d, %d, -1): %w", gid, gid, e)
		}
	}
	if uid >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), keep); e != 0 {
			return fmt.Errorf("exec guard: setresuid(%d, %d, -1): %w", uid, uid, e)
		}
	}
	return nil
}

// tracerOf is the TracerPid of thread tid, -1 if unknown.
func tracerOf(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return -1
	}
	_, rest, ok := bytes.Cut(b, []byte("\nTracerPid:"))
	if !ok {
		return -1
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil {
		return -1
	}
	return n
}
