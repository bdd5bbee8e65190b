package local

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Reaping as PID 1.
//
// In a sandbox the agent is PID 1, so every orphan (a grandchild whose parent
// died: the setsid daemon a timeout killed, the `sleep 0 &` of a subshell)
// becomes its child, and its zombie stays until the agent reaps it; zombies
// hold pids, and the sandbox has a pids limit. But the agent must not reap
// the leaders its supervisors wait for: a supervisor waits with waitid
// WNOWAIT (the zombie pins the leader's pid and process-group id while the
// tree is killed) and then reaps the leader itself for its exact status. A
// reaper that took a leader's zombie would lose that status (ECHILD) and free
// a pid still being signalled.
//
// So the executors of this process register every leader before anything can
// reap it, and ReapOrphans reaps only zombie children that are not
// registered. The race to close is the one between fork and registration: a
// leader can exit and become a zombie before launch has recorded its pid. A
// launch holds starting (shared) from before the fork until the pid is
// registered, and ReapOrphans holds it exclusively while it checks and reaps,
// so a zombie ReapOrphans finds (it scanned before taking the lock) is either
// registered by the time it holds the lock or was never a leader.

var (
	// starting is held shared by every launch across fork and registration,
	// exclusively by ReapOrphans while it decides and reaps.
	starting sync.RWMutex
	// leaders are the pids of the leaders this process's executors have
	// started and not yet reaped.
	leadersMu sync.Mutex
	leaders   = map[int]int{}
)

// registerLeader records pid as a leader a supervisor will reap. Called with
// starting held (shared).
func registerLeader(pid int) {
	leadersMu.Lock()
	leaders[pid]++
	leadersMu.Unlock()
}

// unregisterLeader forgets pid once its supervisor has reaped it.
func unregisterLeader(pid int) {
	leadersMu.Lock()
	if leaders[pid]--; leaders[pid] <= 0 {
		delete(leaders, pid)
	}
	leadersMu.Unlock()
}

func isLeader(pid int) bool {
	leadersMu.Lock()
	defer leadersMu.Unlock()
	return leaders[pid] > 0
}

// ReapOrphans reaps every zombie child of this process that no executor of
// this process supervises, and returns how many it reaped. It is what a PID 1
// (or a child subreaper) calls on SIGCHLD and now and then: orphans of the
// commands' trees are reparented to it, and nothing else waits for them.
// Leaders are never touched, so the statuses of running commands stay exact.
// It is safe to call concurrently with commands starting and ending; it never
// blocks on a live process (WNOHANG).
//
// It finds zombies by scanning /proc (state Z, parent this process), so its
// cost grows with the number of processes visible: small inside a sandbox.
func ReapOrphans() (int, error) {
	cands, err := zombieChildren(os.Getpid())
	if err != nil || len(cands) == 0 {
		return 0, err
	}
	starting.Lock()
	defer starting.Unlock()
	n := 0
	for _, pid := range cands {
		if isLeader(pid) {
			continue
		}
		var ws unix.WaitStatus
		for {
			got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err == nil && got == pid {
				n++
			}
			break
		}
	}
	return n, nil
}

// zombieChildren lists the zombies whose parent is ppid, this process. It
// reads the children lists of this process's threads when the kernel has
// them (CONFIG_PROC_CHILDREN), which costs a read per child instead of one
// per process of the system, and scans /proc otherwise (gVisor).
func zombieChildren(ppid int) ([]int, error) {
	defer scanning()()
	if kids, ok := childrenOf(ppid); ok {
		var out []int
		for _, pid := range kids {
			b, err := readProcFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if err != nil {
				continue
			}
			if state, parent, err := statStateParent(b); err == nil && state == 'Z' && parent == ppid {
				out = append(out, pid)
			}
		}
		return out, nil
	}
	names, err := procNames()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := readProcFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		state, parent, err := statStateParent(b)
		if err == nil && state == 'Z' && parent == ppid {
			out = append(out, pid)
		}
	}
	return out, nil
}

// statStateParent parses the state and ppid of /proc/<pid>/stat, counting
// fields from the last ')' as comm may hold anything.
func statStateParent(b []byte) (state byte, ppid int, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, errors.New("malformed stat")
	}
	ppid, err = strconv.Atoi(string(f[1]))
	return f[0][0], ppid, err
}

// childrenOf lists the children of every thread of process pid from
// /proc/<pid>/task/<tid>/children; ok is false when the kernel does not
// provide those files.
func childrenOf(pid int) (kids []int, ok bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	d, err := os.Open(dir)
	if err != nil {
		return nil, false
	}
	tids, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, false
	}
	read := 0
	for _, tid := range tids {
		b, err := readProcFile(dir + "/" + tid + "/children")
		if err != nil {
			// A thread that just exited; or no such file at all.
			continue
		}
		read++
		for _, f := range bytes.Fields(b) {
			if n, err := strconv.Atoi(string(f)); err == nil {
				kids = append(kids, n)
			}
		}
	}
	return kids, read > 0
}

// readProcFile reads a small /proc file with plain system calls: os.ReadFile
// costs twice as many (it registers the file with the poller, stats it),
// which matters for scans under gVisor, where every system call is
// expensive.
func readProcFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 2048)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}
