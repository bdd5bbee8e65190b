package files

import (
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
)

// asUser runs fn with the calling thread's filesystem ids set to the tree's
// user, so every file fn creates is the user's and every access is checked
// as the user's (see the package doc). fn must do its file operations in
// the calling goroutine: the ids belong to its thread. With UID < 0 fn runs
// as the process.
//
// The thread is restored before it is unlocked; if it cannot be, it stays
// locked and dies with the goroutine rather than go back to the pool with
// another user's ids.
func (t Tree) asUser(fn func() error) error {
	if t.UID < 0 {
		return fn()
	}
	runtime.LockOSThread()
	prevUID, _ := unix.SetfsuidRetUid(-1)
	prevGID, _ := unix.SetfsgidRetGid(-1)
	restore := func() bool {
		unix.Setfsuid(prevUID)
		unix.Setfsgid(prevGID)
		u, _ := unix.SetfsuidRetUid(-1)
		g, _ := unix.SetfsgidRetGid(-1)
		return u == prevUID && g == prevGID
	}
	// setfsuid(2) reports no error: it returns the previous id whatever
	// happened, so the new ids are read back.
	unix.Setfsgid(t.GID)
	unix.Setfsuid(t.UID)
	u, _ := unix.SetfsuidRetUid(-1)
	g, _ := unix.SetfsgidRetGid(-1)
	if u != t.UID || g != t.GID {
		if restore() {
			runtime.UnlockOSThread()
		}
		return executor.Errorf(executor.ErrUnavailable, "files: cannot act as %d:%d (fsuid %d, fsgid %d): the agent needs CAP_SETUID and CAP_SETGID", t.UID, t.GID, u, g)
	}
	defer func() {
		if restore() {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}
