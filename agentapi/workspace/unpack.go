package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/errdefs"
)

// Unpack restores the workspace stream r into root, which must be an
// empty directory, and returns what it restored. It trusts nothing in the
// stream (see the package doc for what it refuses and how nothing leaves
// root), chowns where the process may, and sets each directory's mode,
// owner and mtime when the stream leaves it, root's last. r is read to its
// end: the frame's checksum is checked there.
//
// On an error root holds part of the stream, as the process left it; the
// caller restores into a scratch directory and removes it (Import does).
//
// Errors: a hostile, cut or corrupt stream, or a root that is not empty, is
// errdefs.ErrInvalid, naming the entry and why; past lim.MaxEntries
// errdefs.ErrTooLarge; past lim.MaxBytes, or a full filesystem,
// errdefs.ErrNoSpace; a missing root errdefs.ErrNotFound; ctx ending
// errdefs.ErrAborted. A failure of r itself keeps its class, or is
// errdefs.ErrInvalid (the stream was cut).
func Unpack(ctx context.Context, r io.Reader, root string, lim Limits) (Stats, error) {
	rt, err := os.OpenRoot(root)
	if err != nil {
		return Stats{}, rootError("restore into", root, err)
	}
	defer rt.Close()
	return unpack(ctx, r, rt, root, lim)
}

// unpack is Unpack into the open directory rt; root names it in messages.
func unpack(ctx context.Context, r io.Reader, rt *os.Root, root string, lim Limits) (Stats, error) {
	lim = withDefaults(lim)
	if err := empty(rt, root); err != nil {
		return Stats{}, err
	}
	src := &countReader{r: r}
	dec, err := newDecoder(src)
	if err != nil {
		return Stats{}, fmt.Errorf("workspace: restore into %s: %w", root, err)
	}
	defer dec.Close()
	u := &unpacker{ctx: ctx, root: root, lim: lim, src: src, in: &countReader{r: dec}, buf: make([]byte, copyBuffer),
		stack: []*frame{{name: ".", root: rt, borrowed: true}}}
	u.tr = tar.NewReader(u.in)
	err = u.run()
	for _, f := range u.stack {
		f.close()
	}
	u.st.Stream = src.n
	return u.st, err
}

// empty refuses a root that holds anything.
func empty(rt *os.Root, root string) error {
	d, err := rt.Open(".")
	if err != nil {
		return rootError("restore into", root, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if len(names) > 0 {
		return errdefs.Errorf(errdefs.ErrInvalid, "workspace: restore into %s: not empty (it holds %s): a stream is restored only into an empty directory", root, shown(names[0]))
	}
	if err != nil && err != io.EOF {
		return rootError("restore into", root, err)
	}
	return nil
}

// frame is a directory the stream is filling: the root, and the
// directories it made that hold the entry being restored.
type frame struct {
	name     string // relative to the root, "." for the root
	root     *os.Root
	borrowed bool     // root is the caller's: not closed here
	dir      *os.File // "." of root, opened when first needed
	// The directory's recorded mode, owner and mtime, applied when the
	// stream leaves it (kept, see kept).
	hdr *tar.Header
}

// kept is what a frame keeps of its directory's header: what pop sets,
// and the name for messages. Not the header: its PAX records (xattrs,
// uname) are up to 1 MiB, and MaxDepth directories are open at once.
func kept(hdr *tar.Header) *tar.Header {
	return &tar.Header{Name: strings.Clone(hdr.Name), Mode: hdr.Mode, Uid: hdr.Uid, Gid: hdr.Gid, ModTime: hdr.ModTime}
}

// fd is a descriptor of the directory, for the calls os.Root has no
// method for.
func (f *frame) fd() (int, error) {
	if f.dir == nil {
		d, err := f.root.Open(".")
		if err != nil {
			return -1, err
		}
		f.dir = d
	}
	return int(f.dir.Fd()), nil
}

func (f *frame) close() {
	if f.dir != nil {
		f.dir.Close()
	}
	if !f.borrowed {
		f.root.Close()
	}
}

// unpacker is one Unpack in progress.
type unpacker struct {
	ctx   context.Context
	root  string
	lim   Limits
	src   *countReader // the stream as given
	in    *countReader // the tar, decompressed
	tr    *tar.Reader
	buf   []byte
	stack []*frame
	st    Stats
}

// run restores every entry, checks the end of the stream, then finishes
// the directories still open, the root last.
func (u *unpacker) run() error {
	var end int64 // where the last entry's data ends in the tar
	for {
		if err := checkContext(u.ctx, "restore into", u.root); err != nil {
			return err
		}
		hdr, err := u.tr.Next()
		if err == io.EOF {
			// archive/tar says EOF also where the stream stops at an
			// entry's end: without the two zero blocks of the end of
			// archive, it was cut.
			if u.in.n-end < 2*512 {
				return u.invalid("the stream is cut: the tar ends without its end-of-archive marker")
			}
			break
		}
		if err != nil {
			return u.streamError(err)
		}
		end = u.in.n + (hdr.Size+511)&^511
		u.st.Entries++
		if u.st.Entries > u.lim.MaxEntries {
			return errdefs.Errorf(errdefs.ErrTooLarge, "workspace: restore into %s: entry %q: more than %d entries in the stream (the limit)", u.root, shown(hdr.Name), u.lim.MaxEntries)
		}
		if err := u.entry(hdr); err != nil {
			return err
		}
	}
	if u.st.Entries == 0 {
		return u.invalid("the stream holds no entries, not even its root")
	}
	if err := u.trailer(); err != nil {
		return err
	}
	for len(u.stack) > 0 {
		if err := u.pop(); err != nil {
			return err
		}
	}
	return nil
}

// maxTrailer bounds the zeros a stream may carry after its end of archive
// (tar(1) pads to its blocking factor, 10 KiB).
const maxTrailer = 1 << 20

// trailer reads the stream to its end, which checks the frame's checksum:
// only zeros, a few, may follow the end of the archive.
func (u *unpacker) trailer() error {
	var extra int64
	for {
		n, err := u.in.Read(u.buf)
		extra += int64(n)
		if n > 0 && !allZero(u.buf[:n]) || extra > maxTrailer {
			return u.invalid("data after the end of the archive")
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return u.streamError(err)
		}
	}
}

// allZero reports a slice of zeros.
func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

func (u *unpacker) invalid(why string) error {
	return errdefs.Errorf(errdefs.ErrInvalid, "workspace: restore into %s: %s", u.root, why)
}

// bad is an entry refused.
func (u *unpacker) bad(name, why string) error {
	return errdefs.Errorf(errdefs.ErrInvalid, "workspace: restore into %s: entry %q: %s", u.root, shown(name), why)
}

// classes are the errdefs classes an error of the stream's reader keeps.
var classes = []error{errdefs.ErrInvalid, errdefs.ErrNotFound, errdefs.ErrUnavailable, errdefs.ErrAborted,
	errdefs.ErrLimit, errdefs.ErrTooLarge, errdefs.ErrNoSpace}

// streamError classes a failure to read the stream: its reader's own, a
// stream cut short, a stream corrupt.
func (u *unpacker) streamError(err error) error {
	if u.src.err != nil {
		if u.ctx.Err() != nil {
			return aborted("restore into", u.root, u.ctx.Err())
		}
		for _, c := range classes {
			if errors.Is(u.src.err, c) {
				return fmt.Errorf("workspace: restore into %s: reading the stream failed after %d bytes: %w", u.root, u.src.n, u.src.err)
			}
		}
		return errdefs.Errorf(errdefs.ErrInvalid, "workspace: restore into %s: the stream is cut: reading it failed after %d bytes: %w", u.root, u.src.n, u.src.err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return u.invalid(fmt.Sprintf("the stream is cut: it ends early, after %d bytes", u.src.n))
	}
	return errdefs.Errorf(errdefs.ErrInvalid, "workspace: restore into %s: the stream is corrupt (at %d bytes): %w", u.root, u.src.n, err)
}

// fsError classes a failure to restore an entry.
func (u *unpacker) fsError(name string, err error) error {
	switch {
	case noSpace(err):
		return errdefs.Errorf(errdefs.ErrNoSpace, "workspace: restore into %s: entry %q: no space left on the workspace's filesystem: %w", u.root, shown(name), err)
	case errors.Is(err, fs.ErrExist):
		return u.bad(name, "the name is there already")
	}
	return fmt.Errorf("workspace: restore into %s: entry %q: %w", u.root, shown(name), err)
}

// kinds name the entry types a stream does not hold, for messages.
var kinds = map[byte]string{
	tar.TypeChar: "a character device", tar.TypeBlock: "a block device", tar.TypeCont: "a contiguous file",
	tar.TypeXGlobalHeader: "a PAX global header", tar.TypeGNUSparse: "a GNU sparse file",
}

// paxKeys are the PAX records a workspace stream holds, besides xattrs.
var paxKeys = map[string]bool{"path": true, "linkpath": true, "size": true, "uid": true, "gid": true,
	"uname": true, "gname": true, "mtime": true, "atime": true, "ctime": true}

// check refuses an entry Pack would not write, and returns its name
// ("." for the root).
func (u *unpacker) check(hdr *tar.Header) (string, error) {
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	default:
		kind, ok := kinds[hdr.Typeflag]
		if !ok {
			kind = "an unknown type"
		}
		return "", u.bad(hdr.Name, fmt.Sprintf("type %q (%s): not one a workspace stream holds", hdr.Typeflag, kind))
	}
	name := hdr.Name
	if hdr.Typeflag == tar.TypeDir {
		var ok bool
		if name, ok = strings.CutSuffix(name, "/"); !ok {
			return "", u.bad(hdr.Name, "a directory's name must end in /")
		}
	}
	if name != "." {
		if why := canonical(name); why != "" {
			return "", u.bad(hdr.Name, why)
		}
	} else if hdr.Typeflag != tar.TypeDir {
		return "", u.bad(hdr.Name, "not a canonical relative name")
	}
	keys := make([]string, 0, len(hdr.PAXRecords))
	for k := range hdr.PAXRecords {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		x, ok := strings.CutPrefix(k, paxXattr)
		switch {
		case !ok && !paxKeys[k]:
			return "", u.bad(hdr.Name, "PAX record "+shown(k)+": not one a workspace stream holds")
		case !ok:
		case !strings.HasPrefix(x, userPrefix):
			return "", u.bad(hdr.Name, "xattr "+shown(x)+": only user. xattrs are restored")
		case len(x) > NameMax || len(hdr.PAXRecords[k]) > xattrMax || strings.ContainsRune(x, 0):
			return "", u.bad(hdr.Name, "xattr "+shown(x)+": a name or value longer than Linux allows")
		}
	}
	if hdr.Mode&^0o7777 != 0 {
		return "", u.bad(hdr.Name, fmt.Sprintf("mode %#o: only the permission bits (07777) are restored", hdr.Mode))
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid >= math.MaxUint32 || hdr.Gid >= math.MaxUint32 {
		return "", u.bad(hdr.Name, fmt.Sprintf("owner %d:%d: out of range", hdr.Uid, hdr.Gid))
	}
	if hdr.Typeflag != tar.TypeReg && hdr.Size != 0 {
		return "", u.bad(hdr.Name, fmt.Sprintf("%d bytes of data for an entry of type %q", hdr.Size, hdr.Typeflag))
	}
	switch hdr.Typeflag {
	case tar.TypeSymlink:
		switch t := hdr.Linkname; {
		case t == "":
			return "", u.bad(hdr.Name, "a symlink without a target")
		case len(t) > PathMax:
			return "", u.bad(hdr.Name, fmt.Sprintf("a target of %d bytes, longer than PATH_MAX (%d)", len(t), PathMax))
		case strings.ContainsRune(t, 0):
			return "", u.bad(hdr.Name, "a target with a NUL byte")
		}
	case tar.TypeLink:
		if why := canonical(hdr.Linkname); why != "" {
			return "", u.bad(hdr.Name, fmt.Sprintf("hard link to %q: %s", shown(hdr.Linkname), why))
		}
	}
	return name, nil
}

// canonical says why n is not the canonical, relative name of an entry
// below the root, or "".
func canonical(n string) string {
	switch {
	case n == "":
		return "an empty name"
	case len(n) > PathMax:
		return fmt.Sprintf("a name of %d bytes, longer than PATH_MAX (%d)", len(n), PathMax)
	case strings.ContainsRune(n, 0):
		return "a name with a NUL byte"
	case n == ".", path.IsAbs(n), path.Clean(n) != n, n == "..", strings.HasPrefix(n, "../"):
		return `not a canonical relative name (absolute, or with "..", "." or "//")`
	case strings.Count(n, "/") >= MaxDepth:
		return fmt.Sprintf("deeper than %d levels", MaxDepth)
	}
	for c := range strings.SplitSeq(n, "/") {
		if len(c) > NameMax {
			return fmt.Sprintf("a component of %d bytes, longer than NAME_MAX (%d)", len(c), NameMax)
		}
	}
	return ""
}

// entry restores one entry.
func (u *unpacker) entry(hdr *tar.Header) error {
	name, err := u.check(hdr)
	if err != nil {
		return err
	}
	if u.st.Entries == 1 {
		// The root: its xattrs now, its mode, owner and mtime last.
		if name != "." {
			return u.bad(hdr.Name, `the stream does not start with its root "./"`)
		}
		f := u.stack[0]
		f.hdr = kept(hdr)
		u.st.Dirs++
		return u.xattrs(f.fd, hdr)
	}
	if name == "." {
		return u.bad(hdr.Name, "the name is there already")
	}
	dir, base := path.Dir(name), path.Base(name)
	f, err := u.enter(hdr.Name, dir)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return u.dir(f, hdr, name, base)
	case tar.TypeReg:
		return u.file(f, hdr, base)
	case tar.TypeSymlink:
		if err := f.root.Symlink(hdr.Linkname, base); err != nil {
			return u.fsError(hdr.Name, err)
		}
		u.st.Symlinks++
		return u.finish(f, hdr, base, f.root.Lchown(base, hdr.Uid, hdr.Gid), nil)
	case tar.TypeLink:
		return u.link(f, hdr, base)
	default: // tar.TypeFifo
		fd, err := f.fd()
		if err == nil {
			err = unix.Mkfifoat(fd, base, 0o600)
		}
		if err != nil {
			return u.fsError(hdr.Name, err)
		}
		u.st.Fifos++
		chown := f.root.Lchown(base, hdr.Uid, hdr.Gid)
		return u.finish(f, hdr, base, chown, func() error { return chmodFifo(fd, base, uint32(hdr.Mode&0o7777)) })
	}
}

// chmodFifo sets the mode of the FIFO base in dirfd, pinned by an O_PATH
// descriptor (a process of the sandbox could swap a symlink in) and
// checked to be a FIFO (chmodPinned).
func chmodFifo(dirfd int, base string, mode uint32) error {
	fd, err := unix.Openat(dirfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: base, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: base, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return &os.PathError{Op: "chmod", Path: base, Err: errChanged}
	}
	return chmodPinned(fd, base, mode)
}

// enter returns the frame of dir, the directory of the entry name: the
// stream's current directory or one it is still in (those it leaves are
// finished). Any other is refused: a stream fills only directories it
// made, in walk order, so it never writes through a symlink and never
// into a directory it finished.
func (u *unpacker) enter(name, dir string) (*frame, error) {
	for {
		top := u.stack[len(u.stack)-1]
		if top.name == dir {
			return top, nil
		}
		if top.name == "." || strings.HasPrefix(dir, top.name+"/") {
			return nil, u.bad(name, "its directory "+shown(dir)+" is not a directory the stream made and is filling")
		}
		if err := u.pop(); err != nil {
			return nil, err
		}
	}
}

// dir makes the directory name (base in f), and makes it the current one.
func (u *unpacker) dir(f *frame, hdr *tar.Header, name, base string) error {
	if err := f.root.Mkdir(base, 0o700); err != nil {
		return u.fsError(hdr.Name, err)
	}
	sub, err := openRoot(f.root, base)
	if err != nil {
		return u.fsError(hdr.Name, err)
	}
	// The name is cloned: one from a PAX record shares the record's
	// header, up to 1 MiB.
	d := &frame{name: strings.Clone(name), root: sub, hdr: kept(hdr)}
	u.stack = append(u.stack, d)
	// The directory opened is the one made (a process of the sandbox
	// could swap a symlink in: os.Root would follow it, inside the root).
	before, err := f.root.Lstat(base)
	if err != nil {
		return u.fsError(hdr.Name, err)
	}
	after, err := sub.Lstat(".")
	if err != nil {
		return u.fsError(hdr.Name, err)
	}
	if !before.IsDir() || !os.SameFile(before, after) {
		return u.fsError(hdr.Name, errChanged)
	}
	u.st.Dirs++
	return u.xattrs(d.fd, hdr)
}

// pop finishes the current directory: its owner, mtime and mode, the
// mode last (a 0555 or 0000 directory was filled already).
func (u *unpacker) pop() error {
	f := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	defer f.close()
	fd, err := f.fd()
	if err != nil {
		return u.fsError(f.hdr.Name, err)
	}
	if err := u.owner(unix.Fchown(fd, f.hdr.Uid, f.hdr.Gid)); err != nil {
		return u.fsError(f.hdr.Name, err)
	}
	if err := f.root.Chtimes(".", time.Time{}, f.hdr.ModTime); err != nil {
		return u.fsError(f.hdr.Name, err)
	}
	if err := unix.Fchmod(fd, uint32(f.hdr.Mode)); err != nil {
		return u.fsError(f.hdr.Name, err)
	}
	return nil
}

// file restores a regular file: its data, holes punched again, then its
// xattrs, owner, mode and mtime. The file is made and written through a
// bare descriptor, not an *os.File (whose registration with the
// runtime's poller, refused for a regular file, is two system calls more
// per file: a tenth of a restore of small files): created by its one
// component in its directory's descriptor, O_EXCL and O_NOFOLLOW, so
// nothing there is followed or reused.
func (u *unpacker) file(f *frame, hdr *tar.Header, base string) error {
	if !fits(u.st.Bytes, hdr.Size, u.lim.MaxBytes) {
		return errdefs.Errorf(errdefs.ErrNoSpace, "workspace: restore into %s: entry %q (%d bytes) takes the workspace past its limit of %d bytes",
			u.root, shown(hdr.Name), hdr.Size, u.lim.MaxBytes)
	}
	u.st.Bytes += hdr.Size
	dirfd, err := f.fd()
	if err != nil {
		return u.fsError(hdr.Name, err)
	}
	// Made with its permission bits and the owner's read and write (as
	// before its chmod it always was: a user. xattr is set only on a
	// file its owner may write), less the umask: most files need no
	// chmod.
	fd, err := createFile(dirfd, base, uint32(hdr.Mode)&0o777|0o600)
	if err != nil {
		return u.fsError(hdr.Name, err)
	}
	defer unix.Close(fd)
	if err := u.data(fd, hdr); err != nil {
		return err
	}
	if err := u.xattrs(func() (int, error) { return fd, nil }, hdr); err != nil {
		return err
	}
	u.st.Files++
	// A file that is its recorded owner's with its recorded mode already
	// (the common case: the stream's owner is the restoring user) is
	// spared the chown and chmod, two changes of its inode each written
	// to the journal. A chown to the owner it has would change nothing:
	// the file has no setuid or setgid bit yet for it to clear.
	var chown error
	chmod := func() error { return unix.Fchmod(fd, uint32(hdr.Mode)) }
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && int(st.Uid) == hdr.Uid && int(st.Gid) == hdr.Gid {
		if int64(st.Mode&0o7777) == hdr.Mode {
			chmod = nil
		}
	} else {
		chown = unix.Fchown(fd, hdr.Uid, hdr.Gid)
	}
	return u.finish(f, hdr, base, chown, chmod)
}

// createFile creates the regular file base in the directory dirfd, for
// writing, with the permission bits perm (less the umask): O_EXCL (a name
// there already, a symlink included, fails), and O_NOFOLLOW besides.
func createFile(dirfd int, base string, perm uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
		if err != unix.EINTR {
			if err != nil {
				return -1, &os.PathError{Op: "open", Path: base, Err: err}
			}
			return fd, nil
		}
	}
}

// writeAt writes all of b at off in the file fd.
func writeAt(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("write: %w", err)
		case n == 0:
			return io.ErrShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// data writes a file's data from the stream, skipping every block of
// zeros, then sets its size where it ends in a hole (a file written to
// its end has it already): the holes are holes again.
func (u *unpacker) data(fd int, hdr *tar.Header) error {
	var written int64 // where the last write ended
	for off := int64(0); off < hdr.Size; {
		if err := checkContext(u.ctx, "restore into", u.root); err != nil {
			return err
		}
		n := int(min(int64(len(u.buf)), hdr.Size-off))
		if _, err := io.ReadFull(u.tr, u.buf[:n]); err != nil {
			return u.streamError(err)
		}
		start := -1 // the run of data being gathered
		for i := 0; i < n; i += holeBlock {
			j := min(i+holeBlock, n)
			if !bytes.Equal(u.buf[i:j], zeros[:j-i]) {
				if start < 0 {
					start = i
				}
				continue
			}
			u.st.Holes += int64(j - i)
			if start >= 0 {
				if err := writeAt(fd, u.buf[start:i], off+int64(start)); err != nil {
					return u.fsError(hdr.Name, err)
				}
				written, start = off+int64(i), -1
			}
		}
		if start >= 0 {
			if err := writeAt(fd, u.buf[start:n], off+int64(start)); err != nil {
				return u.fsError(hdr.Name, err)
			}
			written = off + int64(n)
		}
		off += int64(n)
	}
	if written == hdr.Size {
		return nil
	}
	for {
		err := unix.Ftruncate(fd, hdr.Size)
		if err == nil {
			return nil
		}
		if err != unix.EINTR {
			return u.fsError(hdr.Name, fmt.Errorf("truncate: %w", err))
		}
	}
}

// link restores a hard link: to a regular file the stream made before,
// reached through directories it made, never through a symlink.
func (u *unpacker) link(f *frame, hdr *tar.Header, base string) error {
	target := hdr.Linkname
	d := u.stack[0].root
	var opened []*os.Root
	defer func() {
		for _, r := range opened {
			r.Close()
		}
	}()
	if dir := path.Dir(target); dir != "." {
		walked := ""
		for c := range strings.SplitSeq(dir, "/") {
			walked = path.Join(walked, c)
			fi, err := d.Lstat(c)
			if err != nil || !fi.IsDir() {
				return u.bad(hdr.Name, fmt.Sprintf("hard link to %q: %s is not a directory the stream made", shown(target), shown(walked)))
			}
			next, err := openRoot(d, c)
			if err != nil {
				return u.fsError(hdr.Name, err)
			}
			opened = append(opened, next)
			if after, err := next.Lstat("."); err != nil || !os.SameFile(fi, after) {
				return u.fsError(hdr.Name, errChanged)
			}
			d = next
		}
	}
	tbase := path.Base(target)
	if fi, err := d.Lstat(tbase); err != nil || !fi.Mode().IsRegular() {
		return u.bad(hdr.Name, fmt.Sprintf("hard link to %q: not a regular file the stream made before it", shown(target)))
	}
	td, err := d.Open(".")
	if err != nil {
		return u.fsError(hdr.Name, err)
	}
	defer td.Close()
	fd, err := f.fd()
	if err == nil {
		// No AT_SYMLINK_FOLLOW: the link is to the file itself.
		err = unix.Linkat(int(td.Fd()), tbase, fd, base, 0)
	}
	if err != nil {
		return u.fsError(hdr.Name, err)
	}
	u.st.HardLinks++
	return nil
}

// xattrs sets an entry's user. xattrs on the descriptor fd gives, best
// effort: one the filesystem refuses is counted.
func (u *unpacker) xattrs(fd func() (int, error), hdr *tar.Header) error {
	var keys []string
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, paxXattr) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	d, err := fd()
	if err != nil {
		return u.fsError(hdr.Name, err)
	}
	for _, k := range keys {
		if err := unix.Fsetxattr(d, strings.TrimPrefix(k, paxXattr), []byte(hdr.PAXRecords[k]), 0); err != nil {
			if noSpace(err) {
				return u.fsError(hdr.Name, err)
			}
			u.st.XattrsSkipped++
			continue
		}
		u.st.Xattrs++
	}
	return nil
}

// owner takes a chown's outcome: one the process may not do (not root,
// or an id its user namespace does not map) leaves the entry the
// unpacking user's, counted.
func (u *unpacker) owner(err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
		u.st.OwnersKept++
		return nil
	}
	return err
}

// finish gives the entry base of f, made, its owner (chown: the outcome
// of the chown done), its mode (chmod, after the chown, which clears
// setuid) and its mtime, without following a symlink.
func (u *unpacker) finish(f *frame, hdr *tar.Header, base string, chown error, chmod func() error) error {
	if err := u.owner(chown); err != nil {
		return u.fsError(hdr.Name, err)
	}
	if chmod != nil {
		if err := chmod(); err != nil {
			return u.fsError(hdr.Name, err)
		}
	}
	fd, err := f.fd()
	if err == nil {
		err = setMtime(fd, base, hdr.ModTime)
	}
	if err != nil {
		return u.fsError(hdr.Name, err)
	}
	return nil
}

// setMtime sets the mtime of name in the directory dirfd, not following
// a symlink; the atime is left.
func setMtime(dirfd int, name string, mtime time.Time) error {
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Sec: mtime.Unix(), Nsec: int64(mtime.Nanosecond())}}
	return unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// unixMode is an fs.FileMode's permission and setuid, setgid and sticky
// bits as chmod(2) takes them.
func unixMode(m fs.FileMode) uint32 {
	mode := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		mode |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		mode |= unix.S_ISVTX
	}
	return mode
}

// chmodPinned sets the mode of the file fd pins (an O_PATH descriptor)
// through its /proc/self/fd link, which Linux and gVisor both allow on a
// file no one may open. Not os.Root.Chmod: that is fchmodat2, which
// Docker's seccomp profile refuses with EPERM and gVisor passes on as it
// is (runc turns it into ENOSYS, and Go falls back).
func chmodPinned(fd int, name string, mode uint32) error {
	if err := unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), mode, 0); err != nil {
		return &os.PathError{Op: "chmod", Path: name, Err: err}
	}
	return nil
}
