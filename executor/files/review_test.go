package files

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// tarOf writes headers (and each regular file's body) into a tar.
func tarOf(t *testing.T, hdrs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// Refused without a byte written, from an attack review: sparse entries
// (holes become written zeros, past any cap on the stream), names deep or
// long enough to cost quadratic work, directories made on the way past
// MaxEntries, and a hard link to a symlink (the link is the symlink,
// moved to where its relative target leads out).
func TestTarAmplificationsRefused(t *testing.T) {
	deep := strings.Repeat("a/", maxNameDepth) + "f"
	cases := []struct {
		name string
		tar  *bytes.Buffer
		lim  Limits
		want string
	}{
		// 10 KiB of PAX tar whose three entries each read as 200 MiB of
		// zeros (GNU sparse 1.0).
		{"sparse (PAX)", sparseBomb(t), Limits{MaxBytes: 64 << 10}, "sparse files are not allowed"},
		{"deep name", tarOf(t, &tar.Header{Typeflag: tar.TypeReg, Name: deep, Format: tar.FormatPAX}), Limits{}, "levels deep: at most 256"},
		{"long name", tarOf(t, &tar.Header{Typeflag: tar.TypeReg, Name: strings.Repeat("n", maxNameBytes+1), Format: tar.FormatPAX}), Limits{}, "bytes: at most 4096"},
		{"directories on the way", tarOf(t,
			&tar.Header{Typeflag: tar.TypeReg, Name: "a/b/c/d/e/f"},
		), Limits{MaxEntries: 3}, "the directories on its entries' way counted"},
		{"hard link to a symlink", tarOf(t,
			&tar.Header{Typeflag: tar.TypeDir, Name: "a/", Mode: 0o755},
			&tar.Header{Typeflag: tar.TypeDir, Name: "a/b/", Mode: 0o755},
			&tar.Header{Typeflag: tar.TypeSymlink, Name: "a/b/l", Linkname: "../.."},
			&tar.Header{Typeflag: tar.TypeLink, Name: "up", Linkname: "a/b/l"},
		), Limits{}, "which is not a regular file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTree(t)
			dst := filepath.Join(tr.Root, "out")
			_, err := tr.Put(context.Background(), dst, c.tar, PutOptions{Tar: true, Limits: c.lim})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Put: %v, want %q", err, c.want)
			}
			if !errors.Is(err, executor.ErrInvalid) && !errors.Is(err, ErrTooLarge) {
				t.Errorf("error class: %v", err)
			}
			if left := entries(t, tr.Root); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
			if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("destination exists: %v", err)
			}
		})
	}
}

func sparseBomb(t *testing.T) *bytes.Buffer {
	t.Helper()
	b, err := os.ReadFile("testdata/sparse-bomb.tar")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewBuffer(b)
}

func threadCount() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// Stalled transfers do not each hold a thread locked to the user: at
// most MaxUserThreads are, so the agent's thread budget holds (found by
// an attack review: 40 stalled uploads took 39 threads).
func TestStalledTransfersBoundThreads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching to the sandbox user needs root")
	}
	root, err := os.MkdirTemp("/tmp", "sbxthreads")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	os.Chmod(root, 0o777)
	tree := Tree{Root: root, UID: 1000, GID: 1000}
	before := threadCount()
	var ws []*io.PipeWriter
	var wg sync.WaitGroup
	for i := range 40 {
		pr, pw := io.Pipe()
		ws = append(ws, pw)
		wg.Go(func() { tree.Put(context.Background(), filepath.Join(root, "f"+strconv.Itoa(i)), pr, PutOptions{}) })
	}
	time.Sleep(300 * time.Millisecond)
	during := threadCount()
	for _, w := range ws {
		w.CloseWithError(errors.New("test over"))
	}
	wg.Wait()
	// The locked ones, and a thread or two the runtime may add under load:
	// far below one per transfer.
	if limit := before + 5; MaxUserThreads > 2 || during > limit {
		t.Errorf("threads: %d before, %d with 40 stalled uploads (want at most %d; MaxUserThreads %d)", before, during, limit, MaxUserThreads)
	}
}

// A symlink is judged by where it resolves through the links the same tar
// made, not by its target's text (found by an attack review: `shellbox cp`
// extracted "up -> ." and "up2 -> up/..", which points one level above the
// destination on the operator's machine). Into a new directory and into an
// existing one, in either order of the entries.
func TestTarLinkChainsRefused(t *testing.T) {
	sym := func(name, target string) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}
	}
	dir := func(name string) *tar.Header { return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755} }
	cases := []struct {
		name string
		hdrs []*tar.Header
		want string
	}{
		{"up then up2", []*tar.Header{sym("up", "."), sym("up2", "up/..")}, `tar entry "up2": symlink to up/.. leads outside the destination (through the symlink up -> .)`},
		{"up2 then up", []*tar.Header{sym("up2", "up/.."), sym("up", ".")}, `tar entry "up2": symlink to up/.. leads outside the destination`},
		{"deeper", []*tar.Header{dir("d/"), sym("d/b", ".."), sym("a", "d/b/../x")}, `tar entry "a": symlink to d/b/../x leads outside the destination (through the symlink d/b -> ..)`},
		{"a chain", []*tar.Header{dir("d/"), dir("d/e/"), sym("d/e/p", ".."), sym("d/q", "e/p/.."), sym("r", "d/q/../..")}, `tar entry "r": symlink to d/q/../.. leads outside`},
		{"a loop", []*tar.Header{sym("l1", "l2"), sym("l2", "l1/x")}, "too many levels of symlinks"},
	}
	for _, c := range cases {
		for _, into := range []bool{false, true} {
			t.Run(c.name+map[bool]string{false: " new", true: " merge"}[into], func(t *testing.T) {
				tr := newTree(t)
				dst := filepath.Join(tr.Root, "out")
				if into {
					os.Mkdir(dst, 0o755)
				}
				_, err := tr.Put(context.Background(), dst, tarOf(t, c.hdrs...), PutOptions{Tar: true})
				if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, executor.ErrInvalid) {
					t.Fatalf("Put: %v, want %q", err, c.want)
				}
				want := []string(nil)
				if into {
					want = []string{"out"}
				}
				if left := entries(t, tr.Root); !slices.Equal(left, want) {
					t.Errorf("left behind: %v", left)
				}
			})
		}
	}
	// Links that resolve inside, through other links, are extracted.
	tr := newTree(t)
	dst := filepath.Join(tr.Root, "out")
	ok := tarOf(t, sym("up", "."), dir("sub/"), sym("x", "up/sub/../up/sub"), sym("sub/back", "../up"), sym("dangling", "missing/.."))
	if w, err := tr.Put(context.Background(), dst, ok, PutOptions{Tar: true}); err != nil || w.Links != 4 {
		t.Fatalf("links inside: %+v, %v", w, err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "x")); err != nil || target != "up/sub/../up/sub" {
		t.Errorf("x -> %q, %v", target, err)
	}
}
