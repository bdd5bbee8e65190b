package snapshot_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/sandbox/snapshot/snapshottest"
)

// dirHarness runs the suite on Dir stores in test directories.
func dirHarness() snapshottest.Harness {
	root := map[snapshot.Store]string{}
	return snapshottest.Harness{
		New: func(t *testing.T) snapshot.Store {
			dir := filepath.Join(t.TempDir(), "snapshots")
			d, err := snapshot.NewDir(snapshot.DirOptions{Path: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			root[d] = dir
			return d
		},
		Corrupt: func(t *testing.T, s snapshot.Store, info snapshot.Info) {
			p := filepath.Join(root[s], snapshot.DirFile(s.(*snapshot.Dir), info))
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, info.Size/2); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0x40
			if _, err := f.WriteAt(b, info.Size/2); err != nil {
				t.Fatal(err)
			}
		},
		Reopen: func(t *testing.T, s snapshot.Store) snapshot.Store {
			d, err := snapshot.NewDir(snapshot.DirOptions{Path: root[s]})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			return d
		},
		Truncate: func(t *testing.T, s snapshot.Store, info snapshot.Info, n int64) {
			if err := os.Truncate(filepath.Join(root[s], snapshot.DirFile(s.(*snapshot.Dir), info)), n); err != nil {
				t.Fatal(err)
			}
		},
		Plant: func(t *testing.T, s snapshot.Store, tenant, session string) int {
			p := filepath.Join(root[s], snapshot.DirTemp(tenant, session))
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("half a snapshot"), 0o600); err != nil {
				t.Fatal(err)
			}
			return 1
		},
	}
}

func TestDir(t *testing.T) { snapshottest.Run(t, dirHarness()) }

// TestDirConfined: a symlink planted in the store does not lead out of it.
func TestDirConfined(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	d, err := snapshot.NewDir(snapshot.DirOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.Symlink(outside, filepath.Join(dir, "t1")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(t.Context(), "t1", "s1", strings.NewReader("x")); err == nil {
		t.Fatal("Put through a symlink out of the store succeeded")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("Put wrote outside the store: %v", entries)
	}
}

// TestDirSweepKeepsRecent: Sweep goes by the temporaries' age.
func TestDirSweepKeepsRecent(t *testing.T) {
	dir := t.TempDir()
	d, err := snapshot.NewDir(snapshot.DirOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	old := filepath.Join(dir, snapshot.DirTemp("t1", "s1"))
	recent := filepath.Join(dir, snapshot.DirTemp("t1", "s2"))
	for _, p := range []string{old, recent} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	twoHours := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, twoHours, twoHours); err != nil {
		t.Fatal(err)
	}
	swept, err := d.Sweep(t.Context(), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(swept) != 1 || filepath.Join(dir, swept[0].Name) != old {
		t.Fatalf("Sweep: %+v, want only %s", swept, old)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Fatalf("the recent temporary: %v", err)
	}
}

func BenchmarkDir(b *testing.B) {
	d, err := snapshot.NewDir(snapshot.DirOptions{Path: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	snapshottest.Bench(b, d, 64<<20)
}

// TestDirLonger: bytes appended behind the store's back are refused, and
// never handed over.
func TestDirLonger(t *testing.T) {
	dir := t.TempDir()
	d, err := snapshot.NewDir(snapshot.DirOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	info, err := d.Put(t.Context(), "t1", "s1", strings.NewReader("the snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, snapshot.DirFile(d, info)), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" and more"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rc, _, err := d.Get(t.Context(), "t1", "s1", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("Get of a snapshot grown behind the store: %v, want ErrCorrupt (longer)", err)
	}
	if string(got) != "the snapshot" {
		t.Fatalf("Get handed over %q, more than the snapshot", got)
	}
}

// TestDirDeleteTakesTheRecordLock: a session is deleted under its record
// lock, so a swap holding the lock cannot put a record back into the
// directory the delete has listed: while the lock is held elsewhere the
// delete waits (here until its context ends), and then it goes.
func TestDirDeleteTakesTheRecordLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots")
	d, err := snapshot.NewDir(snapshot.DirOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := t.Context()
	if err := d.SetRecord(ctx, "acme", "s1", []byte(`{"state":"suspended"}`)); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "acme", "s1", ".record-lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the record's lock file: %v", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := d.DeleteSession(short, "acme", "s1"); err == nil {
		t.Fatal("DeleteSession went on while another held the record's lock")
	}
	if _, _, err := d.Record(ctx, "acme", "s1"); err != nil {
		t.Errorf("the record after the waiting delete: %v", err)
	}
	lock.Close() // drops the lock
	if err := d.DeleteSession(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "acme", "s1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the session's directory after the delete: %v", err)
	}
}
