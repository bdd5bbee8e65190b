package pid1

import (
	"bytes"
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/internal/procscan"
)

// Reaping as PID 1.
//
// In a sandbox the agent is PID 1, so every orphan (a grandchild whose parent
// died: the setsid daemon a timeout killed, the `sleep 0 &` of a subshell)
// becomes its child, and its zombie stays until the agent reaps it; zombies
// hold pids, and the sandbox has a pids limit. But the agent must not reap
// the leaders its supervisors wait for (they reap each one themselves, for
// its exact status), and a leader can exit before its launch has registered
// it. The runner keeps the register and closes that race
// (executor/local, leaders.go): ReapOrphans scans for zombie children, then
// reaps, within local.NotLeaders, only those that are no leader's, with
// every launch held off between its fork and its registration meanwhile.

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
	n := 0
	local.NotLeaders(cands, func(pid int) {
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
	})
	return n, nil
}

// zombieChildren lists the zombies whose parent is ppid, this process. It
// reads the children lists of this process's threads when the kernel has
// them (CONFIG_PROC_CHILDREN), which costs a read per child instead of one
// per process of the system, and scans /proc otherwise (gVisor).
func zombieChildren(ppid int) ([]int, error) {
	defer procscan.Slot()()
	if kids, ok := childrenOf(ppid); ok {
		var out []int
		for _, pid := range kids {
			b, err := procscan.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if err != nil {
				continue
			}
			if state, parent, err := statStateParent(b); err == nil && state == 'Z' && parent == ppid {
				out = append(out, pid)
			}
		}
		return out, nil
	}
	names, err := procscan.Names()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := procscan.ReadFile("/proc/" + n + "/stat")
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
		b, err := procscan.ReadFile(dir + "/" + tid + "/children")
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
