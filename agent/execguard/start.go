package execguard

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/internal/cmdmatch"
)

// Guard is the agent's end of a running guard process.
type Guard struct {
	wmu   sync.Mutex // one frame at a time; never held with mu
	mu    sync.Mutex // notes, syncs, seq
	conn  net.Conn
	cmd   *exec.Cmd
	logf  func(string, ...any)
	notes map[int]*noteTo // by leader pid, while it runs
	syncs map[uint64]chan struct{}
	seq   uint64
}

// startTimeout bounds the guard's start: the agent's threads seized.
const startTimeout = 10 * time.Second

// Start starts the guard process for this process (the agent), which
// seizes all of its threads before Start returns. fsuid and fsgid are the
// commands' uid and gid, which the guard reads their memory and files as. Refusals are
// logged with logf. The caller then installs the filter (InstallFilter),
// after agent/notrace's: Start must come first, since a process started
// after ConfineCommands cannot trace.
func Start(fsuid, fsgid int, logf func(string, ...any)) (*Guard, error) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("exec guard: not supported on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("exec guard: socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "exec-guard"), os.NewFile(uintptr(fds[1]), "exec-guard")
	defer theirs.Close()
	cmd := exec.Command("/proc/self/exe", Arg, "--fsuid", strconv.Itoa(fsuid), "--fsgid", strconv.Itoa(fsgid))
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	// No Pdeathsig: it is tied to the thread that starts the guard, which
	// may end before the agent does. The guard ends when its socket
	// closes, and with the sandbox.
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("exec guard: start: %w", err)
	}
	conn, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("exec guard: %w", err)
	}
	g := &Guard{conn: conn, cmd: cmd, logf: logf, notes: map[int]*noteTo{}, syncs: map[uint64]chan struct{}{}}
	// Where Yama's ptrace_scope is 1 (gVisor's default; Ubuntu's) only an
	// ancestor may attach, unless this process names its tracer.
	if err := unix.Prctl(unix.PR_SET_PTRACER, uintptr(cmd.Process.Pid), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		g.Close()
		return nil, fmt.Errorf("exec guard: prctl(PR_SET_PTRACER): %w", err)
	}
	if err := writeFrame(conn, watch{}); err != nil {
		g.Close()
		return nil, fmt.Errorf("exec guard: %w", err)
	}
	conn.SetReadDeadline(time.Now().Add(startTimeout))
	var r report
	if err := readFrame(conn, &r); err != nil || !r.Ready {
		g.Close()
		switch {
		case r.Failed != "":
			return nil, fmt.Errorf("exec guard: %s", r.Failed)
		case err != nil:
			return nil, fmt.Errorf("exec guard: no answer: %w", err)
		}
		return nil, errors.New("exec guard: not ready")
	}
	conn.SetReadDeadline(time.Time{})
	go g.reports()
	return g, nil
}

// reports logs the guard's refusals until it is gone.
func (g *Guard) reports() {
	for {
		var r report
		if err := readFrame(g.conn, &r); err != nil {
			g.logf("exec guard: gone (%v): every exec of a command now fails", err)
			g.mu.Lock()
			for id, ch := range g.syncs {
				close(ch)
				delete(g.syncs, id)
			}
			g.mu.Unlock()
			return
		}
		if r.Sync != 0 {
			g.mu.Lock()
			if ch, ok := g.syncs[r.Sync]; ok {
				close(ch)
				delete(g.syncs, r.Sync)
			}
			g.mu.Unlock()
			continue
		}
		what := "refused"
		if r.Killed {
			what = "killed at exec"
		}
		g.logf("exec guard: pid %d (call of pid %d) %s by policy %s/%s (%s): %q: %s",
			r.PID, r.Leader, what, r.Policy, r.Rule, r.Decision, r.Argv, r.Why)
		g.mu.Lock()
		nt := g.notes[r.Leader]
		g.mu.Unlock()
		if nt != nil && r.Line != "" {
			nt.note(r.Line)
		}
	}
}

// Watch tells the guard that pid, just started with argv (the command's,
// after any shim), is a call's leader whose tree's execs rules check (nil:
// none); each refusal's line goes to note. Call it before anything waits
// for pid, so its pid cannot have been reused. The leader's execs wait for
// it (up to 10 s, then are refused). It is local.ExecGuard.
func (g *Guard) Watch(pid int, argv []string, rules *cmdmatch.Set, note func(string)) (release func()) {
	nt := &noteTo{note: note}
	g.mu.Lock()
	g.notes[pid] = nt
	g.mu.Unlock()
	if err := g.write(watch{PID: pid, Argv: argv, Rules: rules}); err != nil {
		g.logf("exec guard: telling it of pid %d: %v", pid, err)
	}
	return func() {
		// The refusals of the tree made so far reach note first: the
		// guard echoes a sync after every report it queued before.
		g.sync()
		g.mu.Lock()
		if g.notes[pid] == nt {
			delete(g.notes, pid)
		}
		g.mu.Unlock()
	}
}

// noteTo is one call's note (a pointer: a reused pid's new entry is not
// the old one's to delete).
type noteTo struct{ note func(string) }

// write sends one frame to the guard.
func (g *Guard) write(v any) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return writeFrame(g.conn, v)
}

// syncTimeout bounds how long the end of a call waits for the guard's
// echo.
const syncTimeout = time.Second

// sync waits until the guard has echoed a sync, so every report it made
// before has been handled (notes written); at most syncTimeout.
func (g *Guard) sync() {
	g.mu.Lock()
	g.seq++
	id, ch := g.seq, make(chan struct{})
	g.syncs[id] = ch
	g.mu.Unlock()
	err := g.write(watch{Sync: id})
	if err == nil {
		select {
		case <-ch:
			return
		case <-time.After(syncTimeout):
		}
	}
	g.mu.Lock()
	delete(g.syncs, id)
	g.mu.Unlock()
}

// Close stops the guard (tests; the agent's guard ends with it).
func (g *Guard) Close() error {
	g.conn.Close()
	done := make(chan struct{})
	go func() { g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		g.cmd.Process.Kill()
		<-done
	}
	return nil
}
