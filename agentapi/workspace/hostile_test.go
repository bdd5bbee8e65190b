package workspace_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/shellbox/shellbox/agentapi/workspace"
	"github.com/shellbox/shellbox/errdefs"
)

// entry is one entry of a crafted stream.
type entry struct {
	hdr  tar.Header
	data string
}

func dir(name string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

func file(name, data string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}, data: data}
}

func symlinkEntry(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func hardlink(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

// rawTar is a tar of entries, PAX, with its end-of-archive marker unless
// cut.
func rawTar(t testing.TB, cut bool, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag != tar.TypeXGlobalHeader {
			h.Format = tar.FormatPAX
			if h.ModTime.IsZero() {
				h.ModTime = time.Unix(1700000000, 0)
			}
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Size > int64(len(e.data)) {
			// A header that claims more than the stream has: the stream
			// ends here.
			tw.Flush()
			return b.Bytes()
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if cut {
		tw.Flush()
		return b.Bytes()
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// compress is b as one zstd frame.
func compress(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func stream(t testing.TB, entries ...entry) []byte {
	t.Helper()
	return compress(t, rawTar(t, false, entries...))
}

// arena is a directory holding the root an Unpack fills and, beside it,
// a directory "outside" with one file: anything an escape would touch.
type arena struct {
	base, root string
}

func newArena(t testing.TB) arena {
	t.Helper()
	base := t.TempDir()
	a := arena{base: base, root: filepath.Join(base, "root")}
	for _, d := range []string{a.root, filepath.Join(base, "outside")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "outside", "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	return a
}

// untouched checks that nothing but root changed in the arena: the base
// holds root and outside, outside holds keep, as it was.
func (a arena) untouched(t testing.TB) {
	t.Helper()
	var got []string
	err := filepath.WalkDir(a.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == a.root {
			return filepath.SkipDir
		}
		got = append(got, strings.TrimPrefix(p, a.base))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != " /outside /outside/keep" {
		t.Fatalf("outside the root: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(a.base, "outside", "keep")); err != nil || string(b) != "keep" {
		t.Fatalf("outside/keep: %q, %v", b, err)
	}
}

// hostile is a stream Unpack must refuse, with its error.
type hostile struct {
	name   string
	stream func(t testing.TB, a arena) []byte
	lim    workspace.Limits
	class  error
	want   string
}

func hostiles() []hostile {
	s := func(entries ...entry) func(testing.TB, arena) []byte {
		return func(t testing.TB, _ arena) []byte { return stream(t, entries...) }
	}
	long := strings.Repeat("d/", 2100) + "f"
	return []hostile{
		{"dotdot", s(dir("./"), file("../outside/x", "x")), workspace.Limits{}, errdefs.ErrInvalid, `entry "../outside/x": not a canonical relative name`},
		{"dotdot inside", s(dir("./"), dir("a/"), file("a/../../outside/x", "x")), workspace.Limits{}, errdefs.ErrInvalid, `entry "a/../../outside/x": not a canonical relative name`},
		{"absolute", func(t testing.TB, a arena) []byte {
			return stream(t, dir("./"), file(filepath.Join(a.base, "outside", "abs"), "x"))
		}, workspace.Limits{}, errdefs.ErrInvalid, "not a canonical relative name"},
		{"through a symlink out", func(t testing.TB, a arena) []byte {
			return stream(t, dir("./"), symlinkEntry("link", filepath.Join(a.base, "outside")), file("link/x", "x"))
		}, workspace.Limits{}, errdefs.ErrInvalid, `entry "link/x": its directory link is not a directory the stream made and is filling`},
		{"through a symlink up", s(dir("./"), symlinkEntry("up", ".."), file("up/outside/x", "x")), workspace.Limits{}, errdefs.ErrInvalid, `entry "up/outside/x": its directory up/outside is not a directory the stream made and is filling`},
		{"through a symlink inside", s(dir("./"), dir("d/"), symlinkEntry("l", "d"), file("l/x", "x")), workspace.Limits{}, errdefs.ErrInvalid, `entry "l/x": its directory l is not a directory the stream made and is filling`},
		{"a directory again", s(dir("./"), dir("d/"), dir("e/"), file("d/x", "x")), workspace.Limits{}, errdefs.ErrInvalid, `entry "d/x": its directory d is not a directory the stream made and is filling`},
		{"hard link out", s(dir("./"), hardlink("h", "../outside/keep")), workspace.Limits{}, errdefs.ErrInvalid, `entry "h": hard link to "../outside/keep": not a canonical relative name`},
		{"hard link absolute", func(t testing.TB, a arena) []byte {
			return stream(t, dir("./"), hardlink("h", filepath.Join(a.base, "outside", "keep")))
		}, workspace.Limits{}, errdefs.ErrInvalid, "not a canonical relative name"},
		{"hard link through a symlink", func(t testing.TB, a arena) []byte {
			return stream(t, dir("./"), symlinkEntry("o", filepath.Join(a.base, "outside")), hardlink("h", "o/keep"))
		}, workspace.Limits{}, errdefs.ErrInvalid, `entry "h": hard link to "o/keep": o is not a directory the stream made`},
		{"hard link to a symlink", func(t testing.TB, a arena) []byte {
			return stream(t, dir("./"), symlinkEntry("o", filepath.Join(a.base, "outside", "keep")), hardlink("h", "o"))
		}, workspace.Limits{}, errdefs.ErrInvalid, `entry "h": hard link to "o": not a regular file the stream made before it`},
		{"hard link ahead", s(dir("./"), hardlink("h", "later"), file("later", "x")), workspace.Limits{}, errdefs.ErrInvalid, `entry "h": hard link to "later": not a regular file the stream made before it`},
		{"device", s(dir("./"), entry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3, Mode: 0o666}}), workspace.Limits{}, errdefs.ErrInvalid, `entry "null": type '3' (a character device): not one a workspace stream holds`},
		{"global header", s(dir("./"), entry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "g", PAXRecords: map[string]string{"comment": "x"}}}), workspace.Limits{}, errdefs.ErrInvalid, "not one a workspace stream holds"},
		{"security xattr", s(dir("./"), entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o755,
			PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}}}), workspace.Limits{}, errdefs.ErrInvalid, `entry "f": xattr security.capability: only user. xattrs are restored`},
		{"unknown record", s(dir("./"), entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644,
			PAXRecords: map[string]string{"LIBARCHIVE.creationtime": "1"}}}), workspace.Limits{}, errdefs.ErrInvalid, `entry "f": PAX record LIBARCHIVE.creationtime: not one a workspace stream holds`},
		{"no root", s(file("f", "x")), workspace.Limits{}, errdefs.ErrInvalid, `entry "f": the stream does not start with its root "./"`},
		{"twice", s(dir("./"), file("f", "x"), file("f", "y")), workspace.Limits{}, errdefs.ErrInvalid, `entry "f": the name is there already`},
		{"too long", s(dir("./"), file(long, "x")), workspace.Limits{}, errdefs.ErrInvalid, "a name of 4201 bytes, longer than PATH_MAX (4096)"},
		{"odd mode", s(dir("./"), entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o20644}}), workspace.Limits{}, errdefs.ErrInvalid, `entry "f": mode 020644: only the permission bits`},
		{"bytes", s(dir("./"), file("a", "12345678"), file("b", strings.Repeat("x", 1000))), workspace.Limits{MaxBytes: 1000}, errdefs.ErrNoSpace,
			`entry "b" (1000 bytes) takes the workspace past its limit of 1000 bytes`},
		{"huge sparse", s(dir("./"), entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "big", Mode: 0o644, Size: 1 << 40}}), workspace.Limits{}, errdefs.ErrNoSpace,
			`entry "big" (1099511627776 bytes) takes the workspace past its limit`},
		{"bytes overflowing", s(dir("./"), file("a", "x"), entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "big", Mode: 0o644, Size: math.MaxInt64}}), workspace.Limits{}, errdefs.ErrNoSpace,
			`entry "big" (9223372036854775807 bytes) takes the workspace past its limit`},
		{"entries", s(dir("./"), file("a", ""), file("b", ""), file("c", "")), workspace.Limits{MaxEntries: 3}, errdefs.ErrTooLarge, `entry "c": more than 3 entries`},
		{"no end marker", func(t testing.TB, _ arena) []byte {
			return compress(t, rawTar(t, true, dir("./"), file("a", "x")))
		}, workspace.Limits{}, errdefs.ErrInvalid, "the stream is cut: the tar ends without its end-of-archive marker"},
		{"trailing data", func(t testing.TB, _ arena) []byte {
			return compress(t, append(rawTar(t, false, dir("./"), file("a", "x")), "more"...))
		}, workspace.Limits{}, errdefs.ErrInvalid, "data after the end of the archive"},
		{"cut zstd", func(t testing.TB, _ arena) []byte {
			b := stream(t, dir("./"), file("a", strings.Repeat("abc", 50000)))
			return b[:len(b)/2]
		}, workspace.Limits{}, errdefs.ErrInvalid, "the stream is cut"},
		{"corrupt zstd", func(t testing.TB, _ arena) []byte {
			b := stream(t, dir("./"), file("a", strings.Repeat("abcdefgh", 50000)))
			b[len(b)-2] ^= 0x55 // in the frame's checksum
			return b
		}, workspace.Limits{}, errdefs.ErrInvalid, "the stream is corrupt"},
		{"not zstd", func(t testing.TB, _ arena) []byte {
			return rawTar(t, false, dir("./"), file("a", "x"))
		}, workspace.Limits{}, errdefs.ErrInvalid, "the stream is corrupt"},
	}
}

// TestUnpackHostile: each hostile stream is refused with a specific error
// of its class, and nothing is created outside the root.
func TestUnpackHostile(t *testing.T) {
	for _, h := range hostiles() {
		t.Run(h.name, func(t *testing.T) {
			a := newArena(t)
			_, err := workspace.Unpack(context.Background(), bytes.NewReader(h.stream(t, a)), a.root, h.lim)
			t.Log(err)
			if !errors.Is(err, h.class) || !strings.Contains(err.Error(), h.want) {
				t.Errorf("Unpack: %v\nwant %v saying %q", err, h.class, h.want)
			}
			a.untouched(t)
		})
	}
}

// TestUnpackAllowsWhatPackWrites: links whose targets leave the root
// (absolute, climbing) are kept as text, and nothing is written through
// them.
func TestUnpackAllowsWhatPackWrites(t *testing.T) {
	a := newArena(t)
	s := stream(t, dir("./"), symlinkEntry("abs", filepath.Join(a.base, "outside", "keep")), symlinkEntry("up", "../outside"),
		dir("d/"), file("d/f", "f"), hardlink("d/g", "d/f"), hardlink("h", "d/f"))
	st, err := workspace.Unpack(context.Background(), bytes.NewReader(s), a.root, workspace.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Symlinks != 2 || st.HardLinks != 2 || st.Files != 1 {
		t.Errorf("stats %+v", st)
	}
	if l, err := os.Readlink(filepath.Join(a.root, "up")); err != nil || l != "../outside" {
		t.Errorf("up -> %q, %v", l, err)
	}
	a.untouched(t)
}

// FuzzUnpack: whatever the stream, nothing is created or changed outside
// the root. An input that is not a zstd frame is taken as a tar and
// compressed first, so the fuzzer explores tar structure, not zstd's.
func FuzzUnpack(f *testing.F) {
	for _, h := range hostiles() {
		a := newArena(f)
		b := h.stream(f, a)
		f.Add(b)
		if d, err := zstd.NewReader(bytes.NewReader(b)); err == nil {
			var raw bytes.Buffer
			if _, err := raw.ReadFrom(d); err == nil {
				f.Add(raw.Bytes())
			}
			d.Close()
		}
	}
	f.Add(rawTar(f, false, dir("./"), dir("a/"), file("a/f", "x"), symlinkEntry("l", "a"), hardlink("h", "a/f"),
		entry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "p", Mode: 0o600}}))
	magic := []byte{0x28, 0xb5, 0x2f, 0xfd}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !bytes.HasPrefix(in, magic) {
			in = compress(t, in)
		}
		a := newArena(t)
		workspace.Unpack(context.Background(), bytes.NewReader(in), a.root, workspace.Limits{MaxBytes: 1 << 20, MaxEntries: 1000})
		a.untouched(t)
	})
}

// endProbe reads r and, at r's end, measures the heap still in use: what
// Unpack holds with every directory of the stream still open.
type endProbe struct {
	r    *bytes.Reader
	heap uint64
}

func (p *endProbe) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if p.r.Len() == 0 && p.heap == 0 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		p.heap = ms.HeapAlloc
	}
	return n, err
}

// TestUnpackHoldsNoHeadersOfOpenDirectories: a directory's header may
// carry a PAX header of up to 1 MiB (a long uname, xattrs); Unpack keeps
// of an open directory only what it sets when it leaves it, so a deep
// stream of such headers, a few KiB compressed, cannot hold MaxDepth MiB.
func TestUnpackHoldsNoHeadersOfOpenDirectories(t *testing.T) {
	const levels = 64
	entries := []entry{dir("./")}
	name := ""
	for i := range levels {
		name += "d/"
		e := dir(name)
		e.hdr.Uname = strings.Repeat(string(rune('a'+i%26)), 900<<10)
		e.hdr.PAXRecords = map[string]string{"path": name} // the name a part of the PAX header
		entries = append(entries, e)
	}
	s := stream(t, entries...)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	p := &endProbe{r: bytes.NewReader(s)}
	if _, err := workspace.Unpack(context.Background(), p, t.TempDir(), workspace.Limits{}); err != nil {
		t.Fatal(err)
	}
	if p.heap > before && p.heap-before > 32<<20 {
		t.Errorf("Unpack held %d MiB with %d directories open", (p.heap-before)>>20, levels)
	}
}
