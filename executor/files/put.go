package files

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// PutOptions say what an upload is.
type PutOptions struct {
	// Tar: the body is a tar stream whose entries go into the directory at
	// the path (created if missing, merged into if not). Otherwise the body
	// is the bytes of the file at the path.
	Tar bool
	// Mode is a file's permission bits (default 0644); a tar's entries
	// carry their own.
	Mode fs.FileMode
	Limits
}

// Put writes body at p (see the package doc for confinement, atomicity and
// bounds). Parent directories that are missing are created (0755, the
// user's). A symlink at p (one that stays inside the root) is replaced by
// the file, not written through. body is read to its end; ctx ending makes the upload fail with
// nothing written (a body bound to a request also fails to read then).
//
// Errors: p outside the root or through a symlink that leads out, a
// directory at p for a file (or a file for a tar), a parent that is not a
// directory, a bad tar entry, a body that ends early are executor.ErrInvalid;
// over the byte or entry cap ErrTooLarge; a full filesystem ErrNoSpace.
func (t Tree) Put(ctx context.Context, p string, body io.Reader, o PutOptions) (Written, error) {
	abs, rel, err := t.resolve(p)
	if err != nil {
		return Written{}, err
	}
	if !o.Tar && rel == "." {
		return Written{}, executor.Errorf(executor.ErrInvalid, "%s is a directory, not a file (send a tar to upload a directory)", abs)
	}
	lim := o.Limits.withDefaults()
	in := &capReader{r: body, max: lim.MaxBytes, path: abs}
	var w Written
	err = t.inRoot(func(r *root) error {
		if lim.NoSymlinks {
			if err := r.noSymlinks(rel, abs); err != nil {
				return err
			}
		}
		dir := rel
		if !o.Tar {
			dir = path.Dir(rel)
		}
		anc, missing, err := t.nearest(r, dir, abs)
		if err != nil {
			return err
		}
		// Under files rules the directory written into is opened without
		// following a link (the check above names one; this open is the
		// one a rename in between cannot fool).
		var ar *os.Root
		if lim.NoSymlinks {
			ar, err = r.openDirNoFollow(anc, abs)
		} else {
			ar, err = r.openDir(anc, abs)
		}
		if err != nil {
			return err
		}
		defer ar.Close()
		u := upload{t: t, ctx: ctx, ar: ar, abs: abs, missing: missing, in: in, lim: lim}
		defer u.undo()
		if o.Tar {
			w, err = u.tar()
		} else {
			mode := o.Mode.Perm()
			if mode == 0 {
				mode = 0o644
			}
			w, err = u.file(path.Base(rel), mode)
		}
		if err == nil {
			u.done = true
		}
		return err
	})
	return w, err
}

// nearest returns the deepest existing directory on the way to dir (dir
// itself when it exists), relative to r, and the components below it that
// are missing. Existing components must be directories (symlinks to
// directories inside the root are followed).
func (t Tree) nearest(r *root, dir, abs string) (string, []string, error) {
	if dir == "." {
		return ".", nil, nil
	}
	comps := strings.Split(dir, "/")
	cur := "."
	for i, c := range comps {
		next := path.Join(cur, c)
		fi, err := r.Stat(next)
		if errors.Is(err, fs.ErrNotExist) && !escapes(err) {
			// A dangling symlink is "missing" too; creating the directory
			// then fails on it, and says so.
			return cur, comps[i:], nil
		}
		if err != nil {
			return "", nil, t.pathError(abs, err)
		}
		if !fi.IsDir() {
			return "", nil, executor.Errorf(executor.ErrInvalid, "invalid path: %s: %s is not a directory", abs, path.Join(t.Root, next))
		}
		cur = next
	}
	return cur, nil, nil
}

// upload is one Put in progress below ar, the nearest existing directory.
type upload struct {
	t       Tree
	ctx     context.Context
	ar      *os.Root
	abs     string   // the target, for messages
	missing []string // components from ar to the target's directory (tar: the target)
	in      *capReader
	lim     Limits

	staging string   // the staging entry's name in ar, while it exists
	created []string // directories made in ar, in order
	done    bool
}

// undo removes what a failed upload left: the staging entry and the
// directories it made.
func (u *upload) undo() {
	if u.done {
		return
	}
	if u.staging != "" {
		u.ar.RemoveAll(u.staging)
	}
	for i := len(u.created) - 1; i >= 0; i-- {
		u.ar.Remove(u.created[i])
	}
}

// fail classes an error of writing what the body holds: the body's own
// error (the cap, a client gone), the filesystem's.
func (u *upload) fail(err error, n int64) error {
	switch {
	case errors.Is(err, ErrTooLarge), errors.Is(err, executor.ErrInvalid):
		return err
	case u.ctx.Err() != nil:
		return executor.Aborted()
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return executor.Errorf(ErrNoSpace, "no space left writing %s: the filesystem is full after %d bytes (ENOSPC); nothing was written", u.abs, n)
	case errors.Is(err, io.ErrUnexpectedEOF), isReadError(err):
		return executor.Errorf(executor.ErrInvalid, "upload of %s interrupted after %d bytes: %v; nothing was written", u.abs, n, err)
	}
	return u.t.pathError(u.abs, err)
}

// readError marks an error of the body, as opposed to the filesystem.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

func isReadError(err error) bool {
	var re *readError
	return errors.As(err, &re)
}

// body is the upload's body, its errors marked as the body's.
type body struct{ r io.Reader }

func (b body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF && !errors.Is(err, ErrTooLarge) {
		err = &readError{err}
	}
	return n, err
}

// mkdirs makes the missing directories up to (not including) the last n
// components.
func (u *upload) mkdirs(keep int) error {
	cur := "."
	for _, c := range u.missing[:len(u.missing)-keep] {
		cur = path.Join(cur, c)
		if err := u.ar.Mkdir(cur, 0o755); err != nil {
			return u.t.pathError(u.abs, err)
		}
		u.created = append(u.created, cur)
	}
	return nil
}

// newStaging picks a fresh staging name.
func newStaging() string {
	var b [8]byte
	rand.Read(b[:])
	return stagingPrefix + hex.EncodeToString(b[:])
}

// writerOnly hides an *os.File's ReadFrom, so the copy uses its buffer.
type writerOnly struct{ io.Writer }

// file receives a file into a staging file next to where it goes, then
// renames it into place.
func (u *upload) file(base string, mode fs.FileMode) (Written, error) {
	target := path.Join(append(append([]string{}, u.missing...), base)...)
	if len(u.missing) == 0 {
		// Refuse early what the rename would refuse late (a directory),
		// and a symlink that leads out even though it would be replaced.
		fi, err := u.ar.Stat(target)
		switch {
		case err == nil && fi.IsDir():
			return Written{}, executor.Errorf(executor.ErrInvalid, "%s is a directory, not a file (send a tar to upload into a directory)", u.abs)
		case escapes(err):
			return Written{}, u.t.pathError(u.abs, err)
		}
	}
	u.staging = newStaging()
	f, err := u.ar.OpenFile(u.staging, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		u.staging = ""
		return Written{}, u.t.pathError(u.abs, err)
	}
	buf := make([]byte, copyBuffer)
	n, err := io.CopyBuffer(writerOnly{f}, body{u.in}, buf)
	if err == nil {
		err = u.ctx.Err()
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Written{}, u.fail(err, n)
	}
	if err := u.mkdirs(0); err != nil {
		return Written{}, err
	}
	if err := u.ar.Rename(u.staging, target); err != nil {
		return Written{}, u.t.pathError(u.abs, err)
	}
	u.staging = ""
	syncDir(u.ar, path.Dir(target))
	return Written{Path: u.abs, Bytes: n, Files: 1}, nil
}

// syncDir makes a rename in dir durable, where the filesystem has a disk.
func syncDir(r *os.Root, dir string) {
	if d, err := r.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// chmodDir sets the mode of the directory name below r, whose real path is
// top, with fchmod(2) on the directory opened without following a final
// symlink, its real path checked to be below top (gVisor does not confine
// os.Root).
//
// Not os.Root.Chmod: since Go 1.26 it asks fchmodat2(2) (for
// AT_SYMLINK_NOFOLLOW) and falls back to an O_PATH open only on ENOSYS or
// EOPNOTSUPP. Docker's default seccomp profile does not list fchmodat2 and
// denies what it does not list with EPERM; runc answers a syscall newer
// than the profile knows with ENOSYS instead, gVisor (--oci-seccomp) keeps
// the EPERM, so every directory of a tar upload failed there with
// "operation not permitted". fchmod is in every profile, and needs only
// ownership, not write permission: the directory is the user's, 0700 while
// it is extracted.
func chmodDir(r *os.Root, top, name string, mode fs.FileMode) error {
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	real, err := fdPath(f)
	if err != nil {
		return err
	}
	if !executor.Within(real, top) {
		return &fs.PathError{Op: "chmod", Path: name, Err: errEscapes}
	}
	return f.Chmod(mode)
}

// errEscapes is a path that leaves its root (escapes says so).
var errEscapes = errors.New("path escapes from parent")

// realPath is the real path of r's directory.
func realPath(r *os.Root) (string, error) {
	d, err := r.Open(".")
	if err != nil {
		return "", err
	}
	defer d.Close()
	return fdPath(d)
}

// tar extracts the body into a staging directory, then renames it into
// place (a new directory) or merges it (an existing one).
func (u *upload) tar() (Written, error) {
	u.staging = newStaging()
	if err := u.ar.Mkdir(u.staging, 0o700); err != nil {
		u.staging = ""
		return Written{}, u.t.pathError(u.abs, err)
	}
	sr, err := u.ar.OpenRoot(u.staging)
	if err != nil {
		return Written{}, u.t.pathError(u.abs, err)
	}
	defer sr.Close()
	top, err := realPath(sr)
	if err != nil {
		return Written{}, u.t.pathError(u.abs, err)
	}
	x := extractor{u: u, r: sr, top: top, dirs: map[string]tarDir{}, real: map[string]bool{}}
	w, rootMode, err := x.run()
	if err != nil {
		return Written{}, err
	}
	if err := u.ctx.Err(); err != nil {
		return Written{}, executor.Aborted()
	}
	w.Path = u.abs
	if len(u.missing) > 0 {
		// A new directory: all of it at once.
		if err := u.mkdirs(1); err != nil {
			return Written{}, err
		}
		top, err := realPath(u.ar)
		if err == nil {
			err = chmodDir(u.ar, top, u.staging, rootMode)
		}
		if err != nil {
			return Written{}, u.t.pathError(u.abs, err)
		}
		target := path.Join(u.missing...)
		if err := u.ar.Rename(u.staging, target); err != nil {
			return Written{}, u.t.pathError(u.abs, err)
		}
		u.staging = ""
		syncDir(u.ar, path.Dir(target))
		return w, nil
	}
	// An existing directory: check that no entry changes type, then move
	// the entries in, each whole.
	if err := u.merge(".", true); err != nil {
		return Written{}, err
	}
	if err := u.merge(".", false); err != nil {
		return Written{}, err
	}
	u.ar.RemoveAll(u.staging)
	u.staging = ""
	syncDir(u.ar, ".")
	return w, nil
}

// merge moves the staged entries of dir into ar's dir: an entry that does
// not exist there, or is not a directory on both sides, is renamed over;
// directories on both sides are merged. With check it only looks for an
// entry that would change type.
func (u *upload) merge(dir string, check bool) error {
	d, err := u.ar.Open(path.Join(u.staging, dir))
	if err != nil {
		return u.t.pathError(u.abs, err)
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return u.t.pathError(u.abs, err)
	}
	for _, e := range entries {
		name := path.Join(dir, e.Name())
		fi, err := u.ar.Lstat(name)
		exists := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return u.t.pathError(path.Join(u.abs, name), err)
		}
		switch {
		case exists && e.IsDir() && fi.IsDir():
			if err := u.merge(name, check); err != nil {
				return err
			}
		case exists && e.IsDir() != fi.IsDir():
			what, is := "a directory", "a file"
			if !e.IsDir() {
				what, is = "a file", "a directory"
			}
			return executor.Errorf(executor.ErrInvalid, "%s: the tar has %s where there is %s; nothing was written", path.Join(u.abs, name), what, is)
		case !check:
			if err := u.ar.Rename(path.Join(u.staging, name), name); err != nil {
				return u.t.pathError(path.Join(u.abs, name), err)
			}
		}
	}
	return nil
}

// tarDir is a directory entry's metadata, applied once its entries are in.
type tarDir struct {
	mode  fs.FileMode
	mtime time.Time
}

// extractor writes a tar's entries below r (the staging directory).
type extractor struct {
	u    *upload
	r    *os.Root
	top  string // r's real path
	dirs map[string]tarDir
	real map[string]bool // directories known not to be symlinks
	// links are the symlinks entries made (tar name, staged name): each
	// is resolved once all are in (see confined).
	links [][2]string
	tr    *tar.Reader
	buf   []byte
	// made counts the directories entries create on their way (a/b/c/f
	// makes a, a/b and a/b/c): they count toward MaxEntries as entries do.
	made int
}

// Bounds of a tar entry's name, whatever MaxEntries says: name checks and
// directory walks cost by depth, and no workspace needs deeper trees.
const (
	maxNameBytes = 4096
	maxNameDepth = 256
)

// run extracts every entry and returns the counts and the mode of the tar's
// own root ("./"), 0755 when it has none.
func (x *extractor) run() (Written, fs.FileMode, error) {
	var w Written
	rootMode := fs.FileMode(0o755)
	x.tr = tar.NewReader(body{x.u.in})
	x.buf = make([]byte, copyBuffer)
	entries := 0
	for {
		hdr, err := x.tr.Next()
		if err == io.EOF {
			// archive/tar also says EOF when the stream ends where a
			// header would start: without the end-of-archive marker (two
			// zero blocks) the stream was cut.
			if x.u.in.zeros < 2*512 || x.u.in.n%512 != 0 {
				return Written{}, 0, executor.Errorf(executor.ErrInvalid, "upload of %s interrupted after %d bytes: the tar stream ends without its end-of-archive marker; nothing was written", x.u.abs, x.u.in.n)
			}
			break
		}
		if err != nil {
			return Written{}, 0, x.u.fail(err, x.u.in.n)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if hdr.Typeflag == tar.TypeGNUSparse || sparse(hdr) {
			// Holes become written zeros: a few KiB of tar would write
			// any number of bytes past the cap, which counts the stream.
			return Written{}, 0, x.bad(hdr.Name, "sparse files are not allowed")
		}
		entries++
		if entries+x.made > x.u.lim.MaxEntries {
			return Written{}, 0, executor.Errorf(ErrTooLarge, "upload of %s: the tar has more than %d entries (policy files.maxEntries)", x.u.abs, x.u.lim.MaxEntries)
		}
		name, err := x.name(hdr.Name)
		if err != nil {
			return Written{}, 0, err
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		if name == "." {
			if hdr.Typeflag != tar.TypeDir {
				return Written{}, 0, x.bad(hdr.Name, "the tar's root must be a directory")
			}
			rootMode = mode | 0o700
			continue
		}
		if err := x.entry(hdr, name, mode, &w); err != nil {
			return Written{}, 0, err
		}
	}
	// The end-of-archive marker came; the rest of the body must end
	// cleanly too, or the transfer was cut.
	if _, err := io.CopyBuffer(io.Discard, body{x.u.in}, x.buf); err != nil {
		return Written{}, 0, x.u.fail(err, x.u.in.n)
	}
	w.Bytes = x.u.in.n
	// Every link resolved through the links that are now in: one checked
	// when it was made may lead out through a link a later entry made
	// ("up2 -> up/.." before "up -> .").
	for _, l := range x.links {
		if err := x.confined(l[0], l[1]); err != nil {
			return Written{}, 0, err
		}
	}
	// Directory modes and times last: their entries are in, and a
	// read-only directory no longer needs writing.
	names := make([]string, 0, len(x.dirs))
	for n := range x.dirs {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, n := range names {
		d := x.dirs[n]
		if err := chmodDir(x.r, x.top, n, d.mode); err != nil {
			return Written{}, 0, x.u.t.pathError(path.Join(x.u.abs, n), err)
		}
		if !d.mtime.IsZero() {
			x.r.Chtimes(n, d.mtime, d.mtime)
		}
	}
	return w, rootMode, nil
}

func (x *extractor) bad(name, why string) error {
	return executor.Errorf(executor.ErrInvalid, "upload of %s: tar entry %q: %s; nothing was written", x.u.abs, name, why)
}

// name checks an entry's name: relative, no "..", no NUL.
func (x *extractor) name(n string) (string, error) {
	if strings.ContainsRune(n, 0) {
		return "", x.bad(n, "contains NUL")
	}
	if path.IsAbs(n) {
		return "", x.bad(n, "absolute names are not allowed")
	}
	if len(n) > maxNameBytes {
		return "", x.bad(n[:64]+"…", fmt.Sprintf("a name of %d bytes: at most %d", len(n), maxNameBytes))
	}
	c := path.Clean(n)
	if d := strings.Count(c, "/") + 1; d > maxNameDepth {
		return "", x.bad(n[:min(len(n), 64)]+"…", fmt.Sprintf("%d levels deep: at most %d", d, maxNameDepth))
	}
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", x.bad(n, "leads outside the destination (..)")
	}
	return c, nil
}

// direct checks that no directory on the way to name (in the staging
// tree) is a symlink: an entry is written where its name says, never
// through a link an earlier entry made (os.Root would refuse one that leads
// out, but gVisor does not confine os.Root, and "up -> ." makes "../.."
// look inside when it is not).
func (x *extractor) direct(orig, name string) error {
	dir := path.Dir(name)
	for d := dir; d != "."; d = path.Dir(d) {
		if x.real[d] {
			break
		}
		fi, err := x.r.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return x.fsError(orig, err)
		}
		if !fi.IsDir() {
			return x.bad(orig, "goes through "+d+", which is not a directory")
		}
	}
	for d := dir; d != "." && !x.real[d]; d = path.Dir(d) {
		x.real[d] = true
		x.made++
	}
	if x.made > x.u.lim.MaxEntries {
		return executor.Errorf(ErrTooLarge, "upload of %s: the tar makes more than %d entries, the directories on its entries' way counted (policy files.maxEntries)", x.u.abs, x.u.lim.MaxEntries)
	}
	return nil
}

// sparse reports a PAX-described sparse file (GNU.sparse.* records).
func sparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// entry writes one entry.
func (x *extractor) entry(hdr *tar.Header, name string, mode fs.FileMode, w *Written) error {
	if err := x.direct(hdr.Name, name); err != nil {
		return err
	}
	if dir := path.Dir(name); dir != "." {
		if err := x.r.MkdirAll(dir, 0o755); err != nil {
			return x.fsError(hdr.Name, err)
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.r.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return x.fsError(hdr.Name, err)
		}
		x.dirs[name] = tarDir{mode: mode | 0o700, mtime: hdr.ModTime}
		w.Dirs++
	case tar.TypeReg, tar.TypeRegA:
		if err := x.replace(hdr.Name, name); err != nil {
			return err
		}
		f, err := x.r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return x.fsError(hdr.Name, err)
		}
		_, err = io.CopyBuffer(writerOnly{f}, body{io.LimitReader(x.tr, hdr.Size)}, x.buf)
		if err == nil {
			err = f.Chmod(mode)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return x.u.fail(err, x.u.in.n)
		}
		if !hdr.ModTime.IsZero() {
			x.r.Chtimes(name, hdr.ModTime, hdr.ModTime)
		}
		w.Files++
	case tar.TypeSymlink:
		t := hdr.Linkname
		if t == "" || strings.ContainsRune(t, 0) {
			return x.bad(hdr.Name, "a symlink without a target")
		}
		if path.IsAbs(t) {
			return x.bad(hdr.Name, "symlink to "+t+": absolute targets are not allowed")
		}
		if c := path.Join(path.Dir(name), t); c == ".." || strings.HasPrefix(c, "../") {
			return x.bad(hdr.Name, "symlink to "+t+" leads outside the destination")
		}
		if err := x.replace(hdr.Name, name); err != nil {
			return err
		}
		if err := x.r.Symlink(t, name); err != nil {
			return x.fsError(hdr.Name, err)
		}
		x.links = append(x.links, [2]string{hdr.Name, name})
		if err := x.confined(hdr.Name, name); err != nil {
			return err
		}
		w.Links++
	case tar.TypeLink:
		t, err := x.name(hdr.Linkname)
		if err != nil || t == "." {
			return x.bad(hdr.Name, "hard link to "+hdr.Linkname+" leads outside the destination")
		}
		if err := x.direct(hdr.Name, t); err != nil {
			return err
		}
		// Only to a regular file: a hard link to a symlink is that
		// symlink, moved to where its relative target leads elsewhere.
		if fi, err := x.r.Lstat(t); err != nil {
			return x.fsError(hdr.Name, err)
		} else if !fi.Mode().IsRegular() {
			return x.bad(hdr.Name, "hard link to "+hdr.Linkname+", which is not a regular file")
		}
		if err := x.replace(hdr.Name, name); err != nil {
			return err
		}
		if err := x.r.Link(t, name); err != nil {
			return x.fsError(hdr.Name, err)
		}
		w.Links++
	default:
		return x.bad(hdr.Name, "only files, directories and links are allowed (type "+string(hdr.Typeflag)+")")
	}
	return nil
}

// maxLinkHops bounds the links one resolution follows, as the kernel's
// 40 (ELOOP).
const maxLinkHops = 40

// confined checks that the symlink at name (staged) resolves inside the
// destination, following the links in the staging tree as the kernel
// would: its target's text alone is not enough, "up -> ." then
// "up2 -> up/.." leads one level above the destination though each target
// stays inside by its text. What does not exist (yet) is taken by its text.
// The error names the link, its target and the link that led out.
func (x *extractor) confined(orig, name string) error {
	target, err := x.r.Readlink(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) {
			return nil // replaced by a later entry: that one is checked
		}
		return x.fsError(orig, err)
	}
	var cur []string // resolved: real directories, or missing names
	if d := path.Dir(name); d != "." {
		cur = strings.Split(d, "/")
	}
	todo := strings.Split(target, "/")
	via := ""
	for hops := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				why := "symlink to " + target + " leads outside the destination"
				if via != "" {
					why += " (through the symlink " + via + ")"
				}
				return x.bad(orig, why)
			}
			cur = cur[:len(cur)-1]
			continue
		}
		p := path.Join(append(cur, c)...)
		fi, err := x.r.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				return x.fsError(orig, err)
			}
			cur = append(cur, c)
			continue
		}
		if hops++; hops > maxLinkHops {
			return x.bad(orig, "symlink to "+target+": too many levels of symlinks")
		}
		t, err := x.r.Readlink(p)
		if err != nil {
			return x.fsError(orig, err)
		}
		if path.IsAbs(t) {
			return x.bad(orig, "symlink to "+target+" leads outside the destination (through the symlink "+p+" -> "+t+")")
		}
		via = p + " -> " + t
		todo = append(strings.Split(t, "/"), todo...)
	}
	return nil
}

// replace removes an earlier entry of the same name (a later entry wins, as
// with tar(1)); a directory stays.
func (x *extractor) replace(orig, name string) error {
	fi, err := x.r.Lstat(name)
	if err != nil {
		return nil
	}
	if fi.IsDir() {
		return x.bad(orig, "a directory of that name came earlier")
	}
	if err := x.r.Remove(name); err != nil {
		return x.fsError(orig, err)
	}
	return nil
}

// fsError is a failure to create an entry.
func (x *extractor) fsError(orig string, err error) error {
	if escapes(err) {
		return x.bad(orig, "leads outside the destination (through a symlink)")
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return x.u.fail(err, x.u.in.n)
	}
	return x.u.t.pathError(path.Join(x.u.abs, orig), err)
}
