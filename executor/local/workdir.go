package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
)

// workdir is a confined, open working directory.
type workdir struct {
	f    *os.File
	real string // its real path, for PWD
}

// procPath is the path the child chdirs to: the open directory itself, so
// what was checked is what the command gets.
func (w *workdir) procPath() string {
	return "/proc/self/fd/" + strconv.Itoa(int(w.f.Fd()))
}

func (w *workdir) Close() error { return w.f.Close() }

// openWorkdir opens wd beneath root where the files are. os.Root walks the
// path itself and refuses ".." and symlinks that would leave root; the real
// path of the result is then checked against the real root as a second line.
// Errors are the shared executor errors, naming wd as the spec has it.
func openWorkdir(root, wd string) (*workdir, error) {
	if !executor.Within(wd, root) {
		return nil, executor.WorkdirOutside(wd, root)
	}
	if wd == root {
		return openRootDir(root)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		if missing(err) {
			return nil, executor.WorkdirMissing(wd)
		}
		return nil, executor.Errorf(executor.ErrUnavailable, "session root %s: %w", root, err)
	}
	defer r.Close()
	rootDir, err := r.Open(".")
	if err != nil {
		return nil, executor.Errorf(executor.ErrUnavailable, "session root %s: %w", root, err)
	}
	defer rootDir.Close()
	realRoot, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(rootDir.Fd())))
	if err != nil {
		return nil, executor.Errorf(executor.ErrUnavailable, "session root %s: %w", root, err)
	}

	rel := strings.TrimPrefix(strings.TrimPrefix(wd, root), "/")
	if rel == "" {
		rel = "."
	}
	f, err := openDir(r, rel)
	if escapes(err) {
		// os.Root refuses every absolute symlink, and so did this open, but
		// one that lands inside the root is fine (`ln -s $PWD/real link`).
		// Resolve the path as the kernel would, without opening anything,
		// and open the result beneath the root again: if a symlink is
		// swapped in between, that open refuses it, and the real-path check
		// below still has the last word.
		var resolved string
		if resolved, err = filepath.EvalSymlinks(wd); err == nil {
			if !executor.Within(resolved, realRoot) {
				return nil, executor.WorkdirOutside(wd, root)
			}
			rel = strings.TrimPrefix(strings.TrimPrefix(resolved, realRoot), "/")
			if rel == "" {
				rel = "."
			}
			f, err = openDir(r, rel)
		}
	}
	switch {
	case err == nil:
	case missing(err):
		return nil, executor.WorkdirMissing(wd)
	case escapes(err):
		return nil, executor.WorkdirOutside(wd, root)
	default:
		// The bare reason ("permission denied"), not os's "openat <rel>".
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, executor.Errorf(executor.ErrInvalid, "invalid workdir: %s: %w", wd, err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.IsDir() {
		f.Close()
		return nil, executor.WorkdirMissing(wd)
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, executor.Errorf(executor.ErrUnavailable, "workdir %s: %w", wd, err)
	}
	if !executor.Within(real, realRoot) {
		f.Close()
		return nil, executor.WorkdirOutside(wd, root)
	}
	return &workdir{f: f, real: real}, nil
}

// openRootDir opens the session root itself as the workdir, the common case:
// the root is the executor's own configuration, so there is nothing to
// confine and the os.Root walk is skipped. It is opened as os.OpenRoot would
// open it (following symlinks in its path), and PWD is its real path.
func openRootDir(root string) (*workdir, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if missing(err) {
			return nil, executor.WorkdirMissing(root)
		}
		return nil, executor.Errorf(executor.ErrUnavailable, "session root %s: %w", root, err)
	}
	f := os.NewFile(uintptr(fd), root)
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		f.Close()
		return nil, executor.Errorf(executor.ErrUnavailable, "session root %s: %w", root, err)
	}
	return &workdir{f: f, real: real}, nil
}

// openDir opens a directory beneath r. O_DIRECTORY makes anything else fail
// at once: opening a FIFO to look at it would block until a writer came.
func openDir(r *os.Root, name string) (*os.File, error) {
	return r.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY, 0)
}

// escapes reports os.Root's error for a path that leaves it; the error has
// no exported sentinel.
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP)
}
