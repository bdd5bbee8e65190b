package hostdir_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/sandbox"
)

// pinTree is an allowlist entry (allowed/) with a subdirectory holding a
// file, and a directory outside it holding a secret.
func pinTree(t *testing.T) (allowed, outside string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	allowed, outside = filepath.Join(base, "allowed"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(allowed, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(allowed, "sub", "f"), []byte("inside"), 0o644)
	os.WriteFile(filepath.Join(outside, "f"), []byte("SECRET"), 0o644)
	return allowed, outside
}

// needMount skips where the process cannot mount (the pins are bind
// mounts; CI runs as root).
func needMount(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("pinning mount sources needs root (CAP_SYS_ADMIN) to bind mount; CI runs as root")
	}
}

func identity(t *testing.T, p string) [2]uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return [2]uint64{st.Dev, st.Ino}
}

// Pin binds the directory it opened at a neutral path in the state
// directory, and Release undoes it.
func TestPin(t *testing.T) {
	needMount(t)
	d := newDirs(t)
	allowed, _ := pinTree(t)
	sub := filepath.Join(allowed, "sub")
	mounts := []sandbox.Mount{
		{Source: sub, Root: allowed, Target: "/data", ReadOnly: true},
		{Source: allowed, Target: "/all"},
	}
	p, err := d.Pin("acme", "s1", mounts)
	if err != nil {
		t.Fatal(err)
	}
	got := p.Mounts()
	dir := filepath.Join(d.StateDir(), "pins", "acme", "s1")
	for i, m := range got {
		if m.Source != filepath.Join(dir, strconv.Itoa(i)) || m.Target != mounts[i].Target || m.ReadOnly != mounts[i].ReadOnly {
			t.Errorf("mounts[%d] = %+v", i, m)
		}
		if identity(t, m.Source) != identity(t, mounts[i].Source) {
			t.Errorf("mounts[%d]: the pin is not the source", i)
		}
	}
	if fi, err := os.Stat(filepath.Dir(dir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("pins dir: %v %v, want 0700", fi.Mode(), err)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pins left after Release: %v", err)
	}
	if err := p.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
}

// A source that is no longer the directory allowed (a symlink, a file, gone)
// is refused, without saying where the symlink led.
func TestPinRefusesChangedSources(t *testing.T) {
	needMount(t)
	d := newDirs(t)
	allowed, outside := pinTree(t)
	os.Symlink(outside, filepath.Join(allowed, "link"))
	os.Mkdir(filepath.Join(allowed, "dir"), 0o755)
	os.Symlink(outside, filepath.Join(allowed, "dir", "deeper"))
	os.WriteFile(filepath.Join(allowed, "file"), nil, 0o644)
	os.Symlink(allowed, filepath.Join(filepath.Dir(allowed), "alias"))
	for _, c := range []struct {
		source, root, want string
	}{
		{filepath.Join(allowed, "link"), allowed, "a symlink is in its path now"},
		{filepath.Join(allowed, "link", "x"), allowed, "a symlink is in its path now"},
		{filepath.Join(allowed, "dir", "deeper"), allowed, "a symlink is in its path now"},
		{filepath.Join(allowed, "file"), allowed, "not a directory"},
		{filepath.Join(allowed, "gone"), allowed, "no such directory"},
		// The entry itself swapped for a symlink.
		{filepath.Join(filepath.Dir(allowed), "alias", "sub"), filepath.Join(filepath.Dir(allowed), "alias"), "a symlink is in its path now"},
	} {
		_, err := d.Pin("acme", "s1", []sandbox.Mount{{Source: c.source, Root: c.root, Target: "/data"}})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), outside) {
			t.Errorf("%s: %v, want %q (and no %s)", c.source, err, c.want, outside)
		}
	}
	if _, err := os.Stat(filepath.Join(d.StateDir(), "pins", "acme", "s1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Pin left pins: %v", err)
	}
}

// EnvRaceAttempts sets the attempts of TestPinRace (default 200).
const EnvRaceAttempts = "SHELLBOX_MOUNT_RACE_ATTEMPTS"

// TestPinRace is the regression test of the mount allowlist race: a tenant
// exchanges (renameat2 RENAME_EXCHANGE, in a loop) an allowed subdirectory
// with a symlink leading outside the entry while sessions are created with
// that subdirectory as their source. Every Pin either refuses or pins the
// allowed directory, never the one outside. The same loop also counts how
// often the former check-then-mount by path would have lost, to show the
// race is live while the test runs (logged, not asserted: it is timing).
func TestPinRace(t *testing.T) {
	needMount(t)
	attempts := 200
	if v := os.Getenv(EnvRaceAttempts); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("$%s: %q is not a positive number", EnvRaceAttempts, v)
		}
		attempts = n
	}
	d := newDirs(t)
	allowed, outside := pinTree(t)
	sub, swap := filepath.Join(allowed, "sub"), filepath.Join(allowed, "swap")
	if err := os.Symlink(outside, swap); err != nil {
		t.Fatal(err)
	}
	inside := identity(t, sub)

	var stop atomic.Bool
	var swaps atomic.Int64
	done := make(chan error, 1)
	go func() {
		for !stop.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE); err != nil {
				done <- err
				return
			}
			swaps.Add(1)
		}
		done <- nil
	}()
	var pinned, refused, pathLost int
	for i := 0; i < attempts; i++ {
		// What the check by path did: resolve, compare, then hand the path on.
		if real, err := filepath.EvalSymlinks(sub); err == nil && real == sub {
			if b, _ := os.ReadFile(filepath.Join(sub, "f")); string(b) == "SECRET" {
				pathLost++
			}
		}
		p, err := d.Pin("acme", "s1", []sandbox.Mount{{Source: sub, Root: allowed, Target: "/data"}})
		if err != nil {
			if !errors.Is(err, sandbox.ErrInvalid) || strings.Contains(err.Error(), outside) {
				t.Fatalf("attempt %d: %v", i, err)
			}
			refused++
			continue
		}
		src := p.Mounts()[0].Source
		if identity(t, src) != inside {
			t.Fatalf("attempt %d: the pin at %s is not the allowed directory", i, src)
		}
		if b, err := os.ReadFile(filepath.Join(src, "f")); err != nil || string(b) != "inside" {
			t.Fatalf("attempt %d: read through the pin: %q, %v", i, b, err)
		}
		pinned++
		if err := p.Release(); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	if err := <-done; err != nil {
		t.Fatalf("the swapper failed: %v", err)
	}
	if swaps.Load() == 0 {
		t.Fatal("the swapper never swapped: the race was not run")
	}
	t.Logf("%d attempts against %d swaps: %d pinned the allowed directory, %d refused, 0 escaped; a check by path would have read outside %d times",
		attempts, swaps.Load(), pinned, refused, pathLost)
}

// Verify compares the directory a process sees at each target with the
// pinned one: this process, whose root is the host's, sees the source
// itself at the source's path, and another directory elsewhere.
func TestPinVerify(t *testing.T) {
	needMount(t)
	d := newDirs(t)
	allowed, outside := pinTree(t)
	sub := filepath.Join(allowed, "sub")
	p, err := d.Pin("acme", "s1", []sandbox.Mount{{Source: sub, Root: allowed, Target: sub}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(sandbox.RuntimeRunc, os.Getpid()); err != nil {
		t.Errorf("the same directory: %v", err)
	}
	p.Release()
	p, err = d.Pin("acme", "s1", []sandbox.Mount{{Source: sub, Root: allowed, Target: outside}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	err = p.Verify(sandbox.RuntimeRunc, os.Getpid())
	if !errors.Is(err, sandbox.ErrConflict) || !strings.Contains(err.Error(), "the sandbox sees another directory at "+outside) {
		t.Errorf("another directory: %v", err)
	}
	// gVisor's mounts are the sentry's: nothing to compare on the host.
	if err := p.Verify(sandbox.RuntimeRunsc, os.Getpid()); err != nil {
		t.Errorf("runsc: %v", err)
	}
}
