package docker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// TestMounts: a sandbox sees its host directory mounts; a read-only one
// cannot be written (EROFS), a read-write one can, and the host sees the
// write. A restarted server's Manager adopts the sandbox with its mounts.
func TestMounts(t *testing.T) {
	runtimes(t, func(t *testing.T, runtime string) {
		e := newEnv(t, runtime)
		// World-writable on the host: only the mount's read-only flag can
		// stop a write (and gVisor checks permissions before EROFS).
		ro := dockertest.MountDir(t, 0, 0)
		if err := os.Chmod(ro, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ro, "hello"), []byte("from the host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// A filesystem mounted below the source on the host does not come
		// along (the bind is not recursive): it would not be read-only.
		sub := filepath.Join(ro, "sub")
		if err := os.Mkdir(sub, 0o777); err != nil {
			t.Fatal(err)
		}
		subMounted := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m,mode=0777") == nil
		if subMounted {
			t.Cleanup(func() { unix.Unmount(sub, unix.MNT_DETACH) })
			if err := os.WriteFile(filepath.Join(sub, "below"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Log("cannot mount a tmpfs here (not root?): the non-recursive bind is not checked")
		}
		rw := dockertest.MountDir(t, 1000, 1000)
		spec := e.spec("mounts", sandbox.WithMounts(
			sandbox.Mount{Source: ro, Target: "/data", ReadOnly: true},
			sandbox.Mount{Source: rw, Target: "/srv/scratch"},
		))
		if subMounted && runtime == sandbox.RuntimeRunsc {
			// gVisor cannot bind a directory without what is mounted below
			// it: refused up front, naming both, rather than failing to start.
			_, err := e.m.Ensure(context.Background(), spec)
			if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "has a filesystem mounted below it ("+sub+")") {
				t.Fatalf("runsc with a submount: %v", err)
			}
			unix.Unmount(sub, unix.MNT_DETACH)
			subMounted = false
		}
		sb := e.ensure(spec)
		want := []sandbox.Mount{{Source: ro, Target: "/data", ReadOnly: true}, {Source: rw, Target: "/srv/scratch"}}
		if !slices.Equal(sb.Mounts, want) {
			t.Errorf("Sandbox.Mounts = %+v, want %+v", sb.Mounts, want)
		}

		if r := e.run(sb, 1000, "cat /data/hello", 30*time.Second); r.Stdout != "from the host\n" || r.ExitCode != 0 {
			t.Errorf("read: %+v", r)
		}
		for _, uid := range []int{1000, 0} {
			r := e.run(sb, uid, "echo x > /data/new", 30*time.Second)
			if r.ExitCode == 0 || !strings.Contains(r.Stderr, "Read-only file system") {
				t.Errorf("write to the read-only mount as uid %d: %+v", uid, r)
			}
		}
		if subMounted {
			r := e.run(sb, 1000, "test -e /data/sub/below && echo visible; touch /data/sub/x 2>/dev/null && echo written; true", 30*time.Second)
			if _, err := os.Lstat(filepath.Join(sub, "x")); r.Stdout != "" || !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the host's submount: %+v (the host's sub/x: %v)", r, err)
			}
		}
		if _, err := os.Lstat(filepath.Join(ro, "new")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the read-only mount was written: %v", err)
		}
		if r := e.run(sb, 1000, "echo written > /srv/scratch/out && cat /srv/scratch/out", 30*time.Second); r.Stdout != "written\n" || r.ExitCode != 0 {
			t.Errorf("write to the read-write mount: %+v", r)
		}
		if b, err := os.ReadFile(filepath.Join(rw, "out")); err != nil || string(b) != "written\n" {
			t.Errorf("the host sees %q, %v", b, err)
		}

		// A new Manager (a restarted server) adopts the same container, and
		// with it the mounts.
		m2, err := sandbox.NewManager(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := m2.Adopt(ctx); err != nil {
			t.Fatal(err)
		}
		again, err := m2.Ensure(ctx, spec)
		if err != nil || again.ID != sb.ID {
			t.Fatalf("Ensure after Adopt: %s, %v; want %s", again.ID, err, sb.ID)
		}
		if r := e.run(again, 1000, "cat /data/hello /srv/scratch/out", 30*time.Second); r.Stdout != "from the host\nwritten\n" {
			t.Errorf("after adoption: %+v", r)
		}
		list, err := e.rt.List(ctx, e.owner)
		if err != nil || len(list) != 1 || !slices.Equal(list[0].Mounts, want) || !slices.Equal(again.Mounts, want) {
			t.Errorf("listed %+v (%v), adopted %+v; want mounts %+v", list, err, again.Mounts, want)
		}
	})
}

// TestMountSourceErrors: a source that is missing or not a directory when
// the sandbox is created is refused before the engine is asked.
func TestMountSourceErrors(t *testing.T) {
	e := newEnv(t, sandbox.RuntimeRunc)
	dir := dockertest.MountDir(t, 0, 0)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]string{
		filepath.Join(dir, "missing"): "no such directory",
		file:                          "not a directory",
	} {
		_, err := e.m.Ensure(context.Background(), e.spec("badmount", sandbox.WithMounts(sandbox.Mount{Source: src, Target: "/data", ReadOnly: true})))
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("source %s: %v, want ErrInvalid with %q", src, err, want)
		}
	}
	if list, _ := e.rt.List(context.Background(), e.owner); len(list) != 0 {
		t.Errorf("left behind: %+v", list)
	}
}

// envRaceAttempts sets the sandboxes TestMountRace creates per runtime
// (default 6; each is a container).
const envRaceAttempts = "SHELLBOX_MOUNT_RACE_SANDBOXES"

// TestMountRace: while the tenant exchanges an allowed subdirectory with a
// symlink leading out of its entry (renameat2 RENAME_EXCHANGE, in a loop),
// sandboxes are created with the subdirectory as a mount source; each is
// refused or sees the allowed directory, never the one outside, on both
// runtimes. (sandbox/hostdir's TestPinRace runs the same race 200 times by
// default, 1,000 with SHELLBOX_MOUNT_RACE_ATTEMPTS=1000, without an engine.)
func TestMountRace(t *testing.T) {
	attempts := 6
	if v := os.Getenv(envRaceAttempts); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("$%s: %q is not a positive number", envRaceAttempts, v)
		}
		attempts = n
	}
	runtimes(t, func(t *testing.T, runtime string) {
		e := newEnv(t, runtime)
		allowed, outside := dockertest.MountDir(t, 0, 0), dockertest.MountDir(t, 0, 0)
		sub, swap := filepath.Join(allowed, "sub"), filepath.Join(allowed, "swap")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(sub, "f"), []byte("inside"), 0o644)
		os.WriteFile(filepath.Join(outside, "f"), []byte("SECRET"), 0o644)
		if err := os.Symlink(outside, swap); err != nil {
			t.Fatal(err)
		}
		var stop atomic.Bool
		done := make(chan error, 1)
		go func() {
			for !stop.Load() {
				if err := unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		var seen, refused int
		for i := 0; i < attempts; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			sb, err := e.m.Ensure(ctx, e.spec("race", sandbox.WithMounts(sandbox.Mount{Source: sub, Root: allowed, Target: "/data", ReadOnly: true})))
			if err != nil {
				cancel()
				if !errors.Is(err, sandbox.ErrInvalid) || strings.Contains(err.Error(), outside) {
					t.Fatalf("attempt %d: %v", i, err)
				}
				refused++
				continue
			}
			err = e.ready(ctx, sb)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			r := e.run(sb, 1000, "cat /data/f", 30*time.Second)
			if r.Stdout != "inside" {
				t.Fatalf("attempt %d: the sandbox reads %+v at /data/f", i, r)
			}
			seen++
			ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
			err = e.m.Remove(ctx, tenant, "race")
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
		stop.Store(true)
		if err := <-done; err != nil {
			t.Fatalf("the swapper failed: %v", err)
		}
		t.Logf("%d sandboxes: %d saw the allowed directory, %d refused, 0 escaped", attempts, seen, refused)
	})
}
