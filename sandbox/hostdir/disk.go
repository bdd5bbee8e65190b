package hostdir

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/internal/clip"
	"github.com/shellbox/shellbox/sandbox"
)

// Medium says what a session's host workspace is made of.
type Medium = sandbox.WorkspaceMedium

const (
	// MediumDisk (the default, also "") is an ext4 filesystem of the
	// workspace's size in a sparse image file on the state directory's
	// disk, loop-mounted: bounded, on disk, and it survives a host reboot.
	// Where this host gives no loop devices, New falls back to
	// MediumMemory and logs why.
	MediumDisk = sandbox.WorkspaceDisk
	// MediumMemory is a tmpfs of the workspace's size: host memory, lost at
	// a host reboot.
	MediumMemory = sandbox.WorkspaceMemory
)

// ParseMedium returns the Medium s names ("" is MediumDisk).
func ParseMedium(s string) (Medium, error) {
	switch Medium(s) {
	case "", MediumDisk:
		return MediumDisk, nil
	case MediumMemory:
		return MediumMemory, nil
	}
	return "", fmt.Errorf("%w: workspace medium %q: want disk or memory", sandbox.ErrInvalid, s)
}

// Where the images are: <StateDir>/workspace-images/<tenant>/<session>.ext4,
// apart from the workspaces (whose directories are mount points) and never
// mounted into a sandbox. An image is made as <session>.ext4.new and
// renamed once mkfs finished, so an image under the final name is a whole
// filesystem.
const (
	imagesDir = "workspace-images"
	imageExt  = ".ext4"
	newExt    = ".ext4.new"
)

// ImagePath returns <StateDir>/workspace-images/<tenant>/<session>.ext4, the
// image of the session's workspace on the disk medium.
func (d *Dirs) ImagePath(tenant, session string) string {
	return filepath.Join(d.stateDir, imagesDir, tenant, session+imageExt)
}

// mkfsTimeout bounds one mkfs.ext4 (tens of milliseconds for 10 GiB on a
// sparse file: it writes metadata only).
const mkfsTimeout = 2 * time.Minute

// maxToolOutput bounds what is kept of mkfs's output for an error.
const maxToolOutput = 4 << 10

// loopControl and mkfsDirs are variables for the tests of a host
// without loop devices or mkfs.ext4.
var (
	loopControl = "/dev/loop-control"
	mkfsDirs    = []string{"/usr/sbin", "/sbin"}
)

// loopAttempts bounds the retries of a free loop device another process
// took between LOOP_CTL_GET_FREE and LOOP_CONFIGURE.
const loopAttempts = 16

// probeLoop reports why this host gives no loop devices (nil: it does):
// /dev/loop-control must open, hand out a free device, and that device
// must open for writing. It attaches nothing.
func probeLoop() error {
	ctl, err := unix.Open(loopControl, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", loopControl, err)
	}
	defer unix.Close(ctl)
	n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
	if err != nil {
		return fmt.Errorf("%s: LOOP_CTL_GET_FREE: %w", loopControl, err)
	}
	dev := "/dev/loop" + strconv.Itoa(n)
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dev, err)
	}
	return unix.Close(fd)
}

// findMkfs returns mkfs.ext4's path: on PATH, else in the sbin
// directories a server's PATH may lack.
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, dir := range mkfsDirs {
		p := filepath.Join(dir, "mkfs.ext4")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: workspace medium disk: mkfs.ext4 is not on PATH nor in /usr/sbin or /sbin: install e2fsprogs, or set sandbox.workspaceMedium: memory",
		sandbox.ErrUnavailable)
}

// formatImage makes an ext4 filesystem in the session's new image file
// (ws.newImage, <session>.ext4.new: sized here to size bytes, sparse
// until mountImage reserves it),
// whose root is uid:gid 0755, and renames it <session>.ext4. It returns
// the image, open for reading and writing.
func (d *Dirs) formatImage(ws *openedWorkspace, session string, size int64, uid, gid int) (*os.File, error) {
	img := ws.newImage
	tmp, final := session+newExt, session+imageExt
	if err := img.Truncate(size); err != nil {
		return nil, fmt.Errorf("size %s: %w", img.Name(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mkfsTimeout)
	defer cancel()
	// The file itself (fd 3 in mkfs), not a path: mkfs formats what was
	// created here. -m 0: no blocks reserved for root (the sandbox user is
	// not root); -i 8192: an inode per 8 KiB, for trees of small files
	// (a checkout, a venv); lazy init: the image is sparse, its unwritten
	// inode tables and journal read as zeros already, so mkfs writes
	// metadata only (and marks the tables zeroed: no background init);
	// errors remount it read-only rather than go on.
	cmd := exec.CommandContext(ctx, d.mkfs, "-q", "-F", "-m", "0", "-i", "8192", "-L", "shellbox-ws",
		"-e", "remount-ro",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,root_owner="+strconv.Itoa(uid)+":"+strconv.Itoa(gid),
		"/dev/fd/3")
	cmd.ExtraFiles = []*os.File{img}
	// No MKE2FS_CONFIG or locale of the server's environment.
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	var out capped
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s on %s (%d bytes): %w: %s", d.mkfs, img.Name(), size, err, clip.To(strings.TrimSpace(out.String()), 1000))
	}
	if err := unix.Renameat(int(ws.images.Fd()), tmp, int(ws.images.Fd()), final); err != nil {
		return nil, fmt.Errorf("rename %s: %w", img.Name(), err)
	}
	// The same file under its final name (for messages and losetup).
	fd, err := unix.FcntlInt(img.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", img.Name(), err)
	}
	return os.NewFile(uintptr(fd), strings.TrimSuffix(img.Name(), ".new")), nil
}

// openImage opens the session's image in images (the tenant's directory)
// if there is one (nil, nil: none), the file named path. A symlink or
// anything but a regular file there is an error.
func openImage(images *os.File, session, path string) (*os.File, error) {
	fd, err := unix.Openat(int(images.Fd()), session+imageExt, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	img := os.NewFile(uintptr(fd), path)
	if err := checkRegular(img); err != nil {
		img.Close()
		return nil, err
	}
	return img, nil
}

func checkRegular(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file (%s)", f.Name(), fi.Mode().Type())
	}
	return nil
}

// mountImage reserves img's blocks on the state directory's disk
// (reserve), attaches it to a free loop device and mounts its ext4 on the
// directory dir (by its descriptor), nosuid and nodev; not discard, which
// would punch the blocks the sandbox frees out of the image again. The
// loop device clears itself (LO_FLAGS_AUTOCLEAR) once the filesystem is
// unmounted, or at once if the mount fails.
func mountImage(img, dir *os.File) error {
	if err := reserve(img); err != nil {
		return err
	}
	loop, err := attachLoop(img)
	if err != nil {
		return err
	}
	// Closed only after the mount holds the device: the last close of an
	// autoclear device with no mount detaches it.
	defer loop.Close()
	target := "/proc/self/fd/" + strconv.Itoa(int(dir.Fd()))
	if err := unix.Mount(loop.Name(), target, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount %s (image %s) as ext4: %w", loop.Name(), img.Name(), err)
	}
	return nil
}

// reserve allocates every block of img on the disk under it (fallocate,
// mode 0: unwritten extents, read as zeros, no data written; nothing to do
// for blocks allocated already), before each mount. A sparse image
// overcommits the disk: when the state directory's disk filled up, a write
// in the workspace that needed a block of the image failed below ext4,
// which aborted its journal and remounted the workspace read-only for good
// (test/faults TestStateDiskFull, docs/reliability.md). Reserved, a workspace
// costs its whole size on the disk for as long as its image exists, and a
// disk that cannot hold it refuses the mount, naming both, instead. A
// filesystem under the state directory without fallocate(2) (EOPNOTSUPP)
// keeps the image sparse.
//
// What is missing is compared with the disk's free space first: a
// fallocate that fails with ENOSPC keeps the blocks it did allocate, and
// the image stays (a session's files are in it), so a failed reserve
// would otherwise leave the disk full.
func reserve(img *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(img.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", img.Name(), err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(img.Fd()), &fs); err == nil {
		need := st.Size - st.Blocks*512
		if avail := int64(fs.Bavail) * int64(fs.Bsize); need > avail {
			return fmt.Errorf("the state directory's disk cannot hold the workspace's %d bytes (image %s: %d more wanted, %d free): %w",
				st.Size, img.Name(), need, avail, unix.ENOSPC)
		}
	}
	err := unix.Fallocate(int(img.Fd()), 0, 0, st.Size)
	switch {
	case err == nil, errors.Is(err, unix.EOPNOTSUPP):
		return nil
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("the state directory's disk cannot hold the workspace's %d bytes (image %s): %w", st.Size, img.Name(), err)
	}
	return fmt.Errorf("reserving %d bytes for image %s: %w", st.Size, img.Name(), err)
}

// attachLoop binds img to a free loop device, autoclear, direct I/O where
// the backing filesystem allows it (else the kernel keeps buffered I/O):
// the workspace's pages are not cached twice. It returns the device, open.
func attachLoop(img *os.File) (*os.File, error) {
	ctl, err := unix.Open(loopControl, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", loopControl, err)
	}
	defer unix.Close(ctl)
	var lastErr error
	for range loopAttempts {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("%s: LOOP_CTL_GET_FREE: %w", loopControl, err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", dev, err)
		}
		loop := os.NewFile(uintptr(fd), dev)
		err = configureLoop(fd, img)
		if err == nil {
			return loop, nil
		}
		loop.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("%s: attach %s: %w", dev, img.Name(), err)
		}
		// Another process took the device since GET_FREE.
		lastErr = err
	}
	return nil, fmt.Errorf("attach %s: no free loop device after %d attempts: %w", img.Name(), loopAttempts, lastErr)
}

// configureLoop binds the loop device fd to img: LOOP_CONFIGURE (Linux
// 5.8), else LOOP_SET_FD and LOOP_SET_STATUS64. The fallback has a moment
// without autoclear: a crash there leaves the device bound.
func configureLoop(fd int, img *os.File) error {
	cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	// What losetup shows: the image's path, its tail if it is longer.
	name := img.Name()
	copy(cfg.Info.File_name[:unix.LO_NAME_SIZE-1], name[max(0, len(name)-(unix.LO_NAME_SIZE-1)):])
	err := unix.IoctlLoopConfigure(fd, &cfg)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTTY) {
		return err
	}
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_FD, int(img.Fd())); err != nil {
		return err
	}
	info := cfg.Info
	info.Flags = unix.LO_FLAGS_AUTOCLEAR
	if err := unix.IoctlLoopSetStatus64(fd, &info); err != nil {
		_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
		return err
	}
	return nil
}

// imageMounted returns the loop devices bound to the image img (the
// kernel names its backing file path: its real path) whose filesystem is
// mounted somewhere: a lazy unmount still in use, or a mount shellbox did
// not make. A device bound but not mounted is left out: it is a moment
// from clearing itself (autoclear waits for whoever has it open, e.g.
// another process's probe of free devices), and nothing writes through it.
func imageMounted(path string, img *os.File) ([]string, error) {
	var ist unix.Stat_t
	if err := unix.Fstat(int(img.Fd()), &ist); err != nil {
		return nil, err
	}
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b, err := readSmall(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue // cleared meanwhile
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimSuffix(string(b), "\n") != path {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		busy, err := loopBusy(dev, ist)
		if err != nil {
			return nil, err
		}
		if busy {
			out = append(out, dev)
		}
	}
	return out, nil
}

// loopBusy reports whether the loop device dev is bound to the file img
// (by device and inode) and claimed exclusively, as a mounted filesystem
// claims its device.
func loopBusy(dev string, img unix.Stat_t) (bool, error) {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err == nil {
		return false, unix.Close(fd)
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) {
		return false, nil
	}
	if !errors.Is(err, unix.EBUSY) {
		return false, fmt.Errorf("open %s: %w", dev, err)
	}
	fd, err = unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", dev, err)
	}
	defer unix.Close(fd)
	info, err := unix.IoctlLoopGetStatus64(fd)
	if errors.Is(err, unix.ENXIO) {
		return false, nil // cleared meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("%s: LOOP_GET_STATUS64: %w", dev, err)
	}
	return sameFile(info, img), nil
}

// sameFile reports whether a loop device's backing file is img.
func sameFile(info *unix.LoopInfo64, img unix.Stat_t) bool {
	return unix.Major(info.Device) == unix.Major(img.Dev) && unix.Minor(info.Device) == unix.Minor(img.Dev) && info.Inode == img.Ino
}

// loopBacking returns the backing file the kernel names for the block
// device dev (a filesystem's st_dev), "" when dev is no bound loop device.
func loopBacking(dev uint64) (string, error) {
	b, err := readSmall(fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", unix.Major(dev), unix.Minor(dev)))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSuffix(string(b), "\n"), err
}

// detachLoop clears the loop device dev if it is still bound to the file
// img (by device and inode), e.g. on an old kernel whose lazy unmount
// left it. It holds the device open while it checks and clears, so the
// device cannot be freed and bound to another image in between. A device
// still in use gets autoclear instead (or EBUSY on old kernels: it clears
// itself once free).
func detachLoop(dev uint64, img unix.Stat_t) error {
	b, err := readSmall(fmt.Sprintf("/sys/dev/block/%d:%d/uevent", unix.Major(dev), unix.Minor(dev)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	name := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "DEVNAME="); ok {
			name = v
		}
	}
	if !strings.HasPrefix(name, "loop") || strings.ContainsRune(name, '/') {
		return nil
	}
	fd, err := unix.Open("/dev/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open /dev/%s: %w", name, err)
	}
	defer unix.Close(fd)
	info, err := unix.IoctlLoopGetStatus64(fd)
	if errors.Is(err, unix.ENXIO) {
		return nil // not bound
	}
	if err != nil {
		return fmt.Errorf("/dev/%s: LOOP_GET_STATUS64: %w", name, err)
	}
	if !sameFile(info, img) {
		return nil // bound to another file by now
	}
	err = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
	if err != nil && !errors.Is(err, unix.ENXIO) && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("/dev/%s: LOOP_CLR_FD: %w", name, err)
	}
	return nil
}

// readSmall reads a sysfs attribute (at most a page).
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil && n == 0 && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:n], nil
}

// capped keeps the first maxToolOutput bytes written to it.
type capped struct{ b []byte }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxToolOutput - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *capped) String() string { return string(c.b) }
