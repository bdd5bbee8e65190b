package pid1

import (
	"sync"

	"github.com/shellbox/shellbox/executor"
)

// Tag groups: the pool.
//
// Inside a container the cgroupfs is read-only and the agent has no
// CAP_SYS_ADMIN, so there are no per-command cgroups, and the process group
// alone lets `setsid` escape. But the agent starts commands as another user
// (Credential), and gives each one an extra supplementary group, unique
// among the live commands: the tag. Supplementary groups are inherited by
// every child, and dropping one takes setgroups(2), which needs CAP_SETGID:
// the command lost it when it changed uid, and no-new-privileges keeps a
// setuid binary from getting it back. So every descendant carries the tag,
// setsid'd, double-forked or daemonized, and the tree is exactly the set of
// processes whose /proc/<pid>/status lists it (plus the process group, which
// costs nothing to signal). The runner tracks and signals a tagged tree
// (executor/local, tagtree.go); this file hands the tags out.

// GroupRange is a range of group ids: First, First+1, …, First+Count-1.
type GroupRange struct {
	First uint32
	Count uint32
}

// tagPool hands out tag gids, one per live command. A tag whose tree could
// not be emptied is never handed out again (quarantined), so a process stuck
// in an uninterruptible sleep cannot join a later command's tree.
type tagPool struct {
	r    GroupRange
	mu   sync.Mutex
	next uint32 // offset to try first: round robin, so a gid is reused late
	used map[uint32]bool
}

func newTagPool(r GroupRange) *tagPool {
	if r.Count == 0 {
		return nil
	}
	return &tagPool{r: r, used: map[uint32]bool{}}
}

// get returns a free tag gid.
func (tp *tagPool) get() (uint32, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for i := uint32(0); i < tp.r.Count; i++ {
		off := (tp.next + i) % tp.r.Count
		gid := tp.r.First + off
		if !tp.used[gid] {
			tp.used[gid] = true
			tp.next = (off + 1) % tp.r.Count
			return gid, nil
		}
	}
	return 0, executor.Errorf(executor.ErrLimit, "too many commands at once: all %d tag groups (TagGroups) are in use", tp.r.Count)
}

// put frees gid for reuse.
func (tp *tagPool) put(gid uint32) {
	tp.mu.Lock()
	delete(tp.used, gid)
	tp.mu.Unlock()
}
