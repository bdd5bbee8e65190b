// Package files moves files in and out of a session's root, where the files
// are: the agent inside a sandbox serves it over agentapi, the local backend
// calls it in process.
//
// Confinement. A path names a file inside the root: absolute (it must be the
// root or below it once cleaned) or relative to it. Every access goes
// through an os.Root opened on the root, so neither ".." nor a symlink (one
// a command planted, or swapped in meanwhile) leads outside: os.Root refuses
// absolute symlinks and those that climb out. In a sandbox the agent also
// does every file operation as the sandbox user (Tree.UID/GID, with the
// thread's filesystem ids, setfsuid(2)), so an upload can do nothing the
// commands could not: it cannot write where the user may not, and what it
// creates is the user's.
//
// Atomicity. An upload is received into a hidden staging entry
// (".shellbox-upload-*") in the nearest existing directory of the target,
// on the target's filesystem, and renamed into place only once complete: a
// file appears whole or not at all; a directory that did not exist appears
// with all its entries or not at all. A tar into a directory that exists is
// merged entry by entry after a check that no entry changes type (file over
// directory or the reverse): each file appears whole, and only a change made
// by the commands during the commit can leave it half-merged. Anything a
// failed upload created (the staging entry, missing parent directories) is
// removed.
//
// A tar may hold files, directories, symlinks and hard links: names are
// relative without "..", absolute symlinks are refused, and every symlink
// must resolve inside the tree where it lands, through the links the same
// tar made, in whatever order: "up -> ." with "up2 -> up/.." is refused
// (up2 is one level above), though each target stays inside by its text.
// The check resolves each link as the kernel would (40 links at most),
// once when it is made and again over the finished tree before anything
// is moved into place; it protects `shellbox cp` out of a sandbox as much
// as an upload into one. No entry is written through a symlink an earlier
// entry made. Devices, FIFOs and the like are refused.
//
// Files rules. A tenant whose policy decides transfers by path
// (Limits.NoSymlinks, OneLink) must get the file the path names, and only
// a file no other path names. The path is decided on the server; here the
// file is opened one component at a time with O_NOFOLLOW (openNoFollow),
// so no symlink is followed, and what is read (or the directory written
// into) is what was at the path at the moment of its open: a check of the
// path followed by an open of it would race with a command renaming a
// symlink over a component. The open file is then judged by fstat, not by
// its path: a regular file with a link count above 1 (hard links,
// "ln .env notenv") is refused for reading, since its other names cannot
// be found without walking the filesystem and may be denied. A file of one
// link has exactly one name, the one decided. Chosen over matching
// denied paths by (device, inode) because patterns are globs (the inodes
// of "*.pem" cannot be listed) and an allowlist's misses cannot be
// enumerated. Out of reach of any path rule: a command that renames or
// copies a denied file to an allowed name has moved its bytes there (the
// command rules decide mv, cp, ln); a directory tar's entries, which are
// not decided one by one.
//
// gVisor does not confine os.Root (its walk follows a symlink to /etc), so
// every file and directory opened is also checked by its real path
// (/proc/self/fd) against the root's: the second line, as for workdirs.
//
// Bounds. Memory is bounded both ways (a fixed copy buffer); the bytes of a
// transfer (for a tar, the stream), the entries of a tar, are capped by the
// caller (the policy), and the error names the path and the limit.
package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/executor"
)

// Error classes beyond executor's (each IS the class of errdefs). A path outside the root, a symlink out,
// a directory where a file is expected (and the reverse), a bad tar entry
// are executor.ErrInvalid; a missing file executor.ErrNotFound; a client
// that went away executor.ErrAborted.
var (
	// ErrTooLarge: the transfer exceeds the caller's cap (bytes, or entries
	// of a tar). HTTP 413.
	ErrTooLarge = errdefs.ErrTooLarge
	// ErrNoSpace: the filesystem of the target is full (ENOSPC, EDQUOT).
	// HTTP 507.
	ErrNoSpace = errdefs.ErrNoSpace
)

// Defaults of the caps.
const (
	// DefaultMaxBytes caps a transfer when the caller sets no cap.
	DefaultMaxBytes = 1 << 30
	// DefaultMaxEntries caps the entries of a tar.
	DefaultMaxEntries = 100_000
)

// stagingPrefix starts the name of an upload's staging entry.
const stagingPrefix = ".shellbox-upload-"

// copyBuffer is the size of the buffer of one transfer's copy.
const copyBuffer = 256 << 10

// Tree is a session's root, as the process serving it sees it.
type Tree struct {
	// Root is the absolute, clean path of the session root.
	Root string
	// UID and GID, when UID >= 0, are the ids file operations run as (the
	// sandbox user; the process needs CAP_SETUID and CAP_SETGID). -1: as the
	// process.
	UID, GID int
}

// Limits cap one transfer. Zero fields take the defaults.
type Limits struct {
	// MaxBytes caps the bytes of the transfer: a file's, or a tar stream's.
	MaxBytes int64
	// MaxEntries caps the entries of a tar.
	MaxEntries int
	// NoSymlinks refuses a path that goes through a symlink (any
	// component, the last one included): for a tenant whose policy decides
	// transfers by path, so that the path decided is the path reached (a
	// planted "env -> .env" would otherwise read a denied file).
	NoSymlinks bool
	// OneLink refuses to read a regular file that has other names (a link
	// count above 1, hard links): for a tenant whose policy decides reads
	// by path, a file's other names cannot be checked against the rules
	// (a planted "ln .env notenv" would otherwise read a denied file).
	OneLink bool
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	return l
}

// Info describes a file in the tree.
type Info struct {
	// Path is the path asked for, cleaned and absolute.
	Path string `json:"path"`
	// Type is "file", "directory", "symlink" (Stat does not follow a final
	// symlink) or "other".
	Type    string      `json:"type"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"modTime"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
}

// Types of Info.Type.
const (
	TypeFile      = "file"
	TypeDirectory = "directory"
	TypeSymlink   = "symlink"
	TypeOther     = "other"
)

func typeOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return TypeFile
	case m.IsDir():
		return TypeDirectory
	case m&fs.ModeSymlink != 0:
		return TypeSymlink
	}
	return TypeOther
}

// Written is the outcome of an upload.
type Written struct {
	// Path is the target, cleaned and absolute.
	Path string `json:"path"`
	// Bytes is what was received: the file's bytes, or the tar stream's.
	Bytes int64 `json:"bytes"`
	// Files, Dirs and Links count what was created (a file upload: Files 1).
	Files int `json:"files"`
	Dirs  int `json:"dirs,omitempty"`
	Links int `json:"links,omitempty"`
}

// resolve returns p as an absolute clean path and its path relative to the
// root ("." for the root). A path outside the root is refused by its text
// here, and by os.Root when a symlink would lead out.
func (t Tree) resolve(p string) (abs, rel string, err error) {
	if p == "" {
		return "", "", executor.Errorf(executor.ErrInvalid, "a path is required")
	}
	if strings.ContainsRune(p, 0) {
		return "", "", executor.Errorf(executor.ErrInvalid, "invalid path %q: contains NUL", p)
	}
	abs = p
	if !path.IsAbs(abs) {
		abs = path.Join(t.Root, abs)
	}
	abs = path.Clean(abs)
	if !executor.Within(abs, t.Root) {
		return "", "", outside(p, t.Root)
	}
	rel = strings.TrimPrefix(strings.TrimPrefix(abs, t.Root), "/")
	if rel == "" {
		rel = "."
	}
	return abs, rel, nil
}

func outside(p, root string) error {
	return executor.Errorf(executor.ErrInvalid, "invalid path: %s is outside the session root %s", p, root)
}

// noSymlinks refuses rel when one of its components is a symlink (see
// Limits.NoSymlinks). Components that do not exist yet end the walk.
func (r *root) noSymlinks(rel, abs string) error {
	if rel == "." {
		return nil
	}
	cur := ""
	for _, c := range strings.Split(rel, "/") {
		cur = path.Join(cur, c)
		fi, err := r.Lstat(cur)
		if err != nil {
			return nil // missing: nothing to follow from here on
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return executor.Errorf(executor.ErrInvalid, "%s goes through the symlink %s: the tenant's files rules decide transfers by path, so a transfer may not follow a link",
				abs, path.Join(r.t.Root, cur))
		}
	}
	return nil
}

// openNoFollow opens rel below r without following a symlink anywhere on
// the way (see Limits.NoSymlinks): one component at a time, each opened
// with O_NOFOLLOW relative to the directory opened before it, so what is
// read is what was at the path decided at the moment of the open. A check
// of the path and then an open of it would race: a command renaming a
// symlink over a checked component in between carries the open elsewhere.
// flags are the final component's (O_NOFOLLOW and O_CLOEXEC are added).
func (r *root) openNoFollow(rel, abs string, flags int) (*os.File, error) {
	d, err := r.Open(".")
	if err != nil {
		return nil, r.t.pathError(abs, err)
	}
	if rel == "." {
		return d, nil
	}
	comps := strings.Split(rel, "/")
	for i, c := range comps {
		fl := syscall.O_RDONLY | syscall.O_DIRECTORY
		if i == len(comps)-1 {
			fl = flags
		}
		dirfd := int(d.Fd())
		var fd int
		for {
			fd, err = syscall.Openat(dirfd, c, fl|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
			if err != syscall.EINTR {
				break
			}
		}
		if err != nil {
			// Which error a symlink gives depends on the flags (ELOOP,
			// ENOTDIR with O_DIRECTORY): look, to name it.
			var st unix.Stat_t
			link := (err == syscall.ELOOP || err == syscall.ENOTDIR) &&
				unix.Fstatat(dirfd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
				st.Mode&unix.S_IFMT == unix.S_IFLNK
			d.Close()
			if link {
				return nil, executor.Errorf(executor.ErrInvalid, "%s goes through the symlink %s: the tenant's files rules decide transfers by path, so a transfer may not follow a link",
					abs, path.Join(r.t.Root, path.Join(comps[:i+1]...)))
			}
			return nil, r.t.pathError(abs, &fs.PathError{Op: "openat", Path: abs, Err: err})
		}
		d.Close()
		d = os.NewFile(uintptr(fd), path.Join(r.t.Root, path.Join(comps[:i+1]...)))
	}
	return d, nil
}

// root is the tree's root, open, and its real path.
type root struct {
	*os.Root
	real string
	t    Tree
}

// inRoot runs fn as the tree's user (asUser) with the tree's root open;
// the root is closed when fn returns.
func (t Tree) inRoot(fn func(r *root) error) error {
	return t.asUser(func() error {
		r, err := t.openRoot()
		if err != nil {
			return err
		}
		defer r.Close()
		return fn(r)
	})
}

// openRoot opens the tree's root.
func (t Tree) openRoot() (*root, error) {
	r, err := os.OpenRoot(t.Root)
	if err != nil {
		return nil, executor.Errorf(executor.ErrUnavailable, "session root %s: %w", t.Root, err)
	}
	d, err := r.Open(".")
	if err != nil {
		r.Close()
		return nil, executor.Errorf(executor.ErrUnavailable, "session root %s: %w", t.Root, err)
	}
	defer d.Close()
	real, err := fdPath(d)
	if err != nil {
		r.Close()
		return nil, executor.Errorf(executor.ErrUnavailable, "session root %s: %w", t.Root, err)
	}
	return &root{Root: r, real: real, t: t}, nil
}

// fdPath is the real path of an open file.
func fdPath(f *os.File) (string, error) {
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
}

// check makes sure f, opened below the root for abs, really is inside it:
// the second line behind os.Root, whose walk gVisor does not confine (it
// follows a symlink to /etc). f is closed when it is not.
func (r *root) check(f *os.File, abs string) error {
	real, err := fdPath(f)
	if err == nil && executor.Within(real, r.real) {
		return nil
	}
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", abs, err)
	}
	return executor.Errorf(executor.ErrInvalid, "invalid path: %s leads outside the session root %s (through a symlink)", abs, r.t.Root)
}

// openDir opens the directory rel below r as a root of its own, checked
// to be inside r.
func (r *root) openDir(rel, abs string) (*os.Root, error) {
	d, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, r.t.pathError(abs, err)
	}
	return r.subRoot(d, abs)
}

// openDirNoFollow is openDir through openNoFollow: no symlink on the way.
func (r *root) openDirNoFollow(rel, abs string) (*os.Root, error) {
	d, err := r.openNoFollow(rel, abs, os.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	return r.subRoot(d, abs)
}

// subRoot makes the open directory d, checked to be inside r, a root of
// its own; d is closed.
func (r *root) subRoot(d *os.File, abs string) (*os.Root, error) {
	if err := r.check(d, abs); err != nil {
		return nil, err
	}
	defer d.Close()
	sub, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(int(d.Fd())))
	if err != nil {
		return nil, r.t.pathError(abs, err)
	}
	return sub, nil
}

// Stat describes the file at p, without following a final symlink.
func (t Tree) Stat(p string) (Info, error) {
	abs, rel, err := t.resolve(p)
	if err != nil {
		return Info{}, err
	}
	var info Info
	err = t.inRoot(func(r *root) error {
		dir, err := r.openDir(path.Dir(rel), abs)
		if err != nil {
			return err
		}
		defer dir.Close()
		base := path.Base(rel)
		fi, err := dir.Lstat(base)
		if err != nil {
			return t.pathError(p, err)
		}
		info = infoOf(abs, fi)
		if info.Type == TypeSymlink {
			info.Target, _ = dir.Readlink(base)
		}
		return nil
	})
	return info, err
}

func infoOf(abs string, fi fs.FileInfo) Info {
	return Info{Path: abs, Type: typeOf(fi.Mode()), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime().UTC()}
}

// pathError classes a failure to reach p: missing is not found; a symlink
// that leads out, a component that is not a directory, a loop, a denied
// permission are invalid. The message names p as the caller wrote it.
func (t Tree) pathError(p string, err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	var cause = err
	if errors.As(err, &pe) {
		cause = pe.Err
	} else if errors.As(err, &le) {
		cause = le.Err
	}
	switch {
	case escapes(err):
		return executor.Errorf(executor.ErrInvalid, "invalid path: %s leads outside the session root %s (through a symlink)", p, t.Root)
	case errors.Is(err, fs.ErrNotExist):
		return executor.Errorf(executor.ErrNotFound, "no such file or directory: %s", p)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return executor.Errorf(ErrNoSpace, "no space left on the filesystem of %s (ENOSPC)", p)
	case errors.Is(err, syscall.ENOTDIR):
		return executor.Errorf(executor.ErrInvalid, "invalid path: %s: a component is not a directory", p)
	case errors.Is(err, syscall.ELOOP):
		return executor.Errorf(executor.ErrInvalid, "invalid path: %s: too many levels of symlinks", p)
	case errors.Is(err, syscall.EISDIR):
		return executor.Errorf(executor.ErrInvalid, "%s is a directory, not a file", p)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return executor.Errorf(executor.ErrInvalid, "%s: %w", p, cause)
	}
	return fmt.Errorf("%s: %w", p, cause)
}

// escapes reports os.Root's error for a path that leaves it; it has no
// exported sentinel.
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// capReader fails once more than max bytes were read, with an error naming
// the path and the limit.
type capReader struct {
	r    io.Reader
	n    int64
	max  int64
	path string
	// zeros counts the zero bytes read last: a tar ends with two zero
	// blocks, which archive/tar does not insist on.
	zeros int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, tooLarge(c.path, c.max)
	}
	if rest := c.max + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	// The trailing run of zeros, scanned from the end: data that is not
	// zeros stops the scan at once.
	i := n - 1
	for i >= 0 && p[i] == 0 {
		i--
	}
	if i < 0 {
		c.zeros += int64(n)
	} else {
		c.zeros = int64(n - 1 - i)
	}
	if c.n > c.max {
		return n, tooLarge(c.path, c.max)
	}
	return n, err
}

func tooLarge(p string, max int64) error {
	return executor.Errorf(ErrTooLarge, "upload of %s exceeds the limit of %d bytes (policy files.maxBytes)", p, max)
}
