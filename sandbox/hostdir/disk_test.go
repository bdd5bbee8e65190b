package hostdir_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/internal/mountinfo"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostdir"
)

// require skips the test with reason unless ok, or fails it under CI=true:
// CI has root and loop devices.
func require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true, so not skipping: %s", reason)
	}
	t.Skip(reason)
}

// requireLoop skips where disk workspaces cannot be made: not root, no
// loop devices, no mkfs.ext4.
func requireLoop(t testing.TB) {
	t.Helper()
	require(t, os.Geteuid() == 0, "disk workspaces need root (loop devices, mount)")
	fd, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	require(t, err == nil, fmt.Sprintf("no loop devices here: open /dev/loop-control: %v", err))
	unix.Close(fd)
	_, err = exec.LookPath("mkfs.ext4")
	require(t, err == nil, "no mkfs.ext4 (e2fsprogs) here")
}

// diskDirs returns Dirs with host workspaces on the disk medium.
func diskDirs(t *testing.T) *hostdir.Dirs {
	t.Helper()
	requireLoop(t)
	return mediumDirs(t, hostdir.MediumDisk)
}

// cleanState unmounts everything below the state directory dir and
// detaches every loop device backed by a file below it, whatever the test
// left (it runs before the TempDir's removal).
func cleanState(t testing.TB, dir string) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Errorf("clean %s: %v", dir, err)
		return
	}
	mounts, _ := mountinfo.Under(real)
	slices.Reverse(mounts) // deepest first
	for _, mp := range mounts {
		if mp != real {
			unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
	for _, dev := range loopsUnder(t, real) {
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
		unix.Close(fd)
	}
	eventually(t, "no loop device backed by a file under "+real, func() []string { return loopsUnder(t, real) }, 0)
}

// eventually waits until devs() has want devices, failing the test if it
// does not within 10 s. A loop device stays bound after its unmount while
// anyone has it open (another process probing for a free device, say):
// autoclear clears it at the last close, not at the unmount.
func eventually(t testing.TB, what string, devs func() []string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := devs()
		if len(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: loop devices %v, want %d of them", what, got, want)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loopsUnder returns the loop devices whose backing file is below dir (a
// real path), deleted ones included.
func loopsUnder(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // cleared meanwhile
		}
		if strings.HasPrefix(string(b), dir+"/") {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}

// realState is the state directory's real path (the kernel's names).
func realState(t testing.TB, d *hostdir.Dirs) string {
	t.Helper()
	real, err := filepath.EvalSymlinks(d.StateDir())
	if err != nil {
		t.Fatal(err)
	}
	return real
}

// checkFS checks the session's workspace is what its medium makes: a tmpfs
// of exactly size, or an ext4 in an image of exactly size (the
// filesystem somewhat smaller), on one loop device.
func checkFS(t *testing.T, d *hostdir.Dirs, tenant, session string, size int64) {
	t.Helper()
	ws := d.WorkspacePath(tenant, session)
	var st unix.Statfs_t
	if err := unix.Statfs(ws, &st); err != nil {
		t.Fatal(err)
	}
	bytes := int64(st.Blocks) * st.Bsize
	if d.Medium() == hostdir.MediumMemory {
		if st.Type != unix.TMPFS_MAGIC || bytes != size {
			t.Errorf("statfs %s: type %#x, %d bytes; want a tmpfs of %d", ws, st.Type, bytes, size)
		}
		return
	}
	if st.Type != unix.EXT4_SUPER_MAGIC || bytes > size || bytes < size/2 {
		t.Errorf("statfs %s: type %#x, %d bytes; want an ext4 of at most %d, at least half of it (the journal and inode tables take the rest)", ws, st.Type, bytes, size)
	}
	img := d.ImagePath(tenant, session)
	fi, err := os.Lstat(img)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != size || fi.Mode().Perm() != 0o600 {
		t.Fatalf("image %s: %v, %v; want a regular file of %d bytes, 0600", img, fi, err, size)
	}
	if filepath.Base(filepath.Dir(filepath.Dir(img))) != "workspace-images" {
		t.Errorf("image %s: not under <stateDir>/workspace-images", img)
	}
	// The filesystem mounted there is the image's, on a loop device.
	var ws1 unix.Stat_t
	if err := unix.Stat(ws, &ws1); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", unix.Major(ws1.Dev), unix.Minor(ws1.Dev)))
	real := filepath.Join(realState(t, d), "workspace-images", tenant, session+".ext4")
	if err != nil || strings.TrimSuffix(string(b), "\n") != real {
		t.Errorf("workspace %s on device %d:%d, backed by %q, %v; want a loop device of %s", ws, unix.Major(ws1.Dev), unix.Minor(ws1.Dev), b, err, real)
	}
}

// loopsOf returns the loop devices backed by the session's image.
func loopsOf(t testing.TB, d *hostdir.Dirs, tenant, session string) []string {
	t.Helper()
	real := filepath.Join(realState(t, d), "workspace-images", tenant, session+".ext4")
	var out []string
	for _, dev := range loopsUnder(t, realState(t, d)) {
		b, _ := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/loop/backing_file")
		if strings.TrimSuffix(string(b), "\n") == real {
			out = append(out, dev)
		}
	}
	return out
}

// allocated is how much of the host's disk a file takes.
func allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// A sandbox that fills its workspace gets ENOSPC at the workspace's size,
// and the host's disk holds exactly the image's size from the start
// (reserved: a full host disk cannot fail a write inside it) and no byte
// more.
func TestDiskWorkspaceQuota(t *testing.T) {
	d := diskDirs(t)
	const size = 16 << 20
	ws, made, err := d.Workspace("acme", "s1", size, 1000, 1000)
	if err != nil || !made {
		t.Fatalf("Workspace: %v, made %v", err, made)
	}
	checkFS(t, d, "acme", "s1", size)
	img := d.ImagePath("acme", "s1")
	if a := allocated(t, img); a < size {
		t.Errorf("a new image takes %d bytes of the host's disk: want its %d reserved", a, size)
	}
	f, err := os.OpenFile(filepath.Join(ws, "fill"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i) | 1 // not zeros: nothing may stay sparse
	}
	var written int64
	for written <= 2*size {
		n, err := f.Write(chunk)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("writing past the size: %v, want ENOSPC", err)
			}
			break
		}
	}
	// Delayed allocation may report it at the flush instead.
	if err := f.Sync(); err != nil && !errors.Is(err, unix.ENOSPC) {
		t.Errorf("sync: %v", err)
	}
	f.Close()
	if written > size {
		t.Errorf("wrote %d bytes into a %d byte workspace", written, size)
	}
	if written < size/2 {
		t.Errorf("ENOSPC after %d bytes of a %d byte workspace", written, size)
	}
	if fi, err := os.Stat(img); err != nil || fi.Size() != size {
		t.Errorf("the image grew: %v %v", fi, err)
	}
	// (st_blocks counts the host filesystem's extent blocks too: a block
	// for 16 MiB reserved.)
	if a := allocated(t, img); a > size+size/64 {
		t.Errorf("the image takes %d bytes of the host's disk, over its size %d", a, size)
	}
	// Deleting keeps the blocks reserved (no discard): the workspace can
	// fill again whatever the host's disk holds by then.
	if err := os.Remove(filepath.Join(ws, "fill")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Syncfs(mustOpen(t, ws)); err != nil {
		t.Fatal(err)
	}
	if a := allocated(t, img); a < size {
		t.Errorf("after deleting the fill the image takes %d bytes, want its %d still reserved", a, size)
	}
}

func mustOpen(t testing.TB, path string) int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// A host reboot unmounts every workspace and detaches every loop device;
// the images stay on the state directory's disk. The session's next
// Workspace mounts its image again, with every file as it was.
func TestDiskWorkspaceSurvivesReboot(t *testing.T) {
	d := diskDirs(t)
	ws, _, err := d.Workspace("acme", "s1", 8<<20, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "kept"), []byte("before"), 0o640)
	os.Mkdir(filepath.Join(ws, "dir"), 0o700)
	os.Symlink("../kept", filepath.Join(ws, "dir", "link"))
	os.Link(filepath.Join(ws, "kept"), filepath.Join(ws, "hard"))
	// The reboot: unmount (not lazily), the loop device goes with it
	// (autoclear; detached here as well should it not).
	if err := unix.Unmount(ws, 0); err != nil {
		t.Fatal(err)
	}
	for _, dev := range loopsOf(t, d, "acme", "s1") {
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
			unix.Close(fd)
		}
	}
	eventually(t, "after the reboot", func() []string { return loopsOf(t, d, "acme", "s1") }, 0)
	if entries, _ := os.ReadDir(ws); len(entries) > 0 {
		t.Fatalf("files outside the image, on the host's disk: %v", entries)
	}

	again, made, err := d.Workspace("acme", "s1", 8<<20, 1000, 1000)
	if err != nil || made || again != ws {
		t.Fatalf("Workspace after the reboot: %s, made %v, %v; want the same, kept", again, made, err)
	}
	checkFS(t, d, "acme", "s1", 8<<20)
	if b, err := os.ReadFile(filepath.Join(ws, "dir", "link")); err != nil || string(b) != "before" {
		t.Errorf("through the symlink: %q %v", b, err)
	}
	var a, b unix.Stat_t
	if unix.Stat(filepath.Join(ws, "kept"), &a) != nil || unix.Stat(filepath.Join(ws, "hard"), &b) != nil || a.Ino != b.Ino || a.Mode&0o777 != 0o640 {
		t.Errorf("kept: ino %d mode %o, hard: ino %d; want one inode, 0640", a.Ino, a.Mode&0o777, b.Ino)
	}
	// A server restart (the mount still there) keeps it as it is.
	if _, made, err := d.Workspace("acme", "s1", 8<<20, 1000, 1000); err != nil || made {
		t.Errorf("Workspace while mounted: made %v, %v", made, err)
	}
	checkFS(t, d, "acme", "s1", 8<<20)
}

// Removal unmounts, leaves no loop device behind and deletes the image:
// also when a process still holds a file of the workspace open (its loop
// device then goes when the file is closed).
func TestDiskWorkspaceRemoval(t *testing.T) {
	d := diskDirs(t)
	real := realState(t, d)
	for _, s := range []string{"s1", "s2", "busy"} {
		ws, _, err := d.Workspace("acme", s, 4<<20, 1000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(ws, "f"), []byte(s), 0o644)
	}
	held, err := os.Open(filepath.Join(d.WorkspacePath("acme", "busy"), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, s := range []string{"s1", "s2", "busy"} {
		if had, err := d.RemoveWorkspace("acme", s); err != nil || !had {
			t.Fatalf("RemoveWorkspace %s: %v, had %v", s, err, had)
		}
		if d.HasWorkspace("acme", s) {
			t.Errorf("%s: HasWorkspace after removal", s)
		}
	}
	if b, err := os.ReadFile("/proc/self/fd/" + fmt.Sprint(held.Fd())); err != nil || string(b) != "busy" {
		t.Errorf("a file held open across the removal: %q %v", b, err)
	}
	eventually(t, "while a file is held, the busy workspace's", func() []string { return loopsUnder(t, real) }, 1)
	held.Close()
	eventually(t, "after removal", func() []string { return loopsUnder(t, real) }, 0)
	for _, p := range []string{"workspaces", "workspace-images"} {
		entries, _ := os.ReadDir(filepath.Join(d.StateDir(), p))
		if len(entries) > 0 {
			t.Errorf("%s: %v left", p, entries)
		}
	}
	if mounts, _ := mountinfo.Under(real); len(mounts) > 0 {
		t.Errorf("mounts left: %v", mounts)
	}
}

// Workspace calls racing for one session make one filesystem: one makes
// it, the others find it.
func TestDiskWorkspaceConcurrent(t *testing.T) {
	d := diskDirs(t)
	const n = 8
	var wg sync.WaitGroup
	made := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, made[i], errs[i] = d.Workspace("acme", "s1", 4<<20, 1000, 1000)
		})
	}
	// Other sessions at the same time.
	for i := range 3 {
		wg.Go(func() {
			if _, _, err := d.Workspace("acme", fmt.Sprintf("other%d", i), 4<<20, 1000, 1000); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if c := countTrue(made); c != 1 {
		t.Errorf("%d calls made the workspace, want 1", c)
	}
	checkFS(t, d, "acme", "s1", 4<<20)
	mounts, _ := mountinfo.Under(filepath.Join(realState(t, d), "workspaces", "acme", "s1"))
	if len(mounts) != 1 {
		t.Errorf("mounts at the workspace: %v, want one", mounts)
	}
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// What is mounted on a workspace is taken as the session's only if it is
// the session's image; an image already on a loop device is not mounted a
// second time.
func TestDiskWorkspaceRefusesOthers(t *testing.T) {
	d := diskDirs(t)
	// Another session's image mounted on s1's workspace.
	other, _, err := d.Workspace("acme", "other", 4<<20, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	ws := d.WorkspacePath("acme", "s1")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(other, ws, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Workspace("acme", "s1", 4<<20, 1000, 1000); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "not of the session's image") {
		t.Errorf("another image mounted there: %v", err)
	}
	if err := unix.Unmount(ws, 0); err != nil {
		t.Fatal(err)
	}
	// s1's own image, still on its loop device, but unmounted from its
	// workspace (as a lazy unmount still in use leaves it).
	if _, _, err := d.Workspace("acme", "s1", 4<<20, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	keep := mustOpen(t, ws)
	_ = keep
	if err := unix.Unmount(ws, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Workspace("acme", "s1", 4<<20, 1000, 1000); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "not mounting it twice") {
		t.Errorf("an image mounted from a loop device still: %v", err)
	}

	// An image still on a loop device nobody mounts (the device is held
	// open by a probe, so autoclear waits) is mounted again all the same.
	ws2, _, err := d.Workspace("acme", "s2", 4<<20, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws2, "kept"), []byte("x"), 0o644)
	var st unix.Stat_t
	if err := unix.Stat(ws2, &st); err != nil {
		t.Fatal(err)
	}
	uevent, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/uevent", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		t.Fatal(err)
	}
	_, name, _ := strings.Cut(string(uevent), "DEVNAME=")
	name, _, _ = strings.Cut(name, "\n")
	probe, err := os.Open("/dev/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := unix.Unmount(ws2, 0); err != nil {
		t.Fatal(err)
	}
	if devs := loopsOf(t, d, "acme", "s2"); len(devs) != 1 {
		t.Fatalf("the probed device: %v, want it bound still", devs)
	}
	if _, made, err := d.Workspace("acme", "s2", 4<<20, 1000, 1000); err != nil || made {
		t.Fatalf("Workspace with the image on an unmounted loop device: made %v, %v", made, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws2, "kept")); err != nil || string(b) != "x" {
		t.Errorf("file lost: %q %v", b, err)
	}
	probe.Close()
	eventually(t, "the probed device once closed", func() []string { return loopsOf(t, d, "acme", "s2") }, 1)
}

// An image the disk medium made is mounted again by a server since set to
// the memory medium: the files are the session's.
func TestDiskWorkspaceKeptAcrossMedia(t *testing.T) {
	d := diskDirs(t)
	ws, _, err := d.Workspace("acme", "s1", 4<<20, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "kept"), []byte("x"), 0o644)
	if err := unix.Unmount(ws, 0); err != nil {
		t.Fatal(err)
	}
	m, err := hostdir.New(hostdir.Config{StateDir: d.StateDir(), Quota: hostdir.QuotaTmpfs, Medium: hostdir.MediumMemory})
	if err != nil {
		t.Fatal(err)
	}
	if _, made, err := m.Workspace("acme", "s1", 4<<20, 1000, 1000); err != nil || made {
		t.Fatalf("Workspace on the memory medium: made %v, %v", made, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "kept")); err != nil || string(b) != "x" {
		t.Errorf("file lost: %q %v", b, err)
	}
	// A new session of that server gets a tmpfs.
	if _, _, err := m.Workspace("acme", "s2", 4<<20, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	checkFS(t, m, "acme", "s2", 4<<20)
}

// Sweep removes images whose workspace directory is gone (a crash between
// the two removals) and images being made for sessions that are gone.
func TestSweepOrphanImages(t *testing.T) {
	d := diskDirs(t)
	ws, _, err := d.Workspace("acme", "orphan", 4<<20, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(ws, 0); err != nil {
		t.Fatal(err)
	}
	os.Remove(ws)
	half := filepath.Join(d.StateDir(), "workspace-images", "beta", "half.ext4.new")
	os.MkdirAll(filepath.Dir(half), 0o700)
	os.WriteFile(half, nil, 0o600)
	removed, err := d.Sweep(func(tenant, session string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{d.ImagePath("acme", "orphan"), half}
	if !slices.Equal(removed, want) {
		t.Errorf("swept %v, want %v", removed, want)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.StateDir(), "workspace-images")); len(entries) > 0 {
		t.Errorf("left: %v", entries)
	}
}

// Without loop devices the disk medium falls back to the memory medium,
// and says so once, with the reason.
func TestDiskMediumFallback(t *testing.T) {
	for _, c := range []struct{ name, control, reason string }{
		{"no loop-control", "/nonexistent/loop-control", "no such file or directory"},
		// A file that is no loop-control device: the ioctl fails.
		{"not a device", "/dev/null", "LOOP_CTL_GET_FREE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hostdir.SetLoopControl(t, c.control)
			var logs bytes.Buffer
			d, err := hostdir.New(hostdir.Config{StateDir: t.TempDir(), Quota: hostdir.QuotaTmpfs,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if d.Medium() != hostdir.MediumMemory {
				t.Errorf("medium %s without loop devices, want memory", d.Medium())
			}
			if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), c.control) ||
				!strings.Contains(logs.String(), c.reason) || !strings.Contains(logs.String(), "host memory (tmpfs)") {
				t.Errorf("log (%d lines): %s", n, logs.String())
			}
		})
	}
	// The memory medium asked for, or no host workspaces: no probe, no line.
	hostdir.SetLoopControl(t, "/nonexistent/loop-control")
	for _, cfg := range []hostdir.Config{{Quota: hostdir.QuotaTmpfs, Medium: hostdir.MediumMemory}, {Quota: hostdir.QuotaAgent}} {
		var logs bytes.Buffer
		cfg.StateDir, cfg.Logger = t.TempDir(), slog.New(slog.NewTextHandler(&logs, nil))
		if _, err := hostdir.New(cfg); err != nil || logs.Len() > 0 {
			t.Errorf("%+v: %v, logged %q", cfg, err, logs.String())
		}
	}
}

// Without mkfs.ext4 the disk medium fails, saying what to install.
func TestDiskMediumNeedsMkfs(t *testing.T) {
	requireLoop(t)
	t.Setenv("PATH", "/nonexistent")
	hostdir.SetMkfsDirs(t, []string{t.TempDir()})
	_, err := hostdir.New(hostdir.Config{StateDir: t.TempDir(), Quota: hostdir.QuotaTmpfs})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "install e2fsprogs") {
		t.Errorf("without mkfs.ext4: %v", err)
	}
}

// BenchmarkWorkspaceCreate: making a session's workspace, by medium and
// size: on disk, create the sparse image, mkfs.ext4, attach a loop
// device, mount, remove lost+found; in memory, mount a tmpfs. Its removal
// is not timed.
//
//	go test ./sandbox/hostdir/ -run '^$' -bench BenchmarkWorkspaceCreate -benchtime 10x
func BenchmarkWorkspaceCreate(b *testing.B) {
	require(b, os.Geteuid() == 0, "host workspaces need root")
	for _, c := range []struct {
		medium hostdir.Medium
		size   int64
	}{{hostdir.MediumMemory, 1 << 30}, {hostdir.MediumDisk, 1 << 30}, {hostdir.MediumDisk, 10 << 30}} {
		b.Run(fmt.Sprintf("%s/%dGiB", c.medium, c.size>>30), func(b *testing.B) {
			if c.medium == hostdir.MediumDisk {
				requireLoop(b)
			}
			dir := b.TempDir()
			b.Cleanup(func() { cleanState(b, dir) })
			d, err := hostdir.New(hostdir.Config{StateDir: dir, Quota: hostdir.QuotaTmpfs, Medium: c.medium})
			if err != nil {
				b.Fatal(err)
			}
			if d.Medium() != c.medium {
				b.Fatalf("medium %s, want %s", d.Medium(), c.medium)
			}
			for b.Loop() {
				if _, _, err := d.Workspace("acme", "s1", c.size, 1000, 1000); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if _, err := d.RemoveWorkspace("acme", "s1"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// TestReserveRefusesWhatTheDiskCannotHold: an image bigger than the free
// space under it is refused before anything is allocated (a fallocate
// failing with ENOSPC keeps what it allocated, and would leave the disk
// full); one that fits is reserved whole.
func TestReserveRefusesWhatTheDiskCannotHold(t *testing.T) {
	require(t, os.Geteuid() == 0, "a tmpfs of the test's size needs root")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=8m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	img := func(name string, size int64) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		return f
	}
	big := img("big.ext4", 16<<20)
	if err := hostdir.Reserve(big); !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "cannot hold the workspace's 16777216 bytes") {
		t.Errorf("16 MiB on an 8 MiB disk: %v, want ENOSPC naming the size", err)
	}
	if a := allocated(t, big.Name()); a != 0 {
		t.Errorf("the refused image took %d bytes of the disk", a)
	}
	small := img("small.ext4", 4<<20)
	if err := hostdir.Reserve(small); err != nil {
		t.Fatalf("4 MiB on an 8 MiB disk: %v", err)
	}
	if a := allocated(t, small.Name()); a < 4<<20 {
		t.Errorf("the reserved image takes %d bytes, want 4 MiB", a)
	}
}
