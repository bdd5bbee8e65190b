package hostdir_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostdir"
)

func newDirs(t *testing.T) *hostdir.Dirs {
	t.Helper()
	d, err := hostdir.New(hostdir.Config{StateDir: t.TempDir(), Quota: hostdir.QuotaAgent})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPrepareLaysOutTheDirectory(t *testing.T) {
	d := newDirs(t)
	dir, err := d.Prepare("acme", "s1", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(d.StateDir(), "sessions", "acme", "s1") || !d.Exists("acme", "s1") {
		t.Fatalf("dir %s", dir)
	}
	for _, p := range []string{dir, filepath.Join(dir, hostdir.SpillName)} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want 0755", p, fi.Mode(), err)
		}
	}
	for _, p := range []string{filepath.Join(d.StateDir(), "sessions"), filepath.Dir(dir)} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want 0700", p, fi.Mode(), err)
		}
	}
	if ep := hostdir.Endpoint(dir); ep.Network != "unix" || ep.Address != filepath.Join(dir, "agent.sock") {
		t.Errorf("endpoint %+v", ep)
	}
	// Prepare again: empty again.
	os.WriteFile(filepath.Join(dir, "left"), nil, 0o644)
	if _, err := d.Prepare("acme", "s1", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "left")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Prepare kept an old file: %v", err)
	}
	if err := d.Remove("acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty tenant dir kept: %v", err)
	}
	if err := d.Remove("acme", "s1"); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// Remove follows no symlink a sandbox planted.
func TestRemoveFollowsNoSymlink(t *testing.T) {
	d := newDirs(t)
	dir, err := d.Prepare("acme", "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	victim := t.TempDir()
	os.WriteFile(filepath.Join(victim, "keep"), nil, 0o644)
	os.RemoveAll(filepath.Join(dir, hostdir.SpillName))
	if err := os.Symlink(victim, filepath.Join(dir, hostdir.SpillName)); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("a file behind a planted symlink was removed: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	long, err := hostdir.New(hostdir.Config{StateDir: "/" + strings.Repeat("x", 60), Quota: hostdir.QuotaAgent})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Prepare("acme", strings.Repeat("s", 40), 0); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "socket path") {
		t.Errorf("long socket path: %v", err)
	}
	d := newDirs(t)
	if _, err := d.Prepare("acme", "../x", 0); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("session ../x: %v", err)
	}
	if _, err := hostdir.New(hostdir.Config{StateDir: "relative", Quota: hostdir.QuotaAgent}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("relative state dir: %v", err)
	}
}

func TestSweep(t *testing.T) {
	d := newDirs(t)
	for _, k := range [][2]string{{"acme", "live"}, {"acme", "orphan"}, {"beta", "orphan"}} {
		if _, err := d.Prepare(k[0], k[1], 0); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := d.Sweep(func(tenant, session string) bool { return session == "live" })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{d.Path("acme", "orphan"), d.Path("beta", "orphan")}
	if !slices.Equal(removed, want) || !d.Exists("acme", "live") || d.Exists("beta", "orphan") {
		t.Errorf("swept %v, want %v", removed, want)
	}
	if _, err := os.Stat(filepath.Dir(d.Path("beta", "orphan"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty tenant dir kept: %v", err)
	}
}

// A mount may not bring shellbox's session state into a sandbox: the
// directory of every session's host dir (other sandboxes' agent sockets),
// nor any session's workspace.
func TestCheckMounts(t *testing.T) {
	d, err := hostdir.New(hostdir.Config{StateDir: "/var/lib/shellbox", Quota: hostdir.QuotaAgent})
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"/var/lib/shellbox", "/var/lib/shellbox/sessions", "/var/lib/shellbox/sessions/beta",
		"/var/lib/shellbox/sessions/acme/s-1/spill", "/var/lib/shellbox/workspaces", "/var/lib/shellbox/workspaces/acme/s-1",
		"/var/lib/shellbox/workspace-images", "/var/lib/shellbox/workspace-images/acme/s-1.ext4", "/"} {
		err := d.CheckMounts([]sandbox.Mount{{Source: src, Target: "/data"}})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "shellbox's session state") {
			t.Errorf("source %s: %v", src, err)
		}
	}
	if err := d.CheckMounts([]sandbox.Mount{{Source: "/var/lib/shellbox-data", Target: "/data"}}); err != nil {
		t.Errorf("a neighbour of the state dir: %v", err)
	}
}

func TestSubmounts(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "a b")
	os.Mkdir(sub, 0o755)
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (not root?): %v", err)
	}
	defer unix.Unmount(sub, unix.MNT_DETACH)
	got, err := hostdir.Submounts(dir)
	if err != nil || len(got) != 1 || got[0] != sub {
		t.Fatalf("Submounts(%s) = %v, %v; want [%s]", dir, got, err, sub)
	}
	if got, _ := hostdir.Submounts(sub); len(got) != 0 {
		t.Errorf("a mount point itself: %v", got)
	}
	err = hostdir.CheckRunscMounts([]sandbox.Mount{{Source: dir, Target: "/d"}})
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "mounted below it ("+sub+")") {
		t.Errorf("CheckRunscMounts: %v", err)
	}
}
