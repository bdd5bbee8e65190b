package workspace_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/agentapi/workspace"
	"github.com/shellbox/shellbox/errdefs"
)

// isRoot reports whether the tests run as root: only root may chown to
// another user, mknod, or read a 0000 file.
var isRoot = os.Geteuid() == 0

// write makes a regular file of data and mode at dir/rel, its parents
// 0755.
func write(t testing.TB, dir, rel, data string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func mkdir(t testing.TB, dir, rel string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func symlink(t testing.TB, dir, target, rel string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// run runs a command in dir, failing the test if it fails.
func run(t testing.TB, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// gitCheckout makes a real git repository at dir/rel: two commits, then
// gc, so .git holds a pack, its index, hooks (0755 samples) and loose refs.
func gitCheckout(t testing.TB, dir, rel string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH")
	}
	repo := mkdir(t, dir, rel, 0o755)
	run(t, repo, "git", "init", "-q", "-b", "main")
	write(t, repo, "README.md", "# a project\n", 0o644)
	write(t, repo, "src/main.go", "package main\n\nfunc main() {}\n", 0o644)
	write(t, repo, "bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
	run(t, repo, "git", "add", "-A")
	run(t, repo, "git", "commit", "-q", "-m", "first")
	write(t, repo, "src/lib.go", "package main\n\nvar x = 1\n", 0o644)
	run(t, repo, "git", "add", "-A")
	run(t, repo, "git", "commit", "-q", "-m", "second")
	run(t, repo, "git", "gc", "-q")
	write(t, repo, "untracked.txt", "not committed\n", 0o644)
	return repo
}

// sparseSize is the apparent size of the tree's sparse file; it holds 8
// bytes of data.
const sparseSize = 64 << 20

// buildTree makes under dir a workspace with every kind of thing Pack
// keeps: a git checkout, a Python venv's shape (absolute and relative
// symlinks), odd modes (0000 as root only: no one else can read it),
// setuid, setgid and sticky, a read-only directory with a file in it, a
// hard-linked file of three names, a sparse file, an empty directory, a
// FIFO, user xattrs where the filesystem has them, a dangling symlink,
// and (as root) entries owned by uid 1234, gid 5678.
func buildTree(t testing.TB, dir string) {
	t.Helper()
	gitCheckout(t, dir, "repo")

	venv := mkdir(t, dir, "venv", 0o755)
	write(t, venv, "pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n", 0o644)
	symlink(t, venv, "/usr/bin/python3", "bin/python3")
	symlink(t, venv, "python3", "bin/python")
	write(t, venv, "bin/activate", "# source me\n", 0o644)
	write(t, venv, "lib/python3.12/site-packages/pkg/__init__.py", "X = 1\n", 0o644)
	symlink(t, venv, "lib", "lib64")
	symlink(t, venv, "../../outside/of/venv", "bin/climbs")

	if isRoot {
		write(t, dir, "odd/secret", "no one reads me\n", 0)
	}
	write(t, dir, "odd/suid", "#!/bin/sh\n", 0o4755)
	mkdir(t, dir, "odd/sgid", 0o2775)
	write(t, dir, "odd/sgid/inherits", "x", 0o640)
	mkdir(t, dir, "odd/tmp", 0o1777)
	mkdir(t, dir, "odd/ro", 0o755)
	write(t, dir, "odd/ro/inside", "in a read-only directory\n", 0o444)
	if err := os.Chmod(filepath.Join(dir, "odd/ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dir, "odd/ro"), 0o755) })

	a := write(t, dir, "links/a.txt", "one inode, three names\n", 0o644)
	for _, n := range []string{"links/b.txt", "links/sub/c.txt"} {
		mkdir(t, dir, filepath.Dir(n), 0o755)
		if err := os.Link(a, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}

	sp := write(t, dir, "sparse.img", "", 0o644)
	f, err := os.OpenFile(sp, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(sparseSize); err == nil {
		_, err = f.WriteAt([]byte("data"), 1<<20)
		if err == nil {
			_, err = f.WriteAt([]byte("tail"), sparseSize-4)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	mkdir(t, dir, "empty", 0o700)
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o640); err != nil {
		t.Fatal(err)
	}
	symlink(t, dir, "does/not/exist", "dangling")
	x := write(t, dir, "xattr.txt", "with a comment\n", 0o644)
	if err := unix.Setxattr(x, "user.comment", []byte("hello\x00binary"), 0); err != nil {
		t.Logf("no user xattrs here (%v): the tree has none", err)
	} else if err := unix.Setxattr(filepath.Join(dir, "empty"), "user.dir", []byte("on a directory"), 0); err != nil {
		t.Fatal(err)
	}

	if isRoot {
		o := write(t, dir, "owned/file", "someone else's\n", 0o640)
		symlink(t, dir, "file", "owned/link")
		for _, p := range []string{o, filepath.Dir(o)} {
			if err := os.Chown(p, 1234, 5678); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Lchown(filepath.Join(dir, "owned/link"), 1234, 5678); err != nil {
			t.Fatal(err)
		}
	}
}

// roundTrip packs src and unpacks it into dst through a pipe, as the
// agent and the server do: neither side holds the stream.
func roundTrip(t testing.TB, src, dst string, lim workspace.Limits) (packed, unpacked workspace.Stats) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		var err error
		packed, err = workspace.Pack(context.Background(), src, pw, lim)
		pw.CloseWithError(err)
		done <- err
	}()
	unpacked, uerr := workspace.Unpack(context.Background(), pr, dst, lim)
	pr.CloseWithError(errors.New("unpack returned"))
	if err := <-done; err != nil {
		t.Fatalf("Pack: %v", err)
	}
	if uerr != nil {
		t.Fatalf("Unpack: %v", uerr)
	}
	return packed, unpacked
}

// emptyDir is a new empty directory, mode 0700. What the test leaves
// in it is removable once the test ends, read-only directories
// included.
func emptyDir(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(q, 0o700)
			}
			return nil
		})
	})
	return p
}

func manifest(t testing.TB, root string) []workspace.Entry {
	t.Helper()
	m, err := workspace.Manifest(root)
	if err != nil {
		t.Fatalf("Manifest(%s): %v", root, err)
	}
	return m
}

func count(m []workspace.Entry, typ string) int {
	n := 0
	for _, e := range m {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func find(m []workspace.Entry, path string) workspace.Entry {
	for _, e := range m {
		if e.Path == path {
			return e
		}
	}
	return workspace.Entry{}
}

// TestRoundTrip packs a tree of every kind and unpacks it: every path,
// type, mode, owner, size, hash, target, link group, mtime and xattr is
// as it was, the sparse file is sparse again, and git still works in the
// copy.
func TestRoundTrip(t *testing.T) {
	src := emptyDir(t, "src")
	buildTree(t, src)
	before := manifest(t, src)
	dst := emptyDir(t, "dst")
	packed, unpacked := roundTrip(t, src, dst, workspace.Limits{})
	after := manifest(t, dst)
	if d := workspace.Diff(before, after); len(d) > 0 {
		t.Errorf("the copy differs:\n%s", strings.Join(d, "\n"))
	}

	if packed.Entries != len(before) || unpacked.Entries != packed.Entries {
		t.Errorf("entries: packed %d, unpacked %d, the tree has %d", packed.Entries, unpacked.Entries, len(before))
	}
	if packed.HardLinks != 2 || unpacked.HardLinks != 2 || packed.Fifos != 1 || unpacked.Fifos != 1 {
		t.Errorf("hard links %d/%d, fifos %d/%d: want 2 and 1", packed.HardLinks, unpacked.HardLinks, packed.Fifos, unpacked.Fifos)
	}
	if packed.Symlinks != count(before, workspace.TypeSymlink) || packed.Dirs != count(before, workspace.TypeDir) {
		t.Errorf("packed %+v; the tree has %d symlinks, %d directories", packed, count(before, workspace.TypeSymlink), count(before, workspace.TypeDir))
	}
	if packed.Bytes != unpacked.Bytes || packed.Bytes < sparseSize {
		t.Errorf("bytes: packed %d, unpacked %d", packed.Bytes, unpacked.Bytes)
	}
	if packed.Holes < sparseSize-(1<<20) || unpacked.Holes < sparseSize-(1<<20) {
		t.Errorf("holes: packed %d, unpacked %d, want about %d", packed.Holes, unpacked.Holes, sparseSize)
	}
	if packed.Stream != unpacked.Stream || packed.Stream > 4<<20 {
		t.Errorf("stream: packed %d bytes, unpacked %d: want the same, and small", packed.Stream, unpacked.Stream)
	}
	if x := find(before, "xattr.txt"); len(x.Xattrs) > 0 && (packed.Xattrs != 2 || unpacked.Xattrs != 2 || unpacked.XattrsSkipped != 0) {
		t.Errorf("xattrs: packed %d, unpacked %d, skipped %d; want 2, 2, 0", packed.Xattrs, unpacked.Xattrs, unpacked.XattrsSkipped)
	}

	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, "sparse.img"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != sparseSize || st.Blocks*512 > 256<<10 {
		t.Errorf("sparse.img after: %d bytes in %d blocks of 512: want %d in a few", st.Size, st.Blocks, sparseSize)
	}

	if isRoot {
		if unpacked.OwnersKept != 0 {
			t.Errorf("as root, %d owners were not restored", unpacked.OwnersKept)
		}
		if e := find(after, "owned/link"); e.UID != 1234 || e.GID != 5678 {
			t.Errorf("owned/link: %d:%d, want 1234:5678", e.UID, e.GID)
		}
	} else {
		t.Log("not root: the owners of this tree are the test's own; the chown of another's is tested as root only")
	}

	repo := filepath.Join(dst, "repo")
	if out := run(t, repo, "git", "status", "--porcelain"); out != "?? untracked.txt\n" {
		t.Errorf("git status in the copy:\n%s", out)
	}
	run(t, repo, "git", "fsck", "--no-progress", "--strict")
	if out := run(t, repo, "git", "log", "--format=%s"); out != "second\nfirst\n" {
		t.Errorf("git log in the copy: %q", out)
	}
}

// TestPackIsDeterministic: the same tree packs to the same bytes.
func TestPackIsDeterministic(t *testing.T) {
	src := emptyDir(t, "src")
	write(t, src, "b", "b", 0o644)
	write(t, src, "a/z", "z", 0o600)
	write(t, src, "a/y", "y", 0o600)
	symlink(t, src, "a", "c")
	var one, two bytes.Buffer
	for _, b := range []*bytes.Buffer{&one, &two} {
		if _, err := workspace.Pack(context.Background(), src, b, workspace.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Error("two packs of one tree differ")
	}
}

// TestPackSkipsSocketsAndDevices: a socket (and, as root, a device node)
// is left out and counted; everything else is there.
func TestPackSkipsSocketsAndDevices(t *testing.T) {
	dir, err := os.MkdirTemp("", "ws") // short: a socket's path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	write(t, dir, "kept", "kept", 0o644)
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	devices := 0
	if isRoot {
		if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		devices = 1
	}
	dst := emptyDir(t, "dst")
	packed, _ := roundTrip(t, dir, dst, workspace.Limits{})
	if packed.Sockets != 1 || packed.Devices != devices {
		t.Errorf("skipped %d sockets, %d devices; want 1, %d", packed.Sockets, packed.Devices, devices)
	}
	d := workspace.Diff(manifest(t, dir), manifest(t, dst))
	want := []string{"sock: socket before, missing after"}
	if devices == 1 {
		want = []string{"null: device before, missing after", want[0]}
	}
	if strings.Join(d, "\n") != strings.Join(want, "\n") {
		t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(d, "\n"), strings.Join(want, "\n"))
	}
}

// TestPackLimits: over the entries or the bytes (apparent: a sparse
// file's holes count) is ErrTooLarge, naming the entry and the limit.
func TestPackLimits(t *testing.T) {
	src := emptyDir(t, "src")
	write(t, src, "a", "aaaa", 0o644)
	f, err := os.Create(filepath.Join(src, "b.sparse"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(1 << 40)
	f.Close()
	_, err = workspace.Pack(context.Background(), src, io.Discard, workspace.Limits{MaxEntries: 2})
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "b.sparse") || !strings.Contains(err.Error(), "more than 2 entries") {
		t.Errorf("entries: %v", err)
	}
	_, err = workspace.Pack(context.Background(), src, io.Discard, workspace.Limits{MaxBytes: 1 << 30})
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "b.sparse") || !strings.Contains(err.Error(), "1073741824 bytes") {
		t.Errorf("bytes: %v", err)
	}
}

// TestPackFailureIsRefused: what a failed pack wrote is a stream cut
// short, which Unpack refuses.
func TestPackFailureIsRefused(t *testing.T) {
	src := emptyDir(t, "src")
	rnd := rand.NewChaCha8([32]byte{1})
	for _, n := range []string{"a", "b", "c", "d"} {
		data := make([]byte, 1<<20) // incompressible: the encoder writes as it goes
		rnd.Read(data)
		write(t, src, n, string(data), 0o644)
	}
	var b bytes.Buffer
	if _, err := workspace.Pack(context.Background(), src, &b, workspace.Limits{MaxEntries: 4}); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("Pack: %v", err)
	}
	if b.Len() < 1<<20 {
		t.Fatalf("the failed pack wrote %d bytes: want its first files'", b.Len())
	}
	_, err := workspace.Unpack(context.Background(), &b, emptyDir(t, "dst"), workspace.Limits{})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "the stream is cut") {
		t.Errorf("Unpack of a failed pack's stream: %v", err)
	}
}

// TestPackUnreadable: a file its packer may not read fails the pack,
// naming it (as root there is none: root reads a 0000 file, and the round
// trip has one).
func TestPackUnreadable(t *testing.T) {
	if isRoot {
		t.Skip("root reads a 0000 file; TestRoundTrip packs one")
	}
	src := emptyDir(t, "src")
	write(t, src, "secret", "x", 0)
	_, err := workspace.Pack(context.Background(), src, io.Discard, workspace.Limits{})
	if err == nil || !strings.Contains(err.Error(), "secret") || !errors.Is(err, os.ErrPermission) {
		t.Errorf("Pack of a 0000 file: %v", err)
	}
}

// TestPackCancelled: a cancelled context ends a pack with ErrAborted.
func TestPackCancelled(t *testing.T) {
	src := emptyDir(t, "src")
	write(t, src, "a", "a", 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := workspace.Pack(ctx, src, io.Discard, workspace.Limits{}); !errors.Is(err, errdefs.ErrAborted) {
		t.Errorf("Pack under a cancelled context: %v", err)
	}
}

// TestUnpackIntoNonEmpty: Unpack merges nothing.
func TestUnpackIntoNonEmpty(t *testing.T) {
	src := emptyDir(t, "src")
	write(t, src, "a", "a", 0o644)
	var b bytes.Buffer
	if _, err := workspace.Pack(context.Background(), src, &b, workspace.Limits{}); err != nil {
		t.Fatal(err)
	}
	dst := emptyDir(t, "dst")
	write(t, dst, "there", "", 0o644)
	_, err := workspace.Unpack(context.Background(), &b, dst, workspace.Limits{})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Unpack into a directory that is not empty: %v", err)
	}
}

// pack packs src into memory.
func pack(t testing.TB, src string) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := workspace.Pack(context.Background(), src, &b, workspace.Limits{}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// leftovers lists the entries of root an import may leave.
func leftovers(t testing.TB, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".shellbox-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// oldWorkspace is a workspace with content of its own, a read-only
// directory among it.
func oldWorkspace(t testing.TB) string {
	t.Helper()
	ws := emptyDir(t, "ws")
	write(t, ws, "old.txt", "old\n", 0o644)
	write(t, ws, "olddir/f", "old\n", 0o444)
	if err := os.Chmod(filepath.Join(ws, "olddir"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(ws, "olddir"), 0o755) })
	return ws
}

// TestImportSwaps: an import replaces the workspace's whole content, the
// root's own mode and mtime included, and leaves nothing behind.
func TestImportSwaps(t *testing.T) {
	src := emptyDir(t, "src")
	buildTree(t, src)
	if err := os.Chmod(src, 0o751); err != nil {
		t.Fatal(err)
	}
	ws := oldWorkspace(t)
	st, err := workspace.Import(context.Background(), ws, bytes.NewReader(pack(t, src)), workspace.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if d := workspace.Diff(manifest(t, src), manifest(t, ws)); len(d) > 0 {
		t.Errorf("the workspace differs from the tree imported:\n%s", strings.Join(d, "\n"))
	}
	if l := leftovers(t, ws); len(l) > 0 {
		t.Errorf("left behind: %q", l)
	}
	if st.Entries == 0 || st.Files == 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestImportKeepsOldOnFailure: a stream that is cut, corrupt or too big
// leaves the workspace exactly as it was, and nothing behind.
func TestImportKeepsOldOnFailure(t *testing.T) {
	src := emptyDir(t, "src")
	write(t, src, "new.txt", strings.Repeat("new\n", 10000), 0o644)
	write(t, src, "more/new.txt", "new\n", 0o644)
	stream := pack(t, src)
	corrupt := bytes.Clone(stream)
	corrupt[len(corrupt)-2] ^= 0xff // in the frame's checksum
	cases := []struct {
		name   string
		stream []byte
		lim    workspace.Limits
		class  error
		want   string
	}{
		{"cut", stream[:len(stream)-16], workspace.Limits{}, errdefs.ErrInvalid, "cut"},
		{"corrupt", corrupt, workspace.Limits{}, errdefs.ErrInvalid, "corrupt"},
		{"too big", stream, workspace.Limits{MaxBytes: 1000}, errdefs.ErrNoSpace, "limit of 1000 bytes"},
		{"too many", stream, workspace.Limits{MaxEntries: 2}, errdefs.ErrTooLarge, "more than 2 entries"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := oldWorkspace(t)
			before := manifest(t, ws)
			_, err := workspace.Import(context.Background(), ws, bytes.NewReader(c.stream), c.lim)
			if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Import: %v; want %v saying %q", err, c.class, c.want)
			}
			if d := workspace.Diff(before, manifest(t, ws)); len(d) > 0 {
				t.Errorf("the workspace changed:\n%s", strings.Join(d, "\n"))
			}
			if l := leftovers(t, ws); len(l) > 0 {
				t.Errorf("left behind: %q", l)
			}
		})
	}
}

// TestExportSweepsLeftovers: what an interrupted import left (a scratch
// with a read-only directory in it) is removed, not exported; a name of
// the session's that merely looks alike stays.
func TestExportSweepsLeftovers(t *testing.T) {
	ws := emptyDir(t, "ws")
	write(t, ws, "kept", "kept", 0o644)
	write(t, ws, ".shellbox-import-notes", "the session's own", 0o644)
	write(t, ws, ".shellbox-import-0123456789abcdef/ro/f", "partial", 0o444)
	if err := os.Chmod(filepath.Join(ws, ".shellbox-import-0123456789abcdef/ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	mkdir(t, ws, ".shellbox-replaced-0123456789abcdef/old", 0o755)
	var b bytes.Buffer
	st, err := workspace.Export(context.Background(), ws, &b, workspace.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 3 {
		t.Errorf("exported %d entries, want the root, kept and .shellbox-import-notes", st.Entries)
	}
	if l := leftovers(t, ws); strings.Join(l, " ") != ".shellbox-import-notes" {
		t.Errorf("left behind: %q", l)
	}
}

// TestDiff: Diff names what changed, path by path.
func TestDiff(t *testing.T) {
	dir := emptyDir(t, "d")
	write(t, dir, "a", "a", 0o644)
	write(t, dir, "b", "b", 0o644)
	write(t, dir, "gone", "", 0o644)
	symlink(t, dir, "a", "l")
	before := manifest(t, dir)
	os.Chmod(filepath.Join(dir, "a"), 0o600)
	os.WriteFile(filepath.Join(dir, "b"), []byte("B"), 0o644)
	os.Remove(filepath.Join(dir, "gone"))
	os.Remove(filepath.Join(dir, "l"))
	os.Symlink("b", filepath.Join(dir, "l"))
	os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "new"))
	d := workspace.Diff(before, manifest(t, dir))
	got := strings.Join(d, "\n")
	for _, want := range []string{"a: mode 0644 before, 0600 after", "a: hard links none before, a after", "b: sha256 ", "gone: file before, missing after",
		"l: target a before, b after", "new: missing before, file after"} {
		if !strings.Contains(got, want) {
			t.Errorf("diff lacks %q:\n%s", want, got)
		}
	}
}

// TestPackWritesOnlyWhatUnpackTakes: at the bounds of the tree's shape,
// what Pack writes Unpack restores, or Pack refuses it: an export that
// succeeds is a snapshot a resume can restore.
func TestPackWritesOnlyWhatUnpackTakes(t *testing.T) {
	deep := strings.TrimSuffix(strings.Repeat("a/", workspace.MaxDepth), "/") // MaxDepth levels below the root
	for _, tc := range []struct {
		name  string
		build func(t testing.TB, src string)
	}{
		{"a directory MaxDepth deep", func(t testing.TB, src string) { mkdir(t, src, deep, 0o755) }},
		{"a file in it", func(t testing.TB, src string) {
			mkdir(t, src, deep, 0o755)
			write(t, src, deep+"/f", "f", 0o644)
		}},
		{"a symlink in it", func(t testing.TB, src string) {
			mkdir(t, src, deep, 0o755)
			symlink(t, src, "x", deep+"/l")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := emptyDir(t, "src")
			tc.build(t, src)
			var b bytes.Buffer
			_, err := workspace.Pack(context.Background(), src, &b, workspace.Limits{})
			if err != nil {
				if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "deeper than") {
					t.Fatalf("Pack: %v", err)
				}
				return
			}
			if _, err := workspace.Unpack(context.Background(), &b, emptyDir(t, "dst"), workspace.Limits{}); err != nil {
				t.Fatalf("Pack wrote a stream Unpack refuses: %v", err)
			}
		})
	}
}

// TestPackCancelledInAHole: a context that ends while Pack writes a
// file's holes (zeros it never reads, up to MaxBytes of them) ends the
// pack at once.
func TestPackCancelledInAHole(t *testing.T) {
	src := emptyDir(t, "src")
	f, err := os.Create(filepath.Join(src, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(1 << 40); err != nil {
		t.Skipf("no sparse file of 1 TiB here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = workspace.Pack(ctx, src, io.Discard, workspace.Limits{MaxBytes: 1 << 41})
	if !errors.Is(err, errdefs.ErrAborted) {
		t.Errorf("Pack: %v; want ErrAborted", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Pack took %v to see its context end", d)
	}
}

// TestPackLimitsDoNotOverflow: a sparse file of the largest size a
// filesystem allows (tmpfs: 2^63-1 bytes), after another file, is refused
// by MaxBytes at once, not packed as zeros for ever.
func TestPackLimitsDoNotOverflow(t *testing.T) {
	src, err := os.MkdirTemp("/dev/shm", "pack-overflow-")
	if err != nil {
		t.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(src) })
	write(t, src, "a", "x", 0o644)
	f, err := os.Create(filepath.Join(src, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(math.MaxInt64); err != nil {
		t.Skipf("this filesystem holds no file of 2^63-1 bytes: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = workspace.Pack(ctx, src, io.Discard, workspace.Limits{MaxBytes: 1 << 20})
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "past the limit") {
		t.Errorf("Pack: %v; want ErrTooLarge, at once", err)
	}
}
