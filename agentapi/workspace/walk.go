package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"syscall"

	"github.com/shellbox/shellbox/errdefs"
)

// node is one entry of a walk.
type node struct {
	// rel is its name relative to the root, "." for the root.
	rel string
	// st is its Lstat: what the walk chose it by.
	st *syscall.Stat_t
	// parent is its directory, name its name there; both unset for the
	// root.
	parent *os.Root
	name   string
	// self is a directory itself, opened from its parent and checked to
	// be the one st describes.
	self *os.Root
}

// open opens the node for reading (a directory: itself, for its xattrs),
// checked to be the file st describes: os.Root follows a symlink swapped
// in since the Lstat (never out of the root), and a FIFO swapped in would
// block an open without O_NONBLOCK.
func (n *node) open() (*os.File, error) {
	var f *os.File
	var err error
	if n.self != nil {
		f, err = n.self.Open(".")
	} else {
		f, err = n.parent.OpenFile(n.name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	}
	if err != nil {
		return nil, err
	}
	if err := sameFile(f, n.st); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openRoot opens the directory name in parent as an os.Root. It never
// blocks: os.Root.OpenRoot opens a name's last component without
// O_DIRECTORY or O_NONBLOCK, so a FIFO a process of the sandbox swaps in
// for the directory would block it until a writer came, whatever the
// context says. A name's other components are opened with O_DIRECTORY,
// and "." is the directory itself, never a FIFO. A symlink is still
// followed, inside parent: the caller checks what it opened.
func openRoot(parent *os.Root, name string) (*os.Root, error) {
	return parent.OpenRoot(name + "/.")
}

// openDir opens the directory name in parent for reading, never blocking
// (see openRoot).
func openDir(parent *os.Root, name string) (*os.File, error) {
	return parent.Open(name + "/.")
}

// errChanged is a file that is not what its Lstat said a moment before.
var errChanged = errdefs.Errorf(errdefs.ErrUnavailable, "it changed while being read (replaced or moved); try again once the workspace is quiet")

// sameFile checks that the open file f is the one st describes.
func sameFile(f *os.File, st *syscall.Stat_t) error {
	var got syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &got); err != nil {
		return err
	}
	if got.Dev != st.Dev || got.Ino != st.Ino || got.Mode&syscall.S_IFMT != st.Mode&syscall.S_IFMT {
		return errChanged
	}
	return nil
}

// walker visits the tree under a root in walk order: the root, then each
// directory's entries sorted by name, a directory before what it holds.
// Nothing is followed: each directory is an os.Root opened from its
// parent's and checked against its Lstat.
type walker struct {
	ctx  context.Context
	what string // "pack", for messages
	root string // the root's path, for messages
	// maxNames bounds the names the walk lists in all (0: none), which
	// bounds what it holds: the names of the directories being walked.
	maxNames int
	listed   int
	visit    func(n *node) error
}

// walk walks the tree under r.
func (w *walker) walk(r *os.Root) error {
	fi, err := r.Lstat(".")
	if err != nil {
		return rootError(w.what, w.root, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return rootError(w.what, w.root, syscall.ENOTDIR)
	}
	return w.dir(&node{rel: ".", st: st, self: r}, 0)
}

// fail is an error of walking rel.
func (w *walker) fail(rel string, err error) error {
	return fmt.Errorf("workspace: %s %s: %s: %w", w.what, w.root, shown(rel), err)
}

// dir visits the directory n, then what it holds.
func (w *walker) dir(n *node, depth int) error {
	if err := w.visit(n); err != nil {
		return err
	}
	names, err := w.names(n)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := checkContext(w.ctx, w.what, w.root); err != nil {
			return err
		}
		rel := path.Join(n.rel, name)
		fi, err := n.self.Lstat(name)
		if err != nil {
			return w.fail(rel, err)
		}
		// The bound is on every entry, as Unpack's is: a file in a
		// directory MaxDepth deep is refused here, not in the stream.
		if depth+1 > MaxDepth {
			return errdefs.Errorf(errdefs.ErrInvalid, "workspace: %s %s: %s: deeper than %d levels", w.what, w.root, shown(rel), MaxDepth)
		}
		c := &node{rel: rel, st: fi.Sys().(*syscall.Stat_t), parent: n.self, name: name}
		if c.st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			if err := w.visit(c); err != nil {
				return err
			}
			continue
		}
		if err := w.sub(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// sub opens the directory c from its parent, checks it, and walks it.
func (w *walker) sub(c *node, depth int) error {
	self, err := openRoot(c.parent, c.name)
	if errors.Is(err, syscall.ENOTDIR) {
		err = errChanged // its Lstat said a directory
	}
	if err != nil {
		return w.fail(c.rel, err)
	}
	defer self.Close()
	fi, err := self.Lstat(".")
	if err != nil {
		return w.fail(c.rel, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Dev != c.st.Dev || st.Ino != c.st.Ino {
		return w.fail(c.rel, errChanged)
	}
	c.self = self
	return w.dir(c, depth)
}

// names lists the directory n, sorted, within the walk's bound.
func (w *walker) names(n *node) ([]string, error) {
	f, err := n.self.Open(".")
	if err != nil {
		return nil, w.fail(n.rel, err)
	}
	defer f.Close()
	var names []string
	for {
		batch, err := f.Readdirnames(1024)
		names = append(names, batch...)
		w.listed += len(batch)
		if w.maxNames > 0 && w.listed > w.maxNames {
			return nil, errdefs.Errorf(errdefs.ErrTooLarge, "workspace: %s %s: %s: more than %d entries (the limit), sockets and devices counted",
				w.what, w.root, shown(n.rel), w.maxNames)
		}
		if err == io.EOF || len(batch) == 0 && err == nil {
			break
		}
		if err != nil {
			return nil, w.fail(n.rel, err)
		}
	}
	slices.Sort(names)
	return names, nil
}
