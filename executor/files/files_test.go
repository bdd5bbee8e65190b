package files

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
)

func newTree(t *testing.T) Tree {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return Tree{Root: root, UID: -1, GID: -1}
}

// entries lists what is under dir (relative names), hidden staging
// entries included: a failed upload must leave none.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	slices.Sort(out)
	return out
}

func get(t *testing.T, tr Tree, p string, o GetOptions) ([]byte, Info, error) {
	t.Helper()
	var buf bytes.Buffer
	var info Info
	err := tr.Get(context.Background(), p, o, func(i Info) (io.Writer, error) { info = i; return &buf, nil })
	return buf.Bytes(), info, err
}

// TestBigFileRoundTrip: 100 MB in and out, byte-exact.
func TestBigFileRoundTrip(t *testing.T) {
	tr := newTree(t)
	const size = 100 << 20
	src := io.LimitReader(rand.NewChaCha8([32]byte{1}), size)
	h := sha256.New()
	w, err := tr.Put(context.Background(), "/big/dir/blob.bin", io.TeeReader(src, h), PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "outside the session root") {
		t.Fatalf("absolute path outside root: %v", err)
	}
	w, err = tr.Put(context.Background(), "sub/dir/blob.bin", io.TeeReader(src, h), PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Bytes != size || w.Path != tr.Root+"/sub/dir/blob.bin" {
		t.Fatalf("written %+v", w)
	}
	want := h.Sum(nil)
	got := sha256.New()
	var info Info
	err = tr.Get(context.Background(), tr.Root+"/sub/dir/blob.bin", GetOptions{}, func(i Info) (io.Writer, error) { info = i; return got, nil })
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Sum(nil), want) || info.Size != size || info.Type != TypeFile {
		t.Fatalf("round trip differs: info %+v", info)
	}
	fi, _ := os.Stat(filepath.Join(tr.Root, "sub/dir/blob.bin"))
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode())
	}
	if got := entries(t, tr.Root); !slices.Equal(got, []string{"sub", "sub/dir", "sub/dir/blob.bin"}) {
		t.Errorf("root holds %q", got)
	}
}

func mkTar(t *testing.T, hs ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "content of " + h.Name
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	tw.Close()
	return b.Bytes()
}

func reg(name string) *tar.Header { return &tar.Header{Typeflag: tar.TypeReg, Name: name} }

func TestTarRoundTrip(t *testing.T) {
	tr := newTree(t)
	in := mkTar(t,
		&tar.Header{Typeflag: tar.TypeDir, Name: "a/", Mode: 0o750},
		reg("a/x.txt"), reg("a/b/y.txt"),
		&tar.Header{Typeflag: tar.TypeSymlink, Name: "a/link", Linkname: "b/y.txt"},
		&tar.Header{Typeflag: tar.TypeLink, Name: "a/hard", Linkname: "a/x.txt"},
	)
	w, err := tr.Put(context.Background(), "new", bytes.NewReader(in), PutOptions{Tar: true})
	if err != nil {
		t.Fatal(err)
	}
	if w.Files != 2 || w.Dirs != 1 || w.Links != 2 {
		t.Errorf("written %+v", w)
	}
	if b, _ := os.ReadFile(filepath.Join(tr.Root, "new/a/link")); string(b) != "content of a/b/y.txt" {
		t.Errorf("link reads %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(tr.Root, "new/a")); fi.Mode().Perm() != 0o750 {
		t.Errorf("dir mode %v", fi.Mode())
	}
	// Out again, and in again elsewhere: the same tree.
	out, info, err := get(t, tr, "new", GetOptions{Tar: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != TypeDirectory || info.Size != 2*18+20 {
		t.Errorf("info %+v, want a directory of 56 bytes", info)
	}
	if _, err := tr.Put(context.Background(), "copy", bytes.NewReader(out), PutOptions{Tar: true}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a/x.txt", "a/b/y.txt", "a/hard"} {
		want, _ := os.ReadFile(filepath.Join(tr.Root, "new", f))
		got, err := os.ReadFile(filepath.Join(tr.Root, "copy/new", f))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %q, %v; want %q", f, got, err, want)
		}
	}
	if l, _ := os.Readlink(filepath.Join(tr.Root, "copy/new/a/link")); l != "b/y.txt" {
		t.Errorf("link -> %q", l)
	}
	// Merging into an existing directory keeps what the tar does not
	// name and replaces what it does.
	os.WriteFile(filepath.Join(tr.Root, "new/a/keep"), []byte("kept"), 0o644)
	os.WriteFile(filepath.Join(tr.Root, "new/a/x.txt"), []byte("old"), 0o644)
	if _, err := tr.Put(context.Background(), "new", bytes.NewReader(mkTar(t, reg("a/x.txt"))), PutOptions{Tar: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(tr.Root, "new/a/x.txt")); string(b) != "content of a/x.txt" {
		t.Errorf("merged x.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(tr.Root, "new/a/keep")); string(b) != "kept" {
		t.Errorf("keep = %q", b)
	}
	for _, e := range entries(t, tr.Root) {
		if strings.Contains(e, stagingPrefix) {
			t.Errorf("staging left: %s", e)
		}
	}
}

func wantErr(t *testing.T, err error, class error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", class)
	}
	if !errors.Is(err, class) {
		t.Errorf("error %q is not %v", err, class)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %q", err, p)
		}
	}
}

func TestEscapesRefused(t *testing.T) {
	tr := newTree(t)
	os.Mkdir(filepath.Join(tr.Root, "d"), 0o755)
	os.Symlink("/etc", filepath.Join(tr.Root, "etc"))
	os.Symlink("../../", filepath.Join(tr.Root, "d/up"))
	os.Symlink("/etc/passwd", filepath.Join(tr.Root, "passwd"))
	before := entries(t, tr.Root)
	ctx := context.Background()
	for _, p := range []string{"../x", "/etc/passwd", "d/../../x", tr.Root + "/../x"} {
		_, err := tr.Put(ctx, p, strings.NewReader("x"), PutOptions{})
		wantErr(t, err, executor.ErrInvalid, p, "outside the session root")
		_, _, err = get(t, tr, p, GetOptions{})
		wantErr(t, err, executor.ErrInvalid, "outside the session root")
	}
	for _, p := range []string{"etc/x", "etc/passwd", "d/up/x", "passwd"} {
		_, err := tr.Put(ctx, p, strings.NewReader("x"), PutOptions{})
		wantErr(t, err, executor.ErrInvalid, p, "leads outside")
		_, err = tr.Put(ctx, p, bytes.NewReader(mkTar(t, reg("f"))), PutOptions{Tar: true})
		wantErr(t, err, executor.ErrInvalid, "leads outside")
		_, _, err = get(t, tr, p, GetOptions{})
		wantErr(t, err, executor.ErrInvalid, "leads outside")
	}
	// Bad tars: every one refused whole.
	for _, c := range []struct {
		name string
		hs   []*tar.Header
		why  string
	}{
		{"dotdot", []*tar.Header{reg("ok"), reg("../evil")}, "leads outside"},
		{"abs", []*tar.Header{reg("/etc/evil")}, "absolute"},
		{"symlink-abs", []*tar.Header{{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc"}}, "absolute targets"},
		{"symlink-up", []*tar.Header{{Typeflag: tar.TypeSymlink, Name: "a/l", Linkname: "../../x"}}, "leads outside"},
		{"through-symlink", []*tar.Header{{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "."}, reg("l/x"), {Typeflag: tar.TypeSymlink, Name: "m", Linkname: "l/../.."}}, "goes through l"},
		{"symlink-chain", []*tar.Header{{Typeflag: tar.TypeSymlink, Name: "up", Linkname: "."},
			{Typeflag: tar.TypeSymlink, Name: "up/up/up/l", Linkname: "../../.."}, reg("l/x")}, "goes through up"},
		{"hardlink-up", []*tar.Header{{Typeflag: tar.TypeLink, Name: "h", Linkname: "../../etc/passwd"}}, "hard link"},
		{"device", []*tar.Header{{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}, "only files"},
		{"fifo", []*tar.Header{{Typeflag: tar.TypeFifo, Name: "p"}}, "only files"},
	} {
		_, err := tr.Put(ctx, "new-"+c.name, bytes.NewReader(mkTar(t, c.hs...)), PutOptions{Tar: true})
		wantErr(t, err, executor.ErrInvalid, c.why)
	}
	if got := entries(t, tr.Root); !slices.Equal(got, before) {
		t.Errorf("root changed: %q, want %q", got, before)
	}
	if b, _ := os.ReadFile("/etc/passwd"); !bytes.Contains(b, []byte("root")) {
		t.Error("/etc/passwd changed")
	}
}

// TestSymlinkSwapped: a directory on the way replaced by a symlink out
// while the upload streams; the upload lands in the directory it opened
// (now detached from the path) or fails: never outside.
func TestSymlinkSwapped(t *testing.T) {
	tr := newTree(t)
	outside := t.TempDir()
	os.Mkdir(filepath.Join(tr.Root, "d"), 0o755)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := tr.Put(context.Background(), "d/f", pr, PutOptions{})
		done <- err
	}()
	pw.Write([]byte("first half "))
	// The upload has opened d: swap it for a symlink out.
	os.Rename(filepath.Join(tr.Root, "d"), filepath.Join(tr.Root, "d.old"))
	os.Symlink(outside, filepath.Join(tr.Root, "d"))
	pw.Write([]byte("second half"))
	pw.Close()
	<-done
	if got := entries(t, outside); len(got) != 0 {
		t.Fatalf("wrote outside the root: %q", got)
	}
}

func TestOverCapAndInterrupted(t *testing.T) {
	tr := newTree(t)
	ctx := context.Background()
	_, err := tr.Put(ctx, "big", strings.NewReader(strings.Repeat("x", 1001)), PutOptions{Limits: Limits{MaxBytes: 1000}})
	wantErr(t, err, ErrTooLarge, tr.Root+"/big", "1000 bytes")
	if _, err := tr.Put(ctx, "exact", strings.NewReader(strings.Repeat("x", 1000)), PutOptions{Limits: Limits{MaxBytes: 1000}}); err != nil {
		t.Fatalf("exactly the cap: %v", err)
	}
	big := mkTar(t, reg("a"), reg("b"), &tar.Header{Typeflag: tar.TypeReg, Name: "c", Size: 5000})
	_, err = tr.Put(ctx, "tarbig", bytes.NewReader(big), PutOptions{Tar: true, Limits: Limits{MaxBytes: 2048}})
	wantErr(t, err, ErrTooLarge, "tarbig", "2048 bytes")
	_, err = tr.Put(ctx, "tarmany", bytes.NewReader(mkTar(t, reg("a"), reg("b"), reg("c"))), PutOptions{Tar: true, Limits: Limits{MaxEntries: 2}})
	wantErr(t, err, ErrTooLarge, "tarmany", "2 entries")
	_, _, err = get(t, tr, "exact", GetOptions{Limits: Limits{MaxBytes: 999}})
	wantErr(t, err, ErrTooLarge, "exact", "999 bytes")
	_, _, err = get(t, tr, ".", GetOptions{Tar: true, Limits: Limits{MaxBytes: 999}})
	wantErr(t, err, ErrTooLarge, "999 bytes")

	// A body that breaks off: nothing visible, the old file intact.
	os.WriteFile(filepath.Join(tr.Root, "keep"), []byte("old"), 0o644)
	broken := io.MultiReader(strings.NewReader("partial"), errReader{io.ErrUnexpectedEOF})
	_, err = tr.Put(ctx, "keep", broken, PutOptions{})
	wantErr(t, err, executor.ErrInvalid, "interrupted", "keep", "nothing was written")
	_, err = tr.Put(ctx, "new/dir/f", io.MultiReader(strings.NewReader("partial"), errReader{errors.New("connection reset")}), PutOptions{})
	wantErr(t, err, executor.ErrInvalid, "interrupted")
	half := mkTar(t, reg("a"), reg("b"))
	_, err = tr.Put(ctx, "newtar", io.MultiReader(bytes.NewReader(half[:700]), errReader{io.ErrUnexpectedEOF}), PutOptions{Tar: true})
	wantErr(t, err, executor.ErrInvalid, "interrupted")
	// A tar cut short without a read error (no end marker) is refused too.
	_, err = tr.Put(ctx, "newtar", bytes.NewReader(half[:700]), PutOptions{Tar: true})
	wantErr(t, err, executor.ErrInvalid)
	if b, _ := os.ReadFile(filepath.Join(tr.Root, "keep")); string(b) != "old" {
		t.Errorf("keep = %q", b)
	}
	if got := entries(t, tr.Root); !slices.Equal(got, []string{"exact", "keep"}) {
		t.Errorf("root holds %q", got)
	}
	// A cancelled context: nothing written.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = tr.Put(cctx, "cancelled", strings.NewReader("x"), PutOptions{})
	wantErr(t, err, executor.ErrAborted)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestDirectoryVersusFile(t *testing.T) {
	tr := newTree(t)
	ctx := context.Background()
	os.MkdirAll(filepath.Join(tr.Root, "dir/sub"), 0o755)
	os.WriteFile(filepath.Join(tr.Root, "file"), []byte("f"), 0o644)
	_, err := tr.Put(ctx, "dir", strings.NewReader("x"), PutOptions{})
	wantErr(t, err, executor.ErrInvalid, "dir is a directory")
	_, err = tr.Put(ctx, ".", strings.NewReader("x"), PutOptions{})
	wantErr(t, err, executor.ErrInvalid, "is a directory")
	_, err = tr.Put(ctx, "file/x", strings.NewReader("x"), PutOptions{})
	wantErr(t, err, executor.ErrInvalid, "file is not a directory")
	_, err = tr.Put(ctx, "file", bytes.NewReader(mkTar(t, reg("a"))), PutOptions{Tar: true})
	wantErr(t, err, executor.ErrInvalid, "file is not a directory")
	_, err = tr.Put(ctx, "dir", bytes.NewReader(mkTar(t, reg("sub"))), PutOptions{Tar: true})
	wantErr(t, err, executor.ErrInvalid, "dir/sub", "a file where there is a directory")
	_, _, err = get(t, tr, "dir", GetOptions{})
	wantErr(t, err, executor.ErrInvalid, "dir is a directory", "application/x-tar")
	_, _, err = get(t, tr, "missing", GetOptions{})
	wantErr(t, err, executor.ErrNotFound, "missing")
	if got := entries(t, tr.Root); !slices.Equal(got, []string{"dir", "dir/sub", "file"}) {
		t.Errorf("root holds %q", got)
	}
	// A single file as a tar.
	out, _, err := get(t, tr, "file", GetOptions{Tar: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(bytes.NewReader(out)).Next()
	if err != nil || h.Name != "file" || h.Size != 1 {
		t.Errorf("tar of a file: %+v, %v", h, err)
	}
}

// TestNoSpace: a full filesystem is named, and nothing is left.
func TestNoSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := mountTmpfs(dir, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { unmount(dir) })
	tr := Tree{Root: dir, UID: -1, GID: -1}
	_, err := tr.Put(context.Background(), "f", io.LimitReader(rand.NewChaCha8([32]byte{}), 2<<20), PutOptions{})
	wantErr(t, err, ErrNoSpace, dir+"/f", "ENOSPC")
	if got := entries(t, dir); len(got) != 0 {
		t.Errorf("left %q", got)
	}
}

// With files rules (OneLink), a file with other names is not read: the
// rules judge the path asked for, and a hard link's other names (a planted
// "ln .env notenv") cannot be checked (found by an attack review).
// Without rules it is read as any file.
func TestHardLinkNotRead(t *testing.T) {
	tr := newTree(t)
	os.WriteFile(filepath.Join(tr.Root, ".env"), []byte("AWS_SECRET=hunter2\n"), 0o644)
	if err := os.Link(filepath.Join(tr.Root, ".env"), filepath.Join(tr.Root, "notenv")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tr.Root, "plain"), []byte("ok"), 0o644)
	rules := GetOptions{Limits: Limits{NoSymlinks: true, OneLink: true}}
	for _, o := range []GetOptions{rules, {Tar: true, Limits: rules.Limits}} {
		b, _, err := get(t, tr, "notenv", o)
		wantErr(t, err, executor.ErrInvalid, tr.Root+"/notenv has 2 links", "cannot check the other names")
		if len(b) != 0 {
			t.Errorf("tar %v: read %q", o.Tar, b)
		}
	}
	if b, _, err := get(t, tr, "plain", rules); err != nil || string(b) != "ok" {
		t.Errorf("a file of one link: %q, %v", b, err)
	}
	if b, _, err := get(t, tr, "notenv", GetOptions{}); err != nil || !strings.Contains(string(b), "hunter2") {
		t.Errorf("without rules: %q, %v", b, err)
	}
}

// A download under files rules reads what was at the path at the moment
// of its open: a command swapping a directory on the way, or the file
// itself, for a symlink (rename(2), atomic) does not carry the read to
// the link's target (the check-then-open it replaced raced).
func TestDownloadRenameRace(t *testing.T) {
	tr := newTree(t)
	for _, d := range []string{"d", "sec"} {
		os.Mkdir(filepath.Join(tr.Root, d), 0o755)
	}
	os.WriteFile(filepath.Join(tr.Root, "d", "f"), []byte("plain"), 0o644)
	os.WriteFile(filepath.Join(tr.Root, "sec", "f"), []byte("SECRET"), 0o644)
	os.WriteFile(filepath.Join(tr.Root, "g"), []byte("plain"), 0o644)
	os.Symlink("sec", filepath.Join(tr.Root, "dlink"))
	os.Symlink("sec/f", filepath.Join(tr.Root, "glink"))
	// Swap d with a symlink to sec, and g with one to sec/f.
	stop := swapping(tr.Root, [2]string{"d", "dlink"}, [2]string{"g", "glink"})
	o := GetOptions{Limits: Limits{NoSymlinks: true, OneLink: true}}
	var plain, refused int
	for i := 0; i < 4000; i++ {
		b, _, err := get(t, tr, []string{"d/f", "g"}[i%2], o)
		switch {
		case strings.Contains(string(b), "SECRET"):
			stop()
			t.Fatalf("download %d read the link's target: %q", i, b)
		case err == nil:
			plain++
		case errors.Is(err, executor.ErrInvalid):
			// A link met on the way ("goes through the symlink"), or a
			// component caught swapped between its open and the look
			// that names it.
			refused++
		default:
			stop()
			t.Fatalf("download %d: %v", i, err)
		}
	}
	stop()
	if plain == 0 || refused == 0 {
		t.Errorf("%d plain reads, %d refused: the swaps did not interleave with the downloads", plain, refused)
	}
}

// An upload under files rules writes into the directory that was at the
// path at the moment of the open: a directory swapped for a symlink
// (rename(2)) meanwhile does not carry the write to the link's target.
func TestUploadRenameRace(t *testing.T) {
	tr := newTree(t)
	for _, d := range []string{"d", "sec"} {
		os.Mkdir(filepath.Join(tr.Root, d), 0o755)
	}
	os.Symlink("sec", filepath.Join(tr.Root, "dlink"))
	stop := swapping(tr.Root, [2]string{"d", "dlink"})
	o := PutOptions{Limits: Limits{NoSymlinks: true}}
	var written int
	for i := 0; i < 2000; i++ {
		if _, err := tr.Put(context.Background(), "d/f"+strconv.Itoa(i), strings.NewReader("x"), o); err == nil {
			written++
		} else if !errors.Is(err, executor.ErrInvalid) {
			t.Errorf("upload %d: %v", i, err)
		}
	}
	stop()
	if left := entries(t, filepath.Join(tr.Root, "sec")); len(left) != 0 {
		t.Fatalf("%d uploads written through the link: %v…", len(left), left[:min(3, len(left))])
	}
	if written == 0 {
		t.Error("no upload was written: the test raced nothing")
	}
}

// swapping exchanges each pair of names below root (renameat2
// RENAME_EXCHANGE, atomic) as fast as it goes, until stop is called;
// stop returns once the swaps have ended.
func swapping(root string, pairs ...[2]string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, pair := range pairs {
		wg.Go(func() {
			a, b := filepath.Join(root, pair[0]), filepath.Join(root, pair[1])
			for {
				select {
				case <-done:
					return
				default:
				}
				unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
			}
		})
	}
	return func() { close(done); wg.Wait() }
}
