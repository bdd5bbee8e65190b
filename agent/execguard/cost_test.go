//go:build linux && amd64

package execguard

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The guard's work per stop, pinned (BenchmarkExecLoop measures it).

// newTestGuard is a guard with no tracee, for its bookkeeping alone.
func newTestGuard(t *testing.T) *guard {
	return &guard{agentPID: -1, out: make(chan report, 16), logf: t.Logf, ids: newIdentities(),
		tracees: map[int]*tracee{}, parked: map[int]time.Time{}, unnamed: map[int]pending{}, diedUnnamed: map[int]bool{},
		orphans: orphanCall(), watches: map[int]*watch{}, gone: map[int]bool{}}
}

// TestPlaceholderReadLate: a process whose first stop comes before its
// parent's fork event is not read from /proc then (the event mostly
// follows at once, and names it), but only when the guard would block or
// a traced process exits (resolve), with the same checks as before: a
// parent the guard does not trace makes it an orphan, an unknown creator
// is polled, and one resolved after an exit is polled too.
func TestPlaceholderReadLate(t *testing.T) {
	g := newTestGuard(t)
	const gone = 1 << 30 // no such process
	g.placeholder(gone)
	if p := g.unnamed[gone]; p.resolved || p.polled || g.unresolved != 1 || g.npolled != 0 || g.waiting() {
		t.Fatalf("read at its first stop: %+v, unresolved %d, polled %d", p, g.unresolved, g.npolled)
	}
	g.resolve(false)
	if p := g.unnamed[gone]; !p.resolved || !p.polled || p.creator != 0 || g.unresolved != 0 || g.npolled != 1 {
		t.Fatalf("an unknown creator: %+v, unresolved %d, polled %d", p, g.unresolved, g.npolled)
	}
	g.named(gone)
	if g.unresolved != 0 || g.npolled != 0 || len(g.unnamed) != 0 {
		t.Fatalf("named: unresolved %d, polled %d, %d unnamed", g.unresolved, g.npolled, len(g.unnamed))
	}

	// A live child of this process (which the guard does not trace).
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	g.placeholder(pid)
	g.named(pid) // named by its event before any read: nothing left
	if g.unresolved != 0 || len(g.unnamed) != 0 {
		t.Fatalf("named before it was read: unresolved %d, %d unnamed", g.unresolved, len(g.unnamed))
	}
	g.placeholder(pid)
	g.resolve(false)
	if tr := g.tracees[pid]; tr == nil || !tr.orphan || len(g.unnamed) != 0 || g.unresolved != 0 || g.npolled != 0 {
		t.Fatalf("a parent the guard does not trace: %+v, %d unnamed", tr, len(g.unnamed))
	}

	// Its parent traced: it waits for the event, polled only if resolved
	// after an exit (its creator may be gone, unreported).
	for _, exited := range []bool{false, true} {
		g := newTestGuard(t)
		g.tracees[os.Getpid()] = &tracee{}
		g.placeholder(pid)
		g.resolve(exited)
		p := g.unnamed[pid]
		if !p.resolved || p.creator != os.Getpid() || p.polled != exited || g.tracees[pid].orphan {
			t.Errorf("resolved after an exit %v: %+v", exited, p)
		}
	}
}

// TestParentOf: the thread group and parent of a process and of a thread,
// and a status file cut short gives nothing.
func TestParentOf(t *testing.T) {
	if tgid, ppid := parentOf(os.Getpid()); tgid != os.Getpid() || ppid != os.Getppid() {
		t.Errorf("parentOf(self) = %d, %d; want %d, %d", tgid, ppid, os.Getpid(), os.Getppid())
	}
	done := make(chan [3]int)
	go func() {
		runtime.LockOSThread() // a thread of its own, ended with it
		tid := unix.Gettid()
		tgid, ppid := parentOf(tid)
		done <- [3]int{tid, tgid, ppid}
	}()
	if r := <-done; r[1] != os.Getpid() || r[2] != os.Getppid() {
		t.Errorf("parentOf(thread %d) = %d, %d; want %d, %d", r[0], r[1], r[2], os.Getpid(), os.Getppid())
	}
	for _, c := range []struct {
		in   string
		want int
	}{
		{"Name:\tx\nTgid:\t12\nPPid:\t3\n", 12},
		{"Name:\tx\nTgid:\t12", 0},
		{"Name:\tx\nTgid:\t\n", 0},
		{"Name:\tx\nTgid:\t99999999999\n", 0},
		{"Name:\tx\n", 0},
	} {
		if got := statusField([]byte(c.in), "\nTgid:"); got != c.want {
			t.Errorf("statusField(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestMemReadsAPage: an exec's path, argv array and strings on one page
// are read with one read of the tracee's memory (here this process's own,
// with process_vm_readv and with /proc/<pid>/mem), and a string across a
// page's end with one more.
func TestMemReadsAPage(t *testing.T) {
	b, err := unix.Mmap(-1, 0, 3*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	addr := uint64(uintptr(unsafe.Pointer(&b[0])))
	// Nothing mapped after the second page: a read past it fails.
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(addr+2*pageSize), pageSize, 0); e != 0 {
		t.Fatal(e)
	}
	put := func(off int, s string) uint64 { copy(b[off:], s+"\x00"); return addr + uint64(off) }
	putPtrs := func(off int, ps ...uint64) uint64 {
		for i, p := range ps {
			*(*uint64)(unsafe.Pointer(&b[off+8*i])) = p
		}
		return addr + uint64(off)
	}
	path := put(100, "/usr/bin/true")
	a0, a1 := put(200, "true"), put(300, "--version")
	argvAt := putPtrs(400, a0, a1, 0)
	across := put(pageSize-5, "across-the-page") // from the first page into the second
	argv2At := putPtrs(pageSize+64, a0, across, 0)
	unterminated := addr + 2*pageSize - 3
	copy(b[2*pageSize-3:], "abc") // no NUL before the unmapped page

	for _, viaFile := range []bool{false, true} {
		old := noVMReadv
		noVMReadv = viaFile
		var m mem
		m.reset(os.Getpid())
		budget := maxArgvBytes
		p, err := m.str(path, &budget)
		if err != nil || p != "/usr/bin/true" {
			t.Fatalf("file %v: path %q, %v", viaFile, p, err)
		}
		argv, err := m.argv(argvAt, &budget)
		if err != nil || len(argv) != 2 || argv[0] != "true" || argv[1] != "--version" {
			t.Fatalf("file %v: argv %q, %v", viaFile, argv, err)
		}
		if m.fills != 1 {
			t.Errorf("file %v: %d reads for a path and argv on one page, want 1", viaFile, m.fills)
		}
		argv, err = m.argv(argv2At, &budget)
		if err != nil || len(argv) != 2 || argv[0] != "true" || argv[1] != "across-the-page" {
			t.Fatalf("file %v: argv across pages %q, %v", viaFile, argv, err)
		}
		if _, err := m.str(unterminated, &budget); err == nil {
			t.Errorf("file %v: a string that runs into an unmapped page was read", viaFile)
		}
		small := 5
		if _, err := m.str(path, &small); err == nil {
			t.Errorf("file %v: a string longer than the budget was read", viaFile)
		}
		m.close()
		noVMReadv = old
	}
}
