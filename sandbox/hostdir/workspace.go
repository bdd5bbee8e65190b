package hostdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/sandbox"
)

// workspacesDir is the directory under StateDir that holds workspaces.
const workspacesDir = "workspaces"

// maxStacked bounds the unmounts of one workspace: more than one tmpfs on
// it is only what a crash between two of shellbox's own mounts could leave.
const maxStacked = 8

// WorkspacePath returns <StateDir>/workspaces/<tenant>/<session>.
func (d *Dirs) WorkspacePath(tenant, session string) string {
	return filepath.Join(d.stateDir, workspacesDir, tenant, session)
}

// Workspaces reports whether sessions' workspaces live on the host
// (QuotaTmpfs). Without them (QuotaAgent: the server cannot mount) a
// runtime gives each sandbox a tmpfs of its own, which ends with it.
func (d *Dirs) Workspaces() bool { return d.quota == QuotaTmpfs }

// Workspace returns the session's workspace, mounting it if it is not
// there, and whether it mounted it now (false: an earlier sandbox of the
// session left it, with its files). A new workspace is a tmpfs of size
// bytes, nosuid and nodev, whose root is uid:gid, 0755. One that exists is
// kept as it is, size included: a policy change applies to new sessions.
//
// Every step is relative to the state directory (os.Root), and the mount
// goes on the directory's own descriptor: a symlink anywhere below the
// state directory is refused, not followed.
func (d *Dirs) Workspace(tenant, session string, size int64, uid, gid int) (string, bool, error) {
	if err := d.Check(tenant, session); err != nil {
		return "", false, err
	}
	if size < 1 || uid < 1 || gid < 1 {
		return "", false, fmt.Errorf("%w: workspace: size %d, owner %d:%d: all must be positive", sandbox.ErrInvalid, size, uid, gid)
	}
	if !d.Workspaces() {
		return "", false, fmt.Errorf("%w: workspace: the agent quota keeps no workspaces on the host", sandbox.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	path := d.WorkspacePath(tenant, session)
	if err := os.MkdirAll(d.stateDir, 0o700); err != nil {
		return "", false, workspaceErr(path, err)
	}
	root, err := os.OpenRoot(d.stateDir)
	if err != nil {
		return "", false, workspaceErr(path, err)
	}
	defer root.Close()
	parent := filepath.Join(workspacesDir, tenant)
	if err := root.MkdirAll(parent, 0o700); err != nil {
		return "", false, workspaceErr(path, err)
	}
	for _, p := range []string{workspacesDir, parent} {
		if err := root.Chmod(p, 0o700); err != nil {
			return "", false, workspaceErr(path, err)
		}
	}
	rel := filepath.Join(parent, session)
	switch fi, err := root.Lstat(rel); {
	case errors.Is(err, fs.ErrNotExist):
		if err := root.Mkdir(rel, 0o700); err != nil {
			return "", false, workspaceErr(path, err)
		}
	case err != nil:
		return "", false, workspaceErr(path, err)
	case !fi.IsDir():
		return "", false, fmt.Errorf("%w: workspace %s: not a directory (%s)", sandbox.ErrUnavailable, path, fi.Mode().Type())
	}
	dir, err := root.Open(rel)
	if err != nil {
		return "", false, workspaceErr(path, err)
	}
	defer dir.Close()
	pfi, err := root.Lstat(parent)
	if err != nil {
		return "", false, workspaceErr(path, err)
	}
	mounted, err := isMountRoot(dir, pfi)
	if err != nil {
		return "", false, workspaceErr(path, err)
	}
	if mounted {
		var st unix.Statfs_t
		if err := unix.Fstatfs(int(dir.Fd()), &st); err != nil {
			return "", false, workspaceErr(path, err)
		}
		if st.Type != unix.TMPFS_MAGIC {
			return "", false, fmt.Errorf("%w: workspace %s: something other than shellbox's tmpfs is mounted there (filesystem type %#x)",
				sandbox.ErrUnavailable, path, st.Type)
		}
		return path, false, nil
	}
	opts := "size=" + strconv.FormatInt(size, 10) + ",uid=" + strconv.Itoa(uid) + ",gid=" + strconv.Itoa(gid) + ",mode=0755"
	// On the descriptor: the directory Lstat saw, not whatever the path
	// names by now.
	target := "/proc/self/fd/" + strconv.Itoa(int(dir.Fd()))
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", false, fmt.Errorf("%w: workspace: mount tmpfs on %s: %v (the server needs root for host workspaces; else set the agent quota)",
			sandbox.ErrUnavailable, path, err)
	}
	return path, true, nil
}

// isMountRoot reports whether dir is the root of a filesystem mounted on
// it: its device differs from its parent's.
func isMountRoot(dir *os.File, parent fs.FileInfo) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return false, err
	}
	pst, ok := parent.Sys().(*syscall.Stat_t)
	if !ok {
		return false, errors.New("no device number for the parent directory")
	}
	return st.Dev != pst.Dev, nil
}

// HasWorkspace reports whether the session has a workspace directory.
func (d *Dirs) HasWorkspace(tenant, session string) bool {
	fi, err := os.Lstat(d.WorkspacePath(tenant, session))
	return err == nil && fi.IsDir()
}

// RemoveWorkspace unmounts the session's workspace and deletes its
// directory, and the tenant directory above it when that is left empty;
// it reports whether there was one. The files go with the tmpfs: nothing
// here reads, follows or deletes what a sandbox wrote.
func (d *Dirs) RemoveWorkspace(tenant, session string) (bool, error) {
	if err := d.Check(tenant, session); err != nil {
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.removeWorkspace(tenant, session)
}

// removeWorkspace is RemoveWorkspace without the checks. d.mu held.
func (d *Dirs) removeWorkspace(tenant, session string) (bool, error) {
	path := d.WorkspacePath(tenant, session)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	// Detach, so a process holding a file open cannot keep it; NOFOLLOW,
	// so a symlink put in its place is not followed. EINVAL: no (more)
	// mount there.
	for range maxStacked {
		err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			return true, fmt.Errorf("%w: workspace: unmount %s: %v", sandbox.ErrUnavailable, path, err)
		}
	}
	root, err := os.OpenRoot(d.stateDir)
	if err != nil {
		return true, workspaceErr(path, err)
	}
	defer root.Close()
	rel := filepath.Join(workspacesDir, tenant, session)
	// Empty once unmounted; RemoveAll (which follows no symlink) for what
	// a mount that never happened may have left.
	if err := root.RemoveAll(rel); err != nil {
		return true, workspaceErr(path, err)
	}
	if err := root.Remove(filepath.Dir(rel)); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return true, workspaceErr(path, err)
	}
	return true, nil
}

// sweepWorkspaces removes the workspaces for which live reports false.
func (d *Dirs) sweepWorkspaces(live func(tenant, session string) bool) ([]string, error) {
	return d.sweepTree(workspacesDir, live, func(tenant, session string) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		_, err := d.removeWorkspace(tenant, session)
		return err
	})
}

func workspaceErr(path string, err error) error {
	return fmt.Errorf("%w: workspace %s: %v", sandbox.ErrUnavailable, path, err)
}
