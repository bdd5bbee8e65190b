package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// SpillQuota says how Spec.SpillBytes is enforced.
type SpillQuota int

const (
	// SpillQuotaTmpfs (the default) mounts a tmpfs of SpillBytes on the
	// session's spill/ directory on the host before the sandbox is created, so
	// the kernel enforces the cap whatever the agent does. It needs root (or
	// CAP_SYS_ADMIN) in the host's mount namespace, and the spill pages are
	// memory, charged to the sandbox (the agent writes them).
	SpillQuotaTmpfs SpillQuota = iota
	// SpillQuotaAgent leaves spill/ a plain directory: the agent alone
	// enforces the cap, which it learns from EnvSpillBytes. For servers that
	// cannot mount (rootless, or a container without CAP_SYS_ADMIN).
	SpillQuotaAgent
)

// maxSocketPath is the longest path a sockaddr_un holds (108 bytes with the
// terminating NUL).
const maxSocketPath = 107

// sessionsDir is the directory under StateDir that holds host dirs.
const sessionsDir = "sessions"

// hostDir returns <stateDir>/sessions/<tenant>/<session>.
func hostDir(stateDir, tenant, session string) string {
	return filepath.Join(stateDir, sessionsDir, tenant, session)
}

// prepareHostDir (re)creates a session's host directory, empty: the directory
// itself 0755 root (inside the sandbox it is /run/shellbox, which commands
// may read but not write), spill/ 0755 root, a tmpfs of spillBytes when quota
// is SpillQuotaTmpfs. The parents, <stateDir>/sessions and the tenant
// directory, are 0700: no host user but root can reach what a sandbox wrote
// (its root could, say, leave a setuid file there).
func prepareHostDir(stateDir, dir string, spillBytes int64, quota SpillQuota) error {
	if err := removeHostDir(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("%w: host dir: %v", ErrUnavailable, err)
	}
	for _, d := range []string{filepath.Join(stateDir, sessionsDir), filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("%w: host dir: %v", ErrUnavailable, err)
		}
	}
	spill := filepath.Join(dir, SpillName)
	for _, d := range []string{dir, spill} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("%w: host dir: %v", ErrUnavailable, err)
		}
		// Mkdir is subject to the umask; the mode is part of the contract.
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("%w: host dir: %v", ErrUnavailable, err)
		}
	}
	if quota == SpillQuotaTmpfs && spillBytes > 0 {
		opts := "size=" + strconv.FormatInt(spillBytes, 10) + ",mode=0755"
		if err := unix.Mount("tmpfs", spill, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
			_ = os.RemoveAll(dir)
			return fmt.Errorf("%w: spill: mount tmpfs on %s: %v (the server needs root for SpillQuotaTmpfs; else use SpillQuotaAgent)",
				ErrUnavailable, spill, err)
		}
	}
	return nil
}

// removeHostDir unmounts the spill tmpfs if there is one and deletes the
// directory, and the tenant directory above it when that is left empty. A
// missing directory is not an error. What a sandbox left in it is untrusted:
// nothing here follows a symlink. Callers serialise prepareHostDir and
// removeHostDir (Manager.dirMu), so removing an empty tenant directory cannot
// race with creating a session in it.
func removeHostDir(dir string) error {
	spill := filepath.Join(dir, SpillName)
	// Detach, so a reader holding a file open cannot keep the directory from
	// going; NOFOLLOW, so a symlink planted as spill/ is not followed. EINVAL:
	// not a mount point; ENOENT: no directory.
	err := unix.Unmount(spill, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: host dir: unmount %s: %v", ErrUnavailable, spill, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("%w: host dir: %v", ErrUnavailable, err)
	}
	// Drop the tenant directory when it is empty; when another session has
	// its directory there, Remove fails harmlessly.
	if err := os.Remove(filepath.Dir(dir)); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%w: host dir: %v", ErrUnavailable, err)
	}
	return nil
}

// hostDirKeys lists the (tenant, session) pairs that have a host directory.
func hostDirKeys(stateDir string) ([]key, error) {
	root := filepath.Join(stateDir, sessionsDir)
	tenants, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []key
	for _, t := range tenants {
		if !t.IsDir() {
			continue
		}
		sessions, err := os.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			return nil, err
		}
		for _, s := range sessions {
			keys = append(keys, key{t.Name(), s.Name()})
		}
	}
	return keys, nil
}
