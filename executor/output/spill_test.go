package output

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestSpill(t *testing.T) {
	tests := []struct {
		name        string
		limit       int64
		threshold   int
		writes      []string
		materialize bool   // call Materialize after the writes
		wantFile    string // expected file content; "-" for no file
		wantErr     string // %s is replaced by the file path
	}{
		{"small output writes no file", 100, 10, []string{"abc", "def"}, false, "-", ""},
		{"exactly the threshold writes no file", 100, 6, []string{"abc", "def"}, false, "-", ""},
		{"crossing the threshold writes everything", 100, 5, []string{"abc", "def", "gh"}, false, "abcdefgh", ""},
		{"one big write crosses", 100, 5, []string{"abcdefghij"}, false, "abcdefghij", ""},
		{"materialize flushes the head", 100, 50, []string{"abc", "de"}, true, "abcde", ""},
		{"materialize with nothing written", 100, 50, nil, true, "", ""},
		{"limit keeps the first bytes", 4, 2, []string{"abc", "def", "ghi"}, false, "abcd",
			"spill limit of 4 bytes reached; the first 4 bytes are in %s"},
		{"limit below threshold, materialized", 3, 50, []string{"abcdef"}, true, "abc",
			"spill limit of 3 bytes reached; the first 3 bytes are in %s"},
		{"limit reached but no file wanted", 3, 50, []string{"abcdef"}, false, "-", ""},
		{"exactly the limit is not capped", 6, 2, []string{"abcdef"}, false, "abcdef", ""},
		{"limit zero disables", 0, 2, []string{"abcdef"}, true, "-", "spilling is disabled (spill limit is 0 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "spill", "sess")
			s := NewSpill(dir, "call.log", tt.limit, tt.threshold)
			var total int64
			for _, w := range tt.writes {
				if n, err := s.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
				total += int64(len(w))
			}
			if tt.materialize {
				if err := s.Materialize(); err != nil {
					t.Fatalf("Materialize: %v", err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if s.Written() != total {
				t.Errorf("Written() = %d, want %d", s.Written(), total)
			}
			path := filepath.Join(dir, "call.log")
			got, err := os.ReadFile(path)
			switch {
			case tt.wantFile == "-":
				if err == nil {
					t.Errorf("file written: %q", got)
				}
				if s.Path() != "" {
					t.Errorf("Path() = %q, want none", s.Path())
				}
			case err != nil:
				t.Errorf("no file: %v", err)
			default:
				if string(got) != tt.wantFile {
					t.Errorf("file holds %q, want %q", got, tt.wantFile)
				}
				if s.Path() != path {
					t.Errorf("Path() = %q, want %q", s.Path(), path)
				}
			}
			wantErr := tt.wantErr
			if strings.Contains(wantErr, "%s") {
				wantErr = fmt.Sprintf(wantErr, path)
			}
			if got := s.Err(); got != wantErr {
				t.Errorf("Err() = %q, want %q", got, wantErr)
			}
		})
	}
}

func TestSpillUnwritable(t *testing.T) {
	base := t.TempDir()
	blocker := filepath.Join(base, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewSpill(filepath.Join(blocker, "sess"), "call.log", 100, 2)
	for range 3 {
		if n, err := s.Write([]byte("abcdef")); n != 6 || err != nil {
			t.Fatalf("Write = %d, %v; writes must never fail", n, err)
		}
	}
	want := "mkdir " + filepath.Join(blocker, "sess") + ": not a directory"
	if got := s.Err(); got != want {
		t.Errorf("Err() = %q, want %q", got, want)
	}
	if s.Path() != "" {
		t.Errorf("Path() = %q, want none", s.Path())
	}
	if s.Written() != 18 {
		t.Errorf("Written() = %d, want 18", s.Written())
	}
	if err := s.Materialize(); err == nil {
		t.Error("Materialize after a failure returned no error")
	}
}

func TestSpillBadName(t *testing.T) {
	s := NewSpill(t.TempDir(), "../escape.log", 100, 0)
	s.Write([]byte("x"))
	if got := s.Err(); !strings.Contains(got, "invalid spill file name") {
		t.Errorf("Err() = %q", got)
	}
}

// TestSpillModes checks the modes whatever the umask: the command's user,
// not ours, reads the file.
func TestSpillModes(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	s := NewSpill(filepath.Join(base, "a", "b"), "x.log", 100, 0)
	s.Write([]byte("hi"))
	s.Close()
	for path, want := range map[string]os.FileMode{
		filepath.Join(base, "a"):               0o755 | os.ModeDir,
		filepath.Join(base, "a", "b"):          0o755 | os.ModeDir,
		filepath.Join(base, "a", "b", "x.log"): 0o644,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
}

// TestSpillInterleaves writes two streams concurrently: the file holds every
// chunk of each, each stream's chunks in order.
func TestSpillInterleaves(t *testing.T) {
	dir := t.TempDir()
	s := NewSpill(dir, "x.log", 1<<20, 16)
	var wg sync.WaitGroup
	for _, tag := range []string{"O", "E"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				s.Write(fmt.Appendf(nil, "%s%03d\n", tag, i))
			}
		}()
	}
	wg.Wait()
	s.Close()
	b, err := os.ReadFile(filepath.Join(dir, "x.log"))
	if err != nil {
		t.Fatal(err)
	}
	next := map[byte]int{}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	for _, l := range lines {
		var i int
		fmt.Sscanf(string(l[1:]), "%d", &i)
		if i != next[l[0]] {
			t.Fatalf("line %q out of order, want %c%03d", l, l[0], next[l[0]])
		}
		next[l[0]]++
	}
	if len(lines) != 1000 {
		t.Fatalf("%d lines, want 1000", len(lines))
	}
}

func TestSpillWriteAfterClose(t *testing.T) {
	dir := t.TempDir()
	s := NewSpill(dir, "x.log", 100, 0)
	s.Write([]byte("ab"))
	s.Close()
	if n, err := s.Write([]byte("cd")); n != 2 || err != nil {
		t.Fatalf("Write after Close = %d, %v", n, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "x.log"))
	if string(b) != "ab" {
		t.Errorf("file holds %q", b)
	}
	if s.Written() != 4 {
		t.Errorf("Written() = %d, want 4", s.Written())
	}
}

// TestSpillSpaceFull fills a small tmpfs (the spill volume a sandbox gets):
// the error names the volume's size and where the kept bytes are. It needs
// the right to mount (root, as in CI).
func TestSpillSpaceFull(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v", err)
		}
		t.Skipf("cannot mount a tmpfs here (%v): run as root", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })

	s := NewSpill(dir, "a.log", 1<<20, 10)
	chunk := bytes.Repeat([]byte("x"), 4096)
	for range 40 { // 160 KiB into 64 KiB
		s.Write(chunk)
	}
	s.Close()
	st, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("the session's spill space of 65536 bytes is full; the first %d bytes are in %s", st.Size(), s.Path())
	if got := s.Err(); got != want {
		t.Errorf("Err() = %q, want %q", got, want)
	}
	if s.Written() != 40*4096 {
		t.Errorf("Written() = %d", s.Written())
	}

	// A second call in the full volume cannot even create its file.
	s2 := NewSpill(dir, "b.log", 1<<20, 0)
	s2.Write(chunk)
	s2.Close()
	if got := s2.Err(); !strings.HasPrefix(got, "the session's spill space of 65536 bytes is full; no spill file was written") &&
		!strings.HasPrefix(got, "the session's spill space of 65536 bytes is full; the first 0 bytes") {
		t.Errorf("second spill: Err() = %q", got)
	}
}
