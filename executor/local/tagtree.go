package local

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/internal/procscan"
	"github.com/shellbox/shellbox/internal/procstatus"
)

// Tag groups: tree tracking without a cgroup.
//
// Inside a container the cgroupfs is read-only and the agent has no
// CAP_SYS_ADMIN, so there are no per-command cgroups, and the process group
// alone lets `setsid` escape. But the agent starts commands as another user
// (Credential), and may give each one an extra supplementary group, unique
// among the live commands: the tag, which Config.PID1 hands out (PID1.Tag;
// the pool and why no command can drop its tag: agent/pid1, tag.go).
// Supplementary groups are inherited by every child, so every descendant
// carries the tag, setsid'd, double-forked or daemonized, and the tree is
// exactly the set of processes whose /proc/<pid>/status lists it (plus the
// process group, which costs nothing to signal). This file is the tracking:
// the scans, the signals, and whether a tagged tree is gone.

// withTag returns a copy of cred whose supplementary groups include tag.
func withTag(cred *syscall.Credential, tag uint32) *syscall.Credential {
	c := *cred
	c.Groups = append(slices.Clone(cred.Groups), tag)
	return &c
}

// scanTagged lists the live processes whose supplementary groups hold tag,
// except this process. Every process of a tagged command's tree carries the
// tag (the process group is a subset), so this one read per process, of
// /proc/<pid>/status, is the whole scan. An error means the scan could not
// be made (or finished): the caller cannot conclude that no process is left.
//
// In a sandbox the agent is PID 1 of its pid namespace, and every process it
// sees is of its namespace or below it. Outside one (a test, a developer's
// host), /proc shows every process of the host, among them the commands of
// other agents' sandboxes, which carry tags of the same range: there only
// processes of this process's own pid namespace are taken (ownPidNS).
func scanTagged(tag uint32) ([]int, error) {
	defer procscan.Slot()()
	names, err := procscan.Names()
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == self {
			continue
		}
		b, err := procscan.ReadFile("/proc/" + n + "/status")
		if err != nil {
			continue
		}
		if live, groups, err := parseStatus(b); err == nil && live && slices.Contains(groups, tag) && inOwnPidNS(n) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// ownPidNS is this process's pid namespace ("pid:[inode]"), or "" when it is
// PID 1 of it (a sandbox's agent: nothing visible is foreign) or the link
// cannot be read.
var ownPidNS = sync.OnceValue(func() string {
	if os.Getpid() == 1 {
		return ""
	}
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return ns
})

// inOwnPidNS reports whether process pid (its /proc name) is in this
// process's pid namespace, where that matters (ownPidNS). A process whose
// namespace cannot be read (gone, or not ours to inspect) is not taken.
func inOwnPidNS(pid string) bool {
	own := ownPidNS()
	if own == "" {
		return true
	}
	ns, err := os.Readlink("/proc/" + pid + "/ns/pid")
	return err == nil && ns == own
}

// hasGroup reports whether the supplementary groups of pid hold gid, from
// the Groups line of /proc/<pid>/status (readable by anyone).
func hasGroup(pid int, gid uint32) bool {
	b, err := procscan.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	groups, err := parseGroups(b)
	return err == nil && slices.Contains(groups, gid)
}

// parseStatus returns whether a /proc/<pid>/status is of a live process
// (not a zombie), and its supplementary groups.
func parseStatus(status []byte) (live bool, groups []uint32, err error) {
	live = true
	if i := bytes.Index(status, []byte("\nState:")); i >= 0 {
		if f := bytes.Fields(status[i+len("\nState:"):]); len(f) > 0 && len(f[0]) == 1 {
			live = f[0][0] != 'Z' && f[0][0] != 'X' && f[0][0] != 'x'
		}
	}
	groups, err = parseGroups(status)
	return live, groups, err
}

// parseGroups returns the supplementary groups of a /proc/<pid>/status.
func parseGroups(status []byte) ([]uint32, error) {
	return procstatus.Groups(bytes.NewReader(status))
}

// signalTagged sends sig to pid if it still carries tag. With a pidfd the
// check and the signal are about the same process even if pid is reused in
// between: the pidfd is taken first, the tag checked after, and the signal
// goes to the pidfd's process (if that one died and the pid was reused, the
// check may read the newcomer, but the signal finds no one). Without pidfds
// (an old kernel, gVisor) it is a plain kill, as with any pid list.
func signalTagged(pid int, tag uint32, sig syscall.Signal) (sent bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if err == unix.ESRCH {
			return false
		}
		return hasGroup(pid, tag) && unix.Kill(pid, sig) == nil
	}
	defer unix.Close(fd)
	if !hasGroup(pid, tag) {
		return false
	}
	err = unix.PidfdSendSignal(fd, sig, nil, 0)
	if err == unix.ENOSYS {
		err = unix.Kill(pid, sig)
	}
	return err == nil
}

// tagSignalTree sends sig once to every process of the tree that is not in
// the process group pgid (which signalGroup signals as a group), and returns
// the pids it signalled.
func tagSignalTree(tag uint32, pgid int, sig syscall.Signal) []int {
	var out []int
	pids, _ := scanTagged(tag) // what could not be scanned, the next round finds
	for _, pid := range pids {
		if st, err := readProcStat(pid); err == nil && st.pgrp != pgid && signalTagged(pid, tag, sig) {
			out = append(out, pid)
		}
	}
	return out
}

// tagTreeAlive reports whether a live process carries tag; a scan that
// failed counts as alive.
func tagTreeAlive(tag uint32) bool {
	pids, err := scanTagged(tag)
	return err != nil || len(pids) > 0
}
