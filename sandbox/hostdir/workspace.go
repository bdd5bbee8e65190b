package hostdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/sandbox"
)

// workspacesDir is the directory under StateDir that holds workspaces.
const workspacesDir = "workspaces"

// maxStacked bounds the unmounts of one workspace: more than one mount on
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

// Medium returns what new host workspaces are made of: the configured
// medium, or MediumMemory where MediumDisk had to fall back.
func (d *Dirs) Medium() Medium { return d.medium }

// Workspace returns the session's workspace, mounting it if it is not
// there, and whether it made it now (false: an earlier sandbox of the
// session left it mounted, with its files, or its image was mounted
// again, after a host reboot). A new workspace is, by Medium, an ext4
// filesystem in an image of size bytes, loop-mounted, or a tmpfs of size
// bytes; either is nosuid and nodev and its root uid:gid, 0755. One that
// exists is kept as it is, size and medium included: a policy change
// applies to new sessions.
//
// Every step is relative to the state directory (os.Root, openat with
// O_NOFOLLOW for the image), and the mount goes on the directory's own
// descriptor: a symlink anywhere below the state directory is refused, not
// followed. Calls for one session are serialised (one filesystem however
// many race); calls for different sessions run mkfs at the same time.
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
	defer d.lockSession(tenant, session)()
	path := d.WorkspacePath(tenant, session)
	ws, err := d.openWorkspace(tenant, session)
	if err != nil {
		return "", false, err
	}
	defer ws.close()
	switch {
	case ws.mounted:
		return path, false, d.checkMounted(ws, tenant, session)
	case ws.image != nil:
		// Made before a host reboot (or the workspace was unmounted
		// behind shellbox's back): its files are in it.
		devs, err := imageMounted(ws.realImage, ws.image)
		if err != nil {
			return "", false, workspaceErr(path, err)
		}
		if len(devs) > 0 {
			return "", false, fmt.Errorf("%w: workspace %s: image %s is mounted already from %v (a workspace unmounted lazily and still in use?): not mounting it twice",
				sandbox.ErrUnavailable, path, d.ImagePath(tenant, session), devs)
		}
		if err := mountImage(ws.image, ws.dir); err != nil {
			return "", false, fmt.Errorf("%w: workspace %s: %v", sandbox.ErrUnavailable, path, err)
		}
		return path, false, nil
	case ws.newImage != nil:
		img, err := d.formatImage(ws, session, size, uid, gid)
		if err != nil {
			d.dropNewImage(ws, session)
			return "", false, fmt.Errorf("%w: workspace %s: %v", sandbox.ErrUnavailable, path, err)
		}
		ws.image = img
		err = mountImage(img, ws.dir)
		if err == nil {
			if err = ws.finishRoot(uid, gid); err != nil {
				_ = unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			}
		}
		if err != nil {
			// Nothing of the sandbox's is in it yet: the image goes.
			_ = unix.Unlinkat(int(ws.images.Fd()), session+imageExt, 0)
			return "", false, fmt.Errorf("%w: workspace %s: %v (the server needs root for host workspaces; else set the agent quota)", sandbox.ErrUnavailable, path, err)
		}
		return path, true, nil
	}
	opts := "size=" + strconv.FormatInt(size, 10) + ",uid=" + strconv.Itoa(uid) + ",gid=" + strconv.Itoa(gid) + ",mode=0755"
	// On the descriptor: the directory Lstat saw, not whatever the path
	// names by now.
	target := "/proc/self/fd/" + strconv.Itoa(int(ws.dir.Fd()))
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", false, fmt.Errorf("%w: workspace: mount tmpfs on %s: %v (the server needs root for host workspaces; else set the agent quota)",
			sandbox.ErrUnavailable, path, err)
	}
	return path, true, nil
}

// openedWorkspace is a session's workspace directory and image, open.
type openedWorkspace struct {
	root      *os.Root
	rel       string   // workspaces/<tenant>/<session>, below root
	dir       *os.File // the mount point
	mounted   bool     // something is mounted on dir
	images    *os.File // workspace-images/<tenant>, nil if absent
	image     *os.File // <session>.ext4, nil if absent
	realImage string   // its path as the kernel names a loop's backing file
	newImage  *os.File // <session>.ext4.new, made for the disk medium
}

func (w *openedWorkspace) close() {
	for _, f := range []*os.File{w.dir, w.images, w.image, w.newImage} {
		if f != nil {
			f.Close()
		}
	}
	w.root.Close()
}

// openWorkspace lays out and opens the session's workspace directory, and
// its image if there is one; with none, no mount, and the disk medium, it
// creates the image's file (newImage) for formatImage. Under d.mu: the
// tenant directories it creates, and the file it creates in them, are
// what keeps another session's removal from deleting them.
func (d *Dirs) openWorkspace(tenant, session string) (*openedWorkspace, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	path := d.WorkspacePath(tenant, session)
	if err := os.MkdirAll(d.stateDir, 0o700); err != nil {
		return nil, workspaceErr(path, err)
	}
	root, err := os.OpenRoot(d.stateDir)
	if err != nil {
		return nil, workspaceErr(path, err)
	}
	ws := &openedWorkspace{root: root, rel: filepath.Join(workspacesDir, tenant, session)}
	ok := false
	defer func() {
		if !ok {
			ws.close()
		}
	}()
	parent := filepath.Dir(ws.rel)
	if err := mkdirsPrivate(root, workspacesDir, parent); err != nil {
		return nil, workspaceErr(path, err)
	}
	switch fi, err := root.Lstat(ws.rel); {
	case errors.Is(err, fs.ErrNotExist):
		if err := root.Mkdir(ws.rel, 0o700); err != nil {
			return nil, workspaceErr(path, err)
		}
	case err != nil:
		return nil, workspaceErr(path, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%w: workspace %s: not a directory (%s)", sandbox.ErrUnavailable, path, fi.Mode().Type())
	}
	if ws.dir, err = root.Open(ws.rel); err != nil {
		return nil, workspaceErr(path, err)
	}
	pfi, err := root.Lstat(parent)
	if err != nil {
		return nil, workspaceErr(path, err)
	}
	if ws.mounted, err = isMountRoot(ws.dir, pfi); err != nil {
		return nil, workspaceErr(path, err)
	}
	real, err := filepath.EvalSymlinks(d.stateDir)
	if err != nil {
		return nil, workspaceErr(path, err)
	}
	ws.realImage = filepath.Join(real, imagesDir, tenant, session+imageExt)
	imgParent := filepath.Join(imagesDir, tenant)
	if ws.images, err = openDirNoFollow(root, imgParent); err != nil {
		return nil, workspaceErr(path, err)
	}
	if ws.mounted {
		ok = true
		return ws, nil
	}
	if ws.images != nil {
		if ws.image, err = openImage(ws.images, session, d.ImagePath(tenant, session)); err != nil {
			return nil, workspaceErr(path, err)
		}
	}
	if ws.image == nil && d.medium == MediumDisk {
		if ws.images == nil {
			if err := mkdirsPrivate(root, imagesDir, imgParent); err != nil {
				return nil, workspaceErr(path, err)
			}
			if ws.images, err = openDirNoFollow(root, imgParent); err != nil || ws.images == nil {
				return nil, workspaceErr(path, fmt.Errorf("open %s: %v", imgParent, err))
			}
		}
		if ws.newImage, err = createImage(ws.images, session, d.ImagePath(tenant, session)+".new"); err != nil {
			return nil, workspaceErr(path, err)
		}
	}
	ok = true
	return ws, nil
}

// mkdirsPrivate makes the directories below root, each root's and 0700.
func mkdirsPrivate(root *os.Root, dirs ...string) error {
	if err := root.MkdirAll(dirs[len(dirs)-1], 0o700); err != nil {
		return err
	}
	for _, p := range dirs {
		if err := root.Chmod(p, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// openDirNoFollow opens the directory rel below root, refusing a symlink
// in its place; nil, nil when it does not exist.
func openDirNoFollow(root *os.Root, rel string) (*os.File, error) {
	fi, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory (%s)", rel, fi.Mode().Type())
	}
	return root.Open(rel)
}

// checkMounted refuses a workspace on which something other than
// shellbox's own filesystem is mounted: a tmpfs, or an ext4 whose loop
// device is backed by the session's image.
func (d *Dirs) checkMounted(ws *openedWorkspace, tenant, session string) error {
	path := d.WorkspacePath(tenant, session)
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(ws.dir.Fd()), &st); err != nil {
		return workspaceErr(path, err)
	}
	switch st.Type {
	case unix.TMPFS_MAGIC:
		return nil
	case unix.EXT4_SUPER_MAGIC:
		var s unix.Stat_t
		if err := unix.Fstat(int(ws.dir.Fd()), &s); err != nil {
			return workspaceErr(path, err)
		}
		backing, err := loopBacking(s.Dev)
		if err != nil {
			return workspaceErr(path, err)
		}
		if backing == ws.realImage {
			return nil
		}
		return fmt.Errorf("%w: workspace %s: an ext4 not of the session's image is mounted there (its loop device is backed by %q, want %s)",
			sandbox.ErrUnavailable, path, backing, ws.realImage)
	}
	return fmt.Errorf("%w: workspace %s: something other than shellbox's workspace is mounted there (filesystem type %#x)",
		sandbox.ErrUnavailable, path, st.Type)
}

// finishRoot readies a new disk workspace's root: mkfs's lost+found goes
// (an export of the workspace must not carry it), and the root is uid:gid
// 0755 whatever mkfs made of it. The root is opened anew: ws.dir is the
// directory under the mount.
func (w *openedWorkspace) finishRoot(uid, gid int) error {
	top, err := w.root.Open(w.rel)
	if err != nil {
		return err
	}
	defer top.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(top.Fd()), &st); err != nil {
		return err
	}
	if st.Type != unix.EXT4_SUPER_MAGIC {
		return fmt.Errorf("the new ext4 is not at %s (filesystem type %#x)", w.rel, st.Type)
	}
	fd := int(top.Fd())
	if err := unix.Unlinkat(fd, "lost+found", unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove lost+found: %w", err)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	return unix.Fchmod(fd, 0o755)
}

// createImage creates <session>.ext4.new in images, empty, the file named
// path: what a crash midway left under that name is started over; a
// symlink there is refused.
func createImage(images *os.File, session, path string) (*os.File, error) {
	fd, err := unix.Openat(int(images.Fd()), session+newExt, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := checkRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// dropNewImage deletes the image file a failed formatImage left.
func (d *Dirs) dropNewImage(ws *openedWorkspace, session string) {
	if ws.newImage != nil {
		ws.newImage.Close()
		ws.newImage = nil
	}
	_ = unix.Unlinkat(int(ws.images.Fd()), session+newExt, 0)
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

// HasWorkspace reports whether the session has a workspace directory or
// image.
func (d *Dirs) HasWorkspace(tenant, session string) bool {
	if fi, err := os.Lstat(d.WorkspacePath(tenant, session)); err == nil && fi.IsDir() {
		return true
	}
	_, err := os.Lstat(d.ImagePath(tenant, session))
	return err == nil
}

// RemoveWorkspace unmounts the session's workspace, deletes its image and
// its directory, and the tenant directories above them when that leaves
// them empty; it reports whether there was one. The files go with the
// filesystem (a tmpfs, or the image, whose loop device clears itself once
// unmounted): nothing here reads, follows or deletes what a sandbox wrote.
func (d *Dirs) RemoveWorkspace(tenant, session string) (bool, error) {
	if err := d.Check(tenant, session); err != nil {
		return false, err
	}
	defer d.lockSession(tenant, session)()
	return d.removeWorkspace(tenant, session)
}

// removeWorkspace is RemoveWorkspace without the checks. The session's
// lock held, not d.mu.
func (d *Dirs) removeWorkspace(tenant, session string) (bool, error) {
	path := d.WorkspacePath(tenant, session)
	root, err := os.OpenRoot(d.stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, workspaceErr(path, err)
	}
	defer root.Close()
	rel := filepath.Join(workspacesDir, tenant, session)
	imgParent := filepath.Join(imagesDir, tenant)
	var dirSt unix.Stat_t
	_, dirErr := root.Lstat(rel)
	hasDir := dirErr == nil
	images, err := openDirNoFollow(root, imgParent)
	if err != nil {
		return hasDir, workspaceErr(path, err)
	}
	if images != nil {
		defer images.Close()
	}
	var imgSt unix.Stat_t
	hasImg, hasNew := false, false
	if images != nil {
		hasImg = unix.Fstatat(int(images.Fd()), session+imageExt, &imgSt, unix.AT_SYMLINK_NOFOLLOW) == nil
		var st unix.Stat_t
		hasNew = unix.Fstatat(int(images.Fd()), session+newExt, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	if !hasDir && !hasImg && !hasNew {
		return false, nil
	}
	if hasDir {
		// The device of what is mounted there, for the loop check below
		// (Lstat: a symlink in the mount point's place is not followed).
		_ = unix.Lstat(path, &dirSt)
		// Detach, so a process holding a file open cannot keep it;
		// NOFOLLOW, so a symlink put in its place is not followed.
		// EINVAL: no (more) mount there.
		for range maxStacked {
			err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				break
			}
			if err != nil {
				return true, fmt.Errorf("%w: workspace: unmount %s: %v", sandbox.ErrUnavailable, path, err)
			}
		}
	}
	if hasImg {
		// The unmount released the loop device (autoclear) unless a
		// process still holds a file of the workspace; clear it here
		// where autoclear did not (an old kernel's fallback).
		if hasDir && dirSt.Dev != imgSt.Dev {
			if err := detachLoop(dirSt.Dev, imgSt); err != nil {
				return true, workspaceErr(path, err)
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if images != nil {
		for _, name := range []string{session + imageExt, session + newExt} {
			if err := unix.Unlinkat(int(images.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return true, workspaceErr(d.ImagePath(tenant, session), err)
			}
		}
		if err := root.Remove(imgParent); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
			return true, workspaceErr(path, err)
		}
	}
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

// sweepWorkspaces removes the workspaces for which live reports false:
// their directories, and images whose directory is gone.
func (d *Dirs) sweepWorkspaces(live func(tenant, session string) bool) ([]string, error) {
	rm := func(tenant, session string) error {
		defer d.lockSession(tenant, session)()
		_, err := d.removeWorkspace(tenant, session)
		return err
	}
	removed, err := d.sweepTree(workspacesDir, live, rm)
	orphans, oerr := d.sweepImages(live, rm)
	return append(removed, orphans...), errors.Join(err, oerr)
}

// sweepImages calls rm for every image (or image being made) under
// <StateDir>/workspace-images whose session live reports false.
func (d *Dirs) sweepImages(live func(tenant, session string) bool, rm func(tenant, session string) error) ([]string, error) {
	root := filepath.Join(d.stateDir, imagesDir)
	tenants, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: workspace images: %v", sandbox.ErrUnavailable, err)
	}
	var removed []string
	var errs []error
	for _, t := range tenants {
		if !t.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: workspace images: %v", sandbox.ErrUnavailable, err))
			continue
		}
		for _, f := range files {
			session, ok := strings.CutSuffix(f.Name(), newExt)
			if !ok {
				session, ok = strings.CutSuffix(f.Name(), imageExt)
			}
			if !ok || d.Check(t.Name(), session) != nil || live(t.Name(), session) {
				continue
			}
			if err := rm(t.Name(), session); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, filepath.Join(root, t.Name(), f.Name()))
		}
	}
	return removed, errors.Join(errs...)
}

// lockSession takes the session's workspace lock and returns its release.
func (d *Dirs) lockSession(tenant, session string) func() {
	key := tenant + "/" + session
	d.locksMu.Lock()
	l := d.locks[key]
	if l == nil {
		l = &sessionLock{}
		d.locks[key] = l
	}
	l.refs++
	d.locksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		d.locksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(d.locks, key)
		}
		d.locksMu.Unlock()
	}
}

type sessionLock struct {
	mu   sync.Mutex
	refs int
}

func workspaceErr(path string, err error) error {
	return fmt.Errorf("%w: workspace %s: %v", sandbox.ErrUnavailable, path, err)
}
