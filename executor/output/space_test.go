package output

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSpaceOrder: files adopted from an earlier process go first, oldest
// first; then closed spills in the order they closed; an open spill never.
func TestSpaceOrder(t *testing.T) {
	dir := t.TempDir()
	sess := filepath.Join(dir, "s1")
	if err := os.Mkdir(sess, 0o755); err != nil {
		t.Fatal(err)
	}
	old, older := filepath.Join(sess, "old.log"), filepath.Join(sess, "older.log")
	for i, p := range []string{older, old} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(time.Duration(i-10) * time.Hour)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	sp := NewSpace()
	if n, err := sp.Adopt(dir); err != nil || n != 2 {
		t.Fatalf("Adopt = %d, %v; want 2", n, err)
	}
	newSpill := func(name string) *Spill {
		s := sp.NewSpill(sess, name, 1<<20, 0)
		s.Write([]byte("output"))
		if s.Path() == "" {
			t.Fatalf("%s: no file: %s", name, s.Err())
		}
		return s
	}
	a, open, b := newSpill("a.log"), newSpill("open.log"), newSpill("b.log")
	defer open.Close()
	b.Close()
	a.Close()
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	var gone []string
	for sp.evictOne() {
		for _, p := range []string{older, old, b.Path(), a.Path(), open.Path()} {
			if !exists(p) && !slices.Contains(gone, p) {
				gone = append(gone, p)
			}
		}
	}
	if want := []string{older, old, b.Path(), a.Path()}; !slices.Equal(gone, want) {
		t.Errorf("evicted %q, want %q", gone, want)
	}
	if !exists(open.Path()) || open.Err() != "" {
		t.Errorf("the open spill: exists %v, Err %q", exists(open.Path()), open.Err())
	}
	want := b.Path() + " was deleted to make room for newer output (the session's spill space is "
	if got := b.Err(); len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("an evicted spill's Err: %q, want %q…", got, want)
	}
	if sp.Evicted() != 4 {
		t.Errorf("Evicted() = %d, want 4", sp.Evicted())
	}
}
