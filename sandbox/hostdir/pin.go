package hostdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/sandbox"
)

// Pinning the mount sources.
//
// A tenant with a read-write allowlisted directory can swap a subdirectory
// of it with a symlink (renameat2 RENAME_EXCHANGE, in a loop) while another
// of its sessions is created with that subdirectory as a mount source: a
// check of the path and the engine's mount of the same path resolve it at
// two moments, and the second may lead outside the allowlist. Checking the
// path again cannot close that window; what is mounted has to be what was
// checked.
//
// So Pin opens each source beneath its allowlist entry with openat2
// (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS: no symlink and no ".." on the
// way, the entry itself opened with RESOLVE_NO_SYMLINKS since it is already
// resolved) and binds that open directory, not the path, at a neutral path
// in the state directory (<StateDir>/pins/<tenant>/<session>/<i>: root's,
// 0700, nothing a tenant can rename). The engine gets the neutral path.
// Handing the engine /proc/<pid>/fd/<n> instead does not work: runc mounts
// from the container's new mount namespace, where the kernel refuses to
// bind a mount of another namespace (EINVAL, runc 1.1; runsc fails too).
// After the sandbox started, Verify compares the directory the sandbox
// sees at each target with the pinned one (st_dev, st_ino) on runc, and
// Release unmounts the pins: the sandbox keeps its own copy of each mount.
//
// The bind needs CAP_SYS_ADMIN in the host's mount namespace, as QuotaTmpfs
// does. A server that cannot mount gets the entry roots only (a source that
// is its entry): their paths are the operator's, outside any directory a
// tenant can write, unless the operator nested an entry in a read-write one.
//
// Errors name the source as the policy allowed it, never where a path
// resolved to: a tenant that can make symlinks learns nothing of the host.

// pinsDir is the directory under StateDir that holds the pins.
const pinsDir = "pins"

// Pins are a sandbox's mount sources, held open (and bound at neutral paths
// where the server can mount) until the sandbox has mounted them. Release
// them once the sandbox started or failed to.
type Pins struct {
	dir    string // <StateDir>/pins/<tenant>/<session>, "" without binds
	fds    []int
	mounts []sandbox.Mount // what the engine gets
	bound  []string        // the bound neutral paths
}

// Pin opens the sources of mounts beneath their entries and binds each at a
// neutral path. The returned Pins' Mounts are what the engine must mount.
// On error nothing stays pinned.
func (d *Dirs) Pin(tenant, session string, mounts []sandbox.Mount) (*Pins, error) {
	if err := d.Check(tenant, session); err != nil {
		return nil, err
	}
	p := &Pins{dir: filepath.Join(d.stateDir, pinsDir, tenant, session)}
	// A server that died between a Pin and its Release left the pins of
	// the session's previous sandbox.
	if err := releaseDir(p.dir); err != nil {
		return nil, err
	}
	if len(mounts) == 0 {
		p.dir = ""
		return p, nil
	}
	ok := false
	defer func() {
		if !ok {
			p.Release()
		}
	}()
	for i, m := range mounts {
		fd, err := openBeneath(m)
		if err != nil {
			return nil, fmt.Errorf("%w: mounts: [%d]: source %s: %v", sandbox.ErrInvalid, i, m.Source, err)
		}
		p.fds = append(p.fds, fd)
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: hostdir: pins: %v", sandbox.ErrUnavailable, err)
	}
	for i, m := range mounts {
		at := filepath.Join(p.dir, strconv.Itoa(i))
		if err := os.Mkdir(at, 0o700); err != nil {
			return nil, fmt.Errorf("%w: hostdir: pins: %v", sandbox.ErrUnavailable, err)
		}
		err := bindFd(p.fds[i], at)
		switch {
		case err == nil:
			p.bound = append(p.bound, at)
			p.mounts = append(p.mounts, sandbox.Mount{Source: at, Target: m.Target, ReadOnly: m.ReadOnly})
		case errors.Is(err, unix.EPERM) && m.EntryRoot() == m.Source:
			// No right to mount: an entry's own path is the operator's.
			p.mounts = append(p.mounts, sandbox.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
		case errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("%w: mounts: [%d]: source %s is below its allowlist entry %s, which needs a server that can mount (root or CAP_SYS_ADMIN) to pin it against a swap; mount the entry itself",
				sandbox.ErrUnavailable, i, m.Source, m.Root)
		default:
			return nil, fmt.Errorf("%w: mounts: [%d]: source %s: pin: %v", sandbox.ErrUnavailable, i, m.Source, err)
		}
	}
	ok = true
	return p, nil
}

// openBeneath opens m's source as an O_PATH directory beneath its entry,
// following no symlink: a symlink or a non-directory anywhere on the way
// fails it.
func openBeneath(m sandbox.Mount) (int, error) {
	root := m.EntryRoot()
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	rfd, err := unix.Openat2(unix.AT_FDCWD, root, &how)
	if err != nil {
		return -1, describeOpen(err)
	}
	rel, err := filepath.Rel(root, m.Source)
	if err != nil || rel == "." {
		return rfd, err
	}
	defer unix.Close(rfd)
	how.Resolve |= unix.RESOLVE_BENEATH
	fd, err := unix.Openat2(rfd, rel, &how)
	if err != nil {
		return -1, describeOpen(err)
	}
	return fd, nil
}

// describeOpen says why a source did not open, without a path.
func describeOpen(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return errors.New("a symlink is in its path now (it changed since it was allowed)")
	case errors.Is(err, unix.ENOTDIR):
		return errors.New("not a directory (it, or a directory in its path, changed since it was allowed)")
	case errors.Is(err, unix.ENOENT):
		return errors.New("no such directory")
	case errors.Is(err, unix.ENOSYS):
		return errors.New("openat2 is not available (Linux 5.6 or later is needed to pin mount sources)")
	}
	return err
}

// bindFd binds the directory open as fd at at, non-recursively, and makes
// the new mount private (nothing the host mounts later propagates into it).
func bindFd(fd int, at string) error {
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), at, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if err := unix.Mount("", at, "", unix.MS_PRIVATE, ""); err != nil {
		_ = unix.Unmount(at, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		return err
	}
	return nil
}

// Mounts are the mounts the engine gets: the spec's, with the pinned
// sources at their neutral paths.
func (p *Pins) Mounts() []sandbox.Mount { return p.mounts }

// Verify compares, on runc, the directory the sandbox whose first process
// is pid sees at each target with the pinned one (st_dev and st_ino); a
// mismatch is an error naming the target. Under gVisor the sandbox's
// mounts live in the sentry, not in a host mount namespace /proc can
// reach: there is nothing to compare on the host, and Verify returns nil
// for runtime runsc.
func (p *Pins) Verify(runtime string, pid int) error {
	if runtime == sandbox.RuntimeRunsc || len(p.fds) == 0 {
		return nil
	}
	root, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: mounts: verify: sandbox root: %v", sandbox.ErrUnavailable, err)
	}
	defer unix.Close(root)
	for i, m := range p.mounts {
		var want, got unix.Stat_t
		if err := unix.Fstat(p.fds[i], &want); err != nil {
			return fmt.Errorf("%w: mounts: [%d]: verify: %v", sandbox.ErrUnavailable, i, err)
		}
		fd, err := unix.Openat2(root, m.Target, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return fmt.Errorf("%w: mounts: [%d]: verify: %s in the sandbox: %v", sandbox.ErrUnavailable, i, m.Target, err)
		}
		err = unix.Fstat(fd, &got)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%w: mounts: [%d]: verify: %v", sandbox.ErrUnavailable, i, err)
		}
		if got.Dev != want.Dev || got.Ino != want.Ino {
			return fmt.Errorf("%w: mounts: [%d]: the sandbox sees another directory at %s than the one allowed and pinned (device/inode %d/%d, want %d/%d): sandbox removed",
				sandbox.ErrConflict, i, m.Target, got.Dev, got.Ino, want.Dev, want.Ino)
		}
	}
	return nil
}

// Release unmounts the pins and closes the sources: the sandbox, once
// started, keeps its own mounts. Idempotent.
func (p *Pins) Release() error {
	for _, fd := range p.fds {
		unix.Close(fd)
	}
	p.fds = nil
	if p.dir == "" {
		return nil
	}
	err := releaseDir(p.dir)
	p.dir, p.bound = "", nil
	return err
}

// releaseDir unmounts every pin in dir (a session's directory under
// pins/) and removes them and dir; the tenant's directory stays (other
// sessions' pins may be in it).
func releaseDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: hostdir: pins: %v", sandbox.ErrUnavailable, err)
	}
	for _, e := range ents {
		at := filepath.Join(dir, e.Name())
		if err := unix.Unmount(at, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("%w: hostdir: unmount pin %s: %v", sandbox.ErrUnavailable, at, err)
		}
		if err := os.Remove(at); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: hostdir: pins: %v", sandbox.ErrUnavailable, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: hostdir: pins: %v", sandbox.ErrUnavailable, err)
	}
	return nil
}
