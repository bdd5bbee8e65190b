package hostdir

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/sandbox"
)

// WorkspaceUsed returns the bytes the session's host workspace holds: the
// used blocks of its own file system (an ext4 image or a tmpfs), as the
// kernel counts them. It costs an open, two stats and a statfs, whatever
// the workspace holds: nothing walks its files. ErrNotFound: no workspace
// is mounted there (none yet, or removed; or no host workspaces at all).
func (d *Dirs) WorkspaceUsed(tenant, session string) (int64, error) {
	if err := d.Check(tenant, session); err != nil {
		return 0, err
	}
	path := d.WorkspacePath(tenant, session)
	parent, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return 0, fmt.Errorf("%w: workspace of %s/%s: %v", sandbox.ErrNotFound, tenant, session, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("%w: workspace of %s/%s: %v", sandbox.ErrNotFound, tenant, session, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	defer dir.Close()
	// A directory that is not a mount root is the state directory's own
	// file system: its figures would be the host disk's.
	if root, err := isMountRoot(dir, parent); err != nil || !root {
		return 0, fmt.Errorf("%w: workspace of %s/%s: not mounted", sandbox.ErrNotFound, tenant, session)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return 0, fmt.Errorf("workspace of %s/%s: statfs: %w", tenant, session, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}
