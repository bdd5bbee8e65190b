package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Names of what Import makes in the workspace's root while it works: the
// scratch the stream is restored into, and where the old entries wait
// until the new ones are in. Each ends in 16 hex digits.
const (
	importPrefix   = ".shellbox-import-"
	replacedPrefix = ".shellbox-replaced-"
)

// leftover matches the names Import makes, and no name of the session's
// that merely starts alike.
var leftover = regexp.MustCompile(`^\.shellbox-(import|replaced)-[0-9a-f]{16}$`)

// Export is Pack of the workspace at root, after removing what an
// interrupted Import left in it (see the package doc).
func Export(ctx context.Context, root string, w io.Writer, lim Limits) (Stats, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return Stats{}, rootError("pack", root, err)
	}
	sweep(r)
	r.Close()
	return Pack(ctx, root, w, lim)
}

// Import replaces the content of the workspace at root with the stream r
// (see the package doc): restored into a scratch directory in root, then
// swapped in only when whole, the root given the stream's mode, owner and
// mtime. On any error the workspace is as it was and nothing is left of
// the attempt; the errors are Unpack's, or the filesystem's during the
// swap. The caller keeps other writers out meanwhile (the agent: one
// export or import at a time).
func Import(ctx context.Context, root string, r io.Reader, lim Limits) (st Stats, err error) {
	rt, err := os.OpenRoot(root)
	if err != nil {
		return Stats{}, rootError("restore into", root, err)
	}
	defer rt.Close()
	if fi, serr := rt.Lstat("."); serr == nil {
		// Making and removing the scratch changes the root's mtime: a
		// failed import puts it back.
		defer func() {
			if err != nil {
				rt.Chtimes(".", time.Time{}, fi.ModTime())
			}
		}()
	}
	sweep(rt)
	scratch := importPrefix + suffix()
	if err := rt.Mkdir(scratch, 0o700); err != nil {
		return Stats{}, fmt.Errorf("workspace: restore into %s: %w", root, err)
	}
	defer removeTree(rt, scratch, 0) // once the swap moved its entries out, an empty directory
	sr, err := openRoot(rt, scratch)
	if err != nil {
		return Stats{}, fmt.Errorf("workspace: restore into %s: %w", root, err)
	}
	st, err = unpack(ctx, r, sr, root, lim)
	sr.Close()
	if err != nil {
		return st, err
	}
	if err := checkContext(ctx, "restore into", root); err != nil {
		return st, err
	}
	if err := swap(rt, scratch, &st); err != nil {
		return st, fmt.Errorf("workspace: restore into %s: swap the restored tree in: %w; the workspace is as it was", root, err)
	}
	return st, nil
}

// suffix is a fresh random suffix for Import's names.
func suffix() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// swap moves root's entries (but scratch) aside into a directory of their
// own, moves scratch's entries into root, and gives root scratch's own
// mode, owner, mtime and user xattrs; then removes the old entries. A
// failure while moving puts back what was moved.
func swap(rt *os.Root, scratch string, st *Stats) error {
	// The scratch's metadata is the stream's root's until its entries
	// move out.
	src, err := openDir(rt, scratch)
	if err != nil {
		return err
	}
	defer src.Close()
	var meta syscall.Stat_t
	if err := syscall.Fstat(int(src.Fd()), &meta); err != nil {
		return err
	}
	xattrs, err := readXattrs(int(src.Fd()), new(xattrBuf))
	if err != nil {
		return err
	}
	old, err := list(rt, ".")
	if err != nil {
		return err
	}
	fresh, err := list(rt, scratch)
	if err != nil {
		return err
	}
	aside := replacedPrefix + suffix()
	if err := rt.Mkdir(aside, 0o700); err != nil {
		return err
	}
	var out, in []string
	undo := func() {
		for _, n := range in {
			move(rt, n, path.Join(scratch, n))
		}
		for _, n := range out {
			move(rt, path.Join(aside, n), n)
		}
		rt.Remove(aside)
	}
	for _, n := range old {
		if n == scratch {
			continue
		}
		if err := move(rt, n, path.Join(aside, n)); err != nil {
			undo()
			return err
		}
		out = append(out, n)
	}
	for _, n := range fresh {
		if err := move(rt, path.Join(scratch, n), n); err != nil {
			undo()
			return err
		}
		in = append(in, n)
	}
	// Nothing fails from here on that the workspace's content depends
	// on: the old entries go, best effort (a leftover is swept by the
	// next Export or Import), and the root takes the stream's metadata.
	removeTree(rt, aside, 0)
	if err := rt.Remove(scratch); err != nil {
		return err
	}
	return adopt(rt, &meta, xattrs, st)
}

// move renames from to to in rt. A directory that moves to another
// parent must be writable (its ".." changes): one its owner made
// read-only is opened for the move, then given its mode again.
func move(rt *os.Root, from, to string) error {
	err := rt.Rename(from, to)
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	fi, lerr := rt.Lstat(from)
	if lerr != nil || !fi.IsDir() || fi.Mode().Perm()&0o200 != 0 {
		return err
	}
	if chmodDir(rt, from, fi.Mode()|0o200) != nil {
		return err
	}
	if err := rt.Rename(from, to); err != nil {
		chmodDir(rt, from, fi.Mode())
		return err
	}
	return chmodDir(rt, to, fi.Mode())
}

// chmodDir sets the mode of the directory name in rt through an O_PATH
// descriptor of it (chmodPinned): an O_PATH open needs no read permission
// (a directory of mode 0000 is opened up too); O_NOFOLLOW and O_DIRECTORY
// refuse a symlink or other file swapped in.
func chmodDir(rt *os.Root, name string, mode fs.FileMode) error {
	f, err := rt.OpenFile(name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return chmodPinned(int(f.Fd()), name, unixMode(mode))
}

// adopt gives the directory rt the mode, owner, mtime (meta's) and user
// xattrs of the stream's root.
func adopt(rt *os.Root, meta *syscall.Stat_t, want map[string]string, st *Stats) error {
	dst, err := rt.Open(".")
	if err != nil {
		return err
	}
	defer dst.Close()
	fd := int(dst.Fd())
	have, err := readXattrs(fd, new(xattrBuf))
	if err != nil {
		return err
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			unix.Fremovexattr(fd, k)
		}
	}
	for k, v := range want {
		if unix.Fsetxattr(fd, k, []byte(v), 0) != nil {
			st.XattrsSkipped++
		}
	}
	if err := unix.Fchown(fd, int(meta.Uid), int(meta.Gid)); err != nil {
		if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EINVAL) {
			return err
		}
		st.OwnersKept++
	}
	if err := rt.Chtimes(".", time.Time{}, time.Unix(meta.Mtim.Sec, meta.Mtim.Nsec)); err != nil {
		return err
	}
	return unix.Fchmod(fd, meta.Mode&0o7777)
}

// list is the names in the directory name of rt.
func list(rt *os.Root, name string) ([]string, error) {
	d, err := openDir(rt, name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// sweep removes what an interrupted Import left in the root, best
// effort: what it cannot remove stays, part of the workspace.
func sweep(rt *os.Root) {
	names, _ := list(rt, ".")
	for _, n := range names {
		if leftover.MatchString(n) {
			removeTree(rt, n, 0)
		}
	}
}

// removeTree removes name from rt and all it holds. A directory its
// owner made read-only (0555) is opened up first, as rm -rf cannot.
func removeTree(rt *os.Root, name string, depth int) error {
	err := rt.RemoveAll(name)
	if err == nil || !errors.Is(err, fs.ErrPermission) || depth > MaxDepth {
		return err
	}
	fi, lerr := rt.Lstat(name)
	if lerr != nil || !fi.IsDir() {
		return err
	}
	if cerr := chmodDir(rt, name, 0o700); cerr != nil {
		return err
	}
	sub, serr := openRoot(rt, name)
	if serr != nil {
		return err
	}
	names, _ := list(sub, ".")
	for _, n := range names {
		if fi, err := sub.Lstat(n); err == nil && fi.IsDir() {
			removeTree(sub, n, depth+1)
		}
	}
	sub.Close()
	return rt.RemoveAll(name)
}
