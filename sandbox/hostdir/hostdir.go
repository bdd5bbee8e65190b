// Package hostdir keeps the per-session host directories of the
// single-host runtimes (sandbox/docker, sandbox/containerd): a detail of
// those runtimes, never seen above sandbox/.
//
// Each session has <StateDir>/sessions/<tenant>/<session>/, bind-mounted at
// sandbox.HostDirMount (/run/shellbox) in its sandbox: the agent's socket
// (agent.sock), through which the server reaches the agent, and spill/,
// where the agent writes the full output of commands. Both are root's,
// 0755: commands (a non-root uid) read spill files but cannot write there.
// The session's spill cap is a tmpfs mounted on spill/ (QuotaTmpfs, needs
// root) and is also handed to the agent (sandbox.EnvSpillBytes), which owns
// the quota either way. The parents, <StateDir>/sessions and the tenant
// directories, are 0700: no host user but root reaches what a sandbox wrote.
// A host directory lives as long as one sandbox: Prepare empties it.
//
// # Workspaces
//
// A session's /workspace must outlive its sandbox: a sandbox dies whole
// over its memory limit under gVisor, its agent can crash, the engine can
// restart or remove it, the server can restart, the host can reboot, and
// the session's next sandbox must find the files. So the workspace is per
// session, not per sandbox: <StateDir>/workspaces/<tenant>/<session>, a
// filesystem of the policy's workspace size that shellbox mounts on the
// host (Workspace) and the runtime bind-mounts at /workspace. Removing a
// sandbox leaves it; only ending the session (RemoveWorkspace: sessions
// rm, REST DELETE, the idle reaper) or a Sweep that finds its session gone
// removes it.
//
// What the filesystem is made of is the Medium. MediumDisk (the default):
// an ext4 filesystem in a sparse image file of exactly the workspace's
// size, <StateDir>/workspace-images/<tenant>/<session>.ext4, on a loop
// device (LOOP_CONFIGURE with autoclear and direct I/O), mounted nosuid
// and nodev. The kernel enforces the size for runc and gVisor alike
// (gVisor's file server writes through to it): a write past it is ENOSPC
// inside the sandbox, and the host's disk holds at most the image's size
// (the journal and inode tables take part of it, 4-8% from 1 GiB up, so
// the sandbox gets that much less). Its files do not take memory (the
// loop device does direct I/O where it can: no second page cache), and
// the image stays on disk:
// after a host reboot (or anything else that unmounted it) the session's
// next Workspace attaches and mounts the same image again, journal
// replayed by the kernel, no fsck. Reserved: a workspace costs its whole
// size on the disk (fallocate before each mount), so a full disk refuses a
// new workspace instead of failing writes in running ones; the operator
// sizes the state directory's disk for the sessions' sizes. mkfs.ext4 (e2fsprogs) is run for a new image, with the
// image's open file as its device; lost+found is removed after it.
// MediumMemory: a tmpfs of the size: host memory (the sandbox that writes
// is charged while it lives, nobody between two sandboxes), gone at a host
// reboot. MediumDisk falls back to it, logging
// why, where the host gives no loop devices (no /dev/loop-control, or
// EPERM: a container without the devices).
//
// Why an image and not project quotas on the state directory: setting a
// quota needs CAP_SYS_RESOURCE, which root in a container does not always
// have (the CI machine's root has not), and a state directory's filesystem
// mounted with project quotas (ext4 prjquota, xfs pquota), which most
// hosts' root filesystems are not (the CI machine's ext4 is not);
// an image needs only loop devices and works on any filesystem that holds
// a file (overlayfs included). Its cost: a loop device per session, and
// mkfs at the session's start (~0.1 s whatever the size:
// docs/benchmarks.md).
//
// Its root is the sandbox user's (uid:gid, 0755); the directories above it
// and above the images are root's, 0700, so no host user reaches them and
// the sandbox cannot rename or replace its mount point. Creation and
// removal go through os.Root below the state directory (openat with
// O_NOFOLLOW for the image) and mount on the directory's own descriptor,
// so no symlink is followed; removal unmounts (the loop device clears
// itself; the files go with the tmpfs or the image, which is deleted) and
// deletes the empty mount point, never walking what a sandbox wrote. A
// mounted workspace is taken as the session's only if it is a tmpfs or an
// ext4 whose loop device is backed by the session's image; an image
// whose filesystem is mounted from a loop device already (a lazy unmount
// still in use) is not mounted a second time. Without the
// mount privilege (QuotaAgent) there are no host workspaces: each sandbox
// gets its own tmpfs, which dies with it.
//
// While a sandbox is created, its mount sources are pinned under
// <StateDir>/pins/<tenant>/<session>/ (0700; Pin, pin.go): opened beneath
// their allowlist entries and bound at neutral paths the engine mounts.
package hostdir

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/internal/mountinfo"
	"github.com/shellbox/shellbox/sandbox"
)

// Quota says how a session's spill cap is enforced.
type Quota int

const (
	// QuotaTmpfs (the default) mounts a tmpfs of the cap on the session's
	// spill/ directory before the sandbox is created, so the kernel enforces
	// it whatever the agent does. It needs root (or CAP_SYS_ADMIN) in the
	// host's mount namespace; the spill pages are memory, charged to the
	// sandbox (the agent writes them).
	QuotaTmpfs Quota = iota
	// QuotaAgent leaves spill/ a plain directory: the agent alone enforces
	// the cap. For servers that cannot mount (rootless, or a container
	// without CAP_SYS_ADMIN).
	QuotaAgent
)

// Names inside a session's host directory.
const (
	SocketName = "agent.sock"
	SpillName  = "spill"
)

// maxSocketPath is the longest path a sockaddr_un holds (108 bytes with the
// terminating NUL).
const maxSocketPath = 107

// sessionsDir is the directory under StateDir that holds host dirs.
const sessionsDir = "sessions"

// Config configures Dirs.
type Config struct {
	// StateDir is where the directories live: absolute, and short enough
	// that a session's socket path fits in a sockaddr_un.
	StateDir string
	// Quota says how the spill cap is enforced; QuotaTmpfs also keeps the
	// sessions' workspaces on the host.
	Quota Quota
	// Medium is what a new host workspace is made of ("": MediumDisk).
	// MediumDisk falls back to MediumMemory, with one line to Logger,
	// where this host gives no loop devices; without mkfs.ext4 New fails.
	Medium Medium
	// Logger gets that line (nil: slog.Default()).
	Logger *slog.Logger
}

// Dirs keeps the host directories under one state directory. Its methods
// are safe for concurrent use: creation and removal of the tenant
// directories are serialised (mu), since a tenant directory is removed
// when its last session goes; a session's workspace has a lock of its own
// (locks), so that one session's mkfs does not hold up another's.
type Dirs struct {
	stateDir string
	quota    Quota
	medium   Medium // effective: after the fallback
	mkfs     string // mkfs.ext4, for MediumDisk
	mu       sync.Mutex

	locksMu sync.Mutex
	locks   map[string]*sessionLock // by tenant/session
}

// New returns the Dirs of cfg. With QuotaTmpfs and MediumDisk it checks
// that this host gives loop devices (else it falls back to MediumMemory
// and logs why) and that mkfs.ext4 is there (else it fails, saying so).
func New(cfg Config) (*Dirs, error) {
	if !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("%w: state dir %q: must be absolute", sandbox.ErrInvalid, cfg.StateDir)
	}
	medium, err := ParseMedium(string(cfg.Medium))
	if err != nil {
		return nil, err
	}
	d := &Dirs{stateDir: filepath.Clean(cfg.StateDir), quota: cfg.Quota, medium: medium, locks: map[string]*sessionLock{}}
	if cfg.Quota != QuotaTmpfs || medium != MediumDisk {
		return d, nil
	}
	if err := probeLoop(); err != nil {
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("workspaces: no loop devices here, so session workspaces are host memory (tmpfs), lost at a host reboot, not ext4 images on the state directory's disk; give the server /dev/loop-control and /dev/loop* or set sandbox.workspaceMedium: memory to say so",
			"stateDir", d.stateDir, "reason", err.Error())
		d.medium = MediumMemory
		return d, nil
	}
	if d.mkfs, err = findMkfs(); err != nil {
		return nil, err
	}
	return d, nil
}

// StateDir returns the state directory.
func (d *Dirs) StateDir() string { return d.stateDir }

// Path returns <StateDir>/sessions/<tenant>/<session>.
func (d *Dirs) Path(tenant, session string) string {
	return filepath.Join(d.stateDir, sessionsDir, tenant, session)
}

// SocketPath returns the agent socket's path in a host directory.
func SocketPath(dir string) string { return filepath.Join(dir, SocketName) }

// Endpoint is how the server reaches the agent of the sandbox whose host
// directory is dir.
func Endpoint(dir string) agentapi.Endpoint {
	return agentapi.Endpoint{Network: "unix", Address: SocketPath(dir)}
}

// Check refuses a session whose ids are not valid or whose socket path
// would not fit in a sockaddr_un.
func (d *Dirs) Check(tenant, session string) error {
	if err := sandbox.CheckID("tenant", tenant); err != nil {
		return err
	}
	if err := sandbox.CheckID("session", session); err != nil {
		return err
	}
	if p := SocketPath(d.Path(tenant, session)); len(p) > maxSocketPath {
		return fmt.Errorf("%w: hostdir: agent socket path %q is %d bytes, over the %d a unix socket allows: shorten the state directory",
			sandbox.ErrInvalid, p, len(p), maxSocketPath)
	}
	return nil
}

// CheckSpec is what every runtime checks of a spec before it creates
// anything: Check of its session, CheckMounts of its mounts, and
// CheckRunscMounts for a runsc sandbox.
func (d *Dirs) CheckSpec(spec sandbox.Spec) error {
	if err := d.Check(spec.Tenant, spec.Session); err != nil {
		return err
	}
	if err := d.CheckMounts(spec.Mounts); err != nil {
		return err
	}
	if spec.Runtime == sandbox.RuntimeRunsc {
		return CheckRunscMounts(spec.Mounts)
	}
	return nil
}

// CheckMounts refuses mounts whose source overlaps the state directory's
// sessions, where every sandbox's agent socket is, its workspaces and
// their images, or its pins (Pin): lexically, and on the resolved state directory.
func (d *Dirs) CheckMounts(mounts []sandbox.Mount) error {
	var own []string
	for _, sub := range []string{sessionsDir, workspacesDir, imagesDir, pinsDir} {
		p := filepath.Join(d.stateDir, sub)
		own = append(own, p)
		if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
			own = append(own, real)
		}
	}
	for i, m := range mounts {
		for _, o := range own {
			if sandbox.Overlaps(m.Source, o) {
				return fmt.Errorf("%w: mounts: [%d]: source %s overlaps shellbox's session state (agent sockets, workspaces)", sandbox.ErrInvalid, i, m.Source)
			}
		}
	}
	return nil
}

// Prepare (re)creates a session's host directory, empty, and returns it:
// the directory itself 0755 root, spill/ 0755 root, a tmpfs of spillBytes
// on spill/ when the quota is QuotaTmpfs.
func (d *Dirs) Prepare(tenant, session string, spillBytes int64) (string, error) {
	if err := d.Check(tenant, session); err != nil {
		return "", err
	}
	dir := d.Path(tenant, session)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := remove(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", fmt.Errorf("%w: host dir: %v", sandbox.ErrUnavailable, err)
	}
	for _, p := range []string{filepath.Join(d.stateDir, sessionsDir), filepath.Dir(dir)} {
		if err := os.Chmod(p, 0o700); err != nil {
			return "", fmt.Errorf("%w: host dir: %v", sandbox.ErrUnavailable, err)
		}
	}
	spill := filepath.Join(dir, SpillName)
	for _, p := range []string{dir, spill} {
		if err := os.Mkdir(p, 0o755); err != nil {
			return "", fmt.Errorf("%w: host dir: %v", sandbox.ErrUnavailable, err)
		}
		// Mkdir is subject to the umask; the mode is part of the contract.
		if err := os.Chmod(p, 0o755); err != nil {
			return "", fmt.Errorf("%w: host dir: %v", sandbox.ErrUnavailable, err)
		}
	}
	if d.quota == QuotaTmpfs && spillBytes > 0 {
		opts := "size=" + strconv.FormatInt(spillBytes, 10) + ",mode=0755"
		if err := unix.Mount("tmpfs", spill, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("%w: spill: mount tmpfs on %s: %v (the server needs root for the tmpfs spill quota; else set the agent quota)",
				sandbox.ErrUnavailable, spill, err)
		}
	}
	return dir, nil
}

// Remove unmounts a session's spill tmpfs if there is one and deletes its
// directory, and the tenant directory above it when that is left empty. A
// missing directory is not an error. What a sandbox left in it is
// untrusted: nothing here follows a symlink.
func (d *Dirs) Remove(tenant, session string) error {
	if err := d.Check(tenant, session); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return remove(d.Path(tenant, session))
}

// RemoveSession removes a session's host directory and its workspace and
// reports whether either was there: a runtime's SessionState.RemoveSession,
// whose caller makes sure no sandbox of the session exists.
func (d *Dirs) RemoveSession(tenant, session string) (bool, error) {
	if err := d.Check(tenant, session); err != nil {
		return false, err
	}
	had := d.Exists(tenant, session)
	if err := d.Remove(tenant, session); err != nil {
		return had, err
	}
	ws, err := d.RemoveWorkspace(tenant, session)
	return had || ws, err
}

// Exists reports whether a session's host directory is in place.
func (d *Dirs) Exists(tenant, session string) bool {
	fi, err := os.Lstat(d.Path(tenant, session))
	return err == nil && fi.IsDir()
}

// SweepUnused is Sweep for a runtime: it keeps the state of every sandbox in
// sandboxes (all the engine has, of any owner: their agents use it) and of
// every session live reports (nil: none).
func (d *Dirs) SweepUnused(sandboxes []sandbox.Sandbox, live func(tenant, session string) bool) ([]string, error) {
	type key struct{ tenant, session string }
	used := map[key]bool{}
	for _, sb := range sandboxes {
		used[key{sb.Tenant, sb.Session}] = true
	}
	return d.Sweep(func(tenant, session string) bool {
		return used[key{tenant, session}] || (live != nil && live(tenant, session))
	})
}

// Sweep removes every host directory and every workspace for which live
// reports false and returns the removed paths. Errors are collected; it
// removes what it can. live decides per session: a workspace outlives its
// sandboxes, so live must say true for a session whose sandbox is being
// replaced, not only for sessions that have one.
func (d *Dirs) Sweep(live func(tenant, session string) bool) ([]string, error) {
	removed, err := d.sweepTree(sessionsDir, live, func(tenant, session string) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		return remove(d.Path(tenant, session))
	})
	ws, werr := d.sweepWorkspaces(live)
	return append(removed, ws...), errors.Join(err, werr)
}

// sweepTree calls rm for every <tenant>/<session> under <StateDir>/<tree>
// for which live reports false, and returns their paths.
func (d *Dirs) sweepTree(tree string, live func(tenant, session string) bool, rm func(tenant, session string) error) ([]string, error) {
	root := filepath.Join(d.stateDir, tree)
	tenants, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: host dirs: %v", sandbox.ErrUnavailable, err)
	}
	var removed []string
	var errs []error
	for _, t := range tenants {
		if !t.IsDir() {
			continue
		}
		sessions, err := os.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: host dirs: %v", sandbox.ErrUnavailable, err))
			continue
		}
		for _, s := range sessions {
			if live(t.Name(), s.Name()) {
				continue
			}
			if err := rm(t.Name(), s.Name()); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, filepath.Join(root, t.Name(), s.Name()))
		}
	}
	return removed, errors.Join(errs...)
}

func remove(dir string) error {
	spill := filepath.Join(dir, SpillName)
	// Detach, so a reader holding a file open cannot keep the directory from
	// going; NOFOLLOW, so a symlink planted as spill/ is not followed.
	// EINVAL: not a mount point; ENOENT: no directory.
	err := unix.Unmount(spill, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: host dir: unmount %s: %v", sandbox.ErrUnavailable, spill, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("%w: host dir: %v", sandbox.ErrUnavailable, err)
	}
	// Drop the tenant directory when it is empty; when another session has
	// its directory there, Remove fails harmlessly.
	if err := os.Remove(filepath.Dir(dir)); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%w: host dir: %v", sandbox.ErrUnavailable, err)
	}
	return nil
}

// Submounts returns the mount points strictly below dir on this host (from
// /proc/self/mountinfo). A bind mount that is not recursive leaves them
// out of the sandbox; gVisor (runsc) cannot make such a bind of a
// directory that has them at all (its file server runs in a user namespace,
// where the kernel refuses a non-recursive bind over locked submounts).
func Submounts(dir string) ([]string, error) {
	all, err := mountinfo.Under(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: mountinfo: %v", sandbox.ErrUnavailable, err)
	}
	dir = filepath.Clean(dir)
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	var out []string
	for _, mp := range all {
		if mp != dir {
			out = append(out, mp)
		}
	}
	return out, nil
}

// CheckRunscMounts refuses, for a gVisor sandbox, mount sources that have
// filesystems mounted below them (see Submounts), naming both.
func CheckRunscMounts(mounts []sandbox.Mount) error {
	for i, m := range mounts {
		subs, err := Submounts(m.Source)
		if err != nil {
			return err
		}
		if len(subs) > 0 {
			return fmt.Errorf("%w: mounts: [%d]: source %s has a filesystem mounted below it (%s): gVisor (runsc) cannot bind it without its submounts; mount the submount itself, or use runc",
				sandbox.ErrInvalid, i, m.Source, subs[0])
		}
	}
	return nil
}
