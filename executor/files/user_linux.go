package files

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
)

// asUser runs fn with the calling thread's filesystem ids set to the tree's
// user, so every file fn creates is the user's and every access is checked
// as the user's (see the package doc). fn must do its file operations in
// the calling goroutine: the ids belong to its thread. With UID < 0 fn runs
// as the process.
//
// The ids are the thread's alone: setfsuid(2) where the kernel has it, else
// (gVisor has no setfsuid) the thread's effective ids, with raw
// setresuid(2)/setresgid(2) calls that, unlike Go's syscall.Setresuid, do
// not reach the other threads; the real and saved ids stay root's, so the
// thread can come back and its commands still cannot signal or trace it.
// The Go runtime starts no thread from a locked one (it asks its template
// thread), so no other thread inherits the ids. The thread is restored
// before it is unlocked, its capability sets included (coming back to a
// root id copies permitted capabilities into the effective set, and the
// agent keeps some permitted only: AsTracer); if it cannot be, it stays
// locked and dies with the goroutine rather than go back to the pool as
// another user or with more capabilities.
func (t Tree) asUser(fn func() error) error {
	if t.UID < 0 {
		return fn()
	}
	return AsUser(t.UID, t.GID, fn)
}

// AsUser runs fn with the calling thread's filesystem ids (or, where the
// kernel has no setfsuid, its effective ids) set to uid and gid, as a
// Tree's transfers do (see asUser): what fn does in the calling goroutine
// is checked as that user's, which is also what lets the agent read the
// /proc/<pid>/fd links of its commands (egress.Holders) without
// CAP_SYS_PTRACE on Linux (not under gVisor: AsTracer). It shares the
// MaxUserThreads budget with transfers.
func AsUser(uid, gid int, fn func() error) error {
	// fn may wait on the network with its thread locked: at most
	// MaxUserThreads threads are held so at once, whatever the number of
	// transfers in flight (the rest wait here, on no thread of their own),
	// so the agent's thread budget (agentapi.AgentTasks) holds.
	userThreads <- struct{}{}
	defer func() { <-userThreads }()
	runtime.LockOSThread()
	restore, err := switchIDs(uid, gid)
	if err != nil {
		if restore() {
			runtime.UnlockOSThread()
		}
		return err
	}
	defer func() {
		if restore() {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}

// MaxUserThreads bounds the threads locked to the tree's user at once (one
// per transfer in flight): part of the agent's thread budget.
const MaxUserThreads = 2

var userThreads = make(chan struct{}, MaxUserThreads)

// forceEffectiveIDs makes switchIDs skip setfsuid (tests of the gVisor
// path on a Linux kernel).
var forceEffectiveIDs = false

// switchIDs switches the thread to uid and gid for file access and returns
// how to switch back (true: restored, capability sets included).
func switchIDs(uid, gid int) (restore func() bool, err error) {
	// Going back to root ids raises what the permitted set holds (all of
	// it for the effective ids, the file system capabilities for
	// setfsuid): the sets are put back as they were.
	caps, err := threadCaps()
	if err != nil {
		return func() bool { return true }, cannotSwitch(uid, gid, err.Error())
	}
	restoreIDs, err := switchThreadIDs(uid, gid)
	return func() bool { return restoreIDs() && setThreadCaps(caps) == nil }, err
}

// switchThreadIDs is switchIDs but for the capability sets.
func switchThreadIDs(uid, gid int) (restore func() bool, err error) {
	prevUID, uerr := unix.SetfsuidRetUid(-1)
	prevGID, gerr := unix.SetfsgidRetGid(-1)
	if !forceEffectiveIDs && uerr == nil && gerr == nil && prevUID >= 0 && prevGID >= 0 {
		restore = func() bool {
			unix.Setfsuid(prevUID)
			unix.Setfsgid(prevGID)
			u, _ := unix.SetfsuidRetUid(-1)
			g, _ := unix.SetfsgidRetGid(-1)
			return u == prevUID && g == prevGID
		}
		// setfsuid(2) reports no error: it returns the previous id
		// whatever happened, so the new ids are read back.
		unix.Setfsgid(gid)
		unix.Setfsuid(uid)
		u, _ := unix.SetfsuidRetUid(-1)
		g, _ := unix.SetfsgidRetGid(-1)
		if u == uid && g == gid {
			return restore, nil
		}
		if !restore() {
			return func() bool { return false }, cannotSwitch(uid, gid, "setfsuid")
		}
	}
	// The thread's effective ids. gid first, while the thread is root.
	_, peuid, _ := getres(unix.SYS_GETRESUID)
	_, pegid, _ := getres(unix.SYS_GETRESGID)
	restore = func() bool {
		setres(unix.SYS_SETRESUID, peuid)
		setres(unix.SYS_SETRESGID, pegid)
		_, eu, _ := getres(unix.SYS_GETRESUID)
		_, eg, _ := getres(unix.SYS_GETRESGID)
		return eu == peuid && eg == pegid
	}
	if err := setres(unix.SYS_SETRESGID, gid); err != nil {
		return restore, cannotSwitch(uid, gid, "setresgid: "+err.Error())
	}
	if err := setres(unix.SYS_SETRESUID, uid); err != nil {
		return restore, cannotSwitch(uid, gid, "setresuid: "+err.Error())
	}
	_, eu, _ := getres(unix.SYS_GETRESUID)
	_, eg, _ := getres(unix.SYS_GETRESGID)
	if eu != uid || eg != gid {
		return restore, cannotSwitch(uid, gid, "the ids did not change")
	}
	return restore, nil
}

func cannotSwitch(uid, gid int, why string) error {
	return executor.Errorf(executor.ErrUnavailable, "files: cannot act as %d:%d (%s): the agent needs CAP_SETUID and CAP_SETGID", uid, gid, why)
}

// setres sets only the effective id of the calling thread (real and saved
// stay): the raw system call, not Go's all-threads wrapper.
func setres(trap uintptr, id int) error {
	keep := ^uintptr(0) // -1: unchanged
	if _, _, e := unix.RawSyscall(trap, keep, uintptr(id), keep); e != 0 {
		return e
	}
	return nil
}

// getres returns the calling thread's real, effective and saved ids.
func getres(trap uintptr) (r, e, s int) {
	var ru, eu, su uint32
	unix.RawSyscall(trap, uintptr(unsafe.Pointer(&ru)), uintptr(unsafe.Pointer(&eu)), uintptr(unsafe.Pointer(&su)))
	return int(ru), int(eu), int(su)
}
