package hostdir_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostdir"
)

// tmpfsDirs returns Dirs with host workspaces on the memory medium,
// skipping where this process cannot mount (they need root, which CI has).
func tmpfsDirs(t *testing.T) *hostdir.Dirs {
	t.Helper()
	probe := t.TempDir()
	if err := unix.Mount("tmpfs", probe, "tmpfs", 0, "size=1m"); err != nil {
		require(t, false, fmt.Sprintf("cannot mount a tmpfs here (not root?): %v", err))
	}
	unix.Unmount(probe, unix.MNT_DETACH)
	return mediumDirs(t, hostdir.MediumMemory)
}

// mediumDirs returns Dirs with host workspaces on medium in a new state
// directory whose mounts and loop devices are all gone when the test ends.
func mediumDirs(t *testing.T, medium hostdir.Medium) *hostdir.Dirs {
	t.Helper()
	dir := t.TempDir()
	d, err := hostdir.New(hostdir.Config{StateDir: dir, Quota: hostdir.QuotaTmpfs, Medium: medium})
	if err != nil {
		t.Fatal(err)
	}
	if d.Medium() != medium {
		t.Fatalf("medium %s, want %s", d.Medium(), medium)
	}
	t.Cleanup(func() { cleanState(t, dir) })
	return d
}

// eachMedium runs f on Dirs of every medium this host has (disk needs
// loop devices: skipped without them, except under CI=true).
func eachMedium(t *testing.T, f func(t *testing.T, d *hostdir.Dirs)) {
	t.Run("memory", func(t *testing.T) { f(t, tmpfsDirs(t)) })
	t.Run("disk", func(t *testing.T) { f(t, diskDirs(t)) })
}

func TestWorkspaceOutlivesTheHostDir(t *testing.T) {
	eachMedium(t, workspaceOutlivesTheHostDir)
}

func workspaceOutlivesTheHostDir(t *testing.T, d *hostdir.Dirs) {
	ws, made, err := d.Workspace("acme", "s1", 1<<20, 1000, 1001)
	if err != nil || !made {
		t.Fatalf("Workspace: %v, made %v", err, made)
	}
	if ws != d.WorkspacePath("acme", "s1") || ws != filepath.Join(d.StateDir(), "workspaces", "acme", "s1") {
		t.Fatalf("path %s", ws)
	}
	checkFS(t, d, "acme", "s1", 1<<20)
	var s unix.Stat_t
	if err := unix.Stat(ws, &s); err != nil || s.Uid != 1000 || s.Gid != 1001 || s.Mode&0o7777 != 0o755 {
		t.Errorf("root: uid %d gid %d mode %o, %v; want 1000:1001 0755", s.Uid, s.Gid, s.Mode&0o7777, err)
	}
	for _, p := range []string{filepath.Join(d.StateDir(), "workspaces"), filepath.Dir(ws)} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want 0700", p, fi.Mode(), err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(ws); err != nil || len(entries) != 1 {
		t.Errorf("a new workspace holds %v, %v; want only the file written (no lost+found)", entries, err)
	}
	// The bound is the kernel's.
	if err := os.WriteFile(filepath.Join(ws, "big"), make([]byte, 2<<20), 0o644); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("writing 2 MiB into 1 MiB: %v, want ENOSPC", err)
	}
	os.Remove(filepath.Join(ws, "big"))

	// A sandbox's host directory comes and goes; the workspace stays.
	if _, err := d.Prepare("acme", "s1", 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("acme", "s1"); err != nil {
		t.Fatal(err)
	}
	again, made, err := d.Workspace("acme", "s1", 4<<20, 1000, 1001)
	if err != nil || made || again != ws {
		t.Fatalf("Workspace again: %s, made %v, %v; want the same, kept", again, made, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "kept")); err != nil || string(b) != "x" {
		t.Errorf("file lost: %q %v", b, err)
	}
	if !d.HasWorkspace("acme", "s1") {
		t.Error("HasWorkspace false")
	}

	had, err := d.RemoveWorkspace("acme", "s1")
	if err != nil || !had {
		t.Fatalf("RemoveWorkspace: %v, had %v", err, had)
	}
	for _, p := range []string{filepath.Dir(ws), filepath.Dir(d.ImagePath("acme", "s1"))} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("empty tenant dir %s kept: %v", p, err)
		}
	}
	if had, err := d.RemoveWorkspace("acme", "s1"); err != nil || had {
		t.Errorf("second RemoveWorkspace: %v, had %v", err, had)
	}
}

// Nothing the state directory holds is followed: a symlink in a
// workspace's place is refused, and removing a workspace never reaches
// through one a sandbox planted inside.
func TestWorkspaceFollowsNoSymlink(t *testing.T) {
	eachMedium(t, workspaceFollowsNoSymlink)
}

func workspaceFollowsNoSymlink(t *testing.T, d *hostdir.Dirs) {
	victim := t.TempDir()
	os.WriteFile(filepath.Join(victim, "keep"), nil, 0o644)
	ws := d.WorkspacePath("acme", "s1")
	os.MkdirAll(filepath.Dir(ws), 0o700)
	if err := os.Symlink(victim, ws); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Workspace("acme", "s1", 1<<20, 1000, 1000); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("workspace that is a symlink: %v", err)
	}
	if mounts, _ := hostdir.Submounts(victim); len(mounts) > 0 || !sameDev(t, victim, filepath.Dir(victim)) {
		t.Errorf("mounted through the symlink: %v", mounts)
	}
	if _, err := d.RemoveWorkspace("acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("a file behind a planted symlink was removed: %v", err)
	}

	ws, _, err := d.Workspace("acme", "s2", 1<<20, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RemoveWorkspace("acme", "s2"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("a file behind a symlink in the workspace was removed: %v", err)
	}
}

func sameDev(t *testing.T, a, b string) bool {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev
}

// Sweep removes the workspaces of sessions live says are gone, with their
// files, and keeps the others'.
func TestSweepWorkspaces(t *testing.T) {
	eachMedium(t, sweepWorkspaces)
}

func sweepWorkspaces(t *testing.T, d *hostdir.Dirs) {
	for _, k := range [][2]string{{"acme", "live"}, {"acme", "gone"}, {"beta", "gone"}} {
		ws, _, err := d.Workspace(k[0], k[1], 1<<20, 1000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(ws, "f"), nil, 0o644)
	}
	removed, err := d.Sweep(func(tenant, session string) bool { return session == "live" })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{d.WorkspacePath("acme", "gone"), d.WorkspacePath("beta", "gone")}
	if !slices.Equal(removed, want) {
		t.Errorf("swept %v, want %v", removed, want)
	}
	if _, err := os.Stat(filepath.Join(d.WorkspacePath("acme", "live"), "f")); err != nil {
		t.Errorf("live workspace lost its file: %v", err)
	}
	if d.HasWorkspace("acme", "gone") || d.HasWorkspace("beta", "gone") {
		t.Error("a swept workspace is still there")
	}
	if mounts, _ := hostdir.Submounts(filepath.Join(d.StateDir(), "workspaces")); len(mounts) != 1 {
		t.Errorf("mounts left: %v, want the live one only", mounts)
	}
	if d.Medium() == hostdir.MediumDisk {
		for _, k := range [][2]string{{"acme", "gone"}, {"beta", "gone"}} {
			if _, err := os.Lstat(d.ImagePath(k[0], k[1])); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a swept workspace's image is still there: %v", err)
			}
		}
		if _, err := os.Lstat(d.ImagePath("acme", "live")); err != nil {
			t.Errorf("the live workspace's image: %v", err)
		}
	}
}

func TestWorkspaceRefusals(t *testing.T) {
	d := newDirs(t) // the agent quota: no host workspaces
	if d.Workspaces() {
		t.Error("QuotaAgent has host workspaces")
	}
	if _, _, err := d.Workspace("acme", "s1", 1<<20, 1000, 1000); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("QuotaAgent: %v", err)
	}
	td, err := hostdir.New(hostdir.Config{StateDir: t.TempDir(), Quota: hostdir.QuotaTmpfs, Medium: hostdir.MediumMemory})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		session  string
		size     int64
		uid, gid int
	}{{"../x", 1, 1, 1}, {"s", 0, 1000, 1000}, {"s", 1, 0, 1000}, {"s", 1, 1000, 0}} {
		if _, _, err := td.Workspace("acme", c.session, c.size, c.uid, c.gid); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", c, err)
		}
	}
	if _, err := td.RemoveWorkspace("acme", "../x"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("RemoveWorkspace ../x: %v", err)
	}
	if _, err := hostdir.New(hostdir.Config{StateDir: t.TempDir(), Quota: hostdir.QuotaTmpfs, Medium: "ssd"}); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "want disk or memory") {
		t.Errorf("medium ssd: %v", err)
	}
	for _, s := range []string{"", "disk", "memory"} {
		if m, err := hostdir.ParseMedium(s); err != nil || (s != "" && string(m) != s) || (s == "" && m != hostdir.MediumDisk) {
			t.Errorf("ParseMedium(%q) = %q, %v", s, m, err)
		}
	}
}

// BenchmarkWorkspace: making a session's workspace on the memory medium
// (a tmpfs mount) and
// removing it, what a new session and its end add to the sandbox's own
// creation and removal.
//
//	go test ./sandbox/hostdir/ -run '^$' -bench BenchmarkWorkspace
func BenchmarkWorkspace(b *testing.B) {
	probe := b.TempDir()
	if err := unix.Mount("tmpfs", probe, "tmpfs", 0, "size=1m"); err != nil {
		b.Skipf("cannot mount a tmpfs here (not root?): %v", err)
	}
	unix.Unmount(probe, unix.MNT_DETACH)
	d, err := hostdir.New(hostdir.Config{StateDir: b.TempDir(), Quota: hostdir.QuotaTmpfs, Medium: hostdir.MediumMemory})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := d.Workspace("acme", "s1", 1<<20, 1000, 1000); err != nil {
			b.Fatal(err)
		}
		if _, err := d.RemoveWorkspace("acme", "s1"); err != nil {
			b.Fatal(err)
		}
	}
}
