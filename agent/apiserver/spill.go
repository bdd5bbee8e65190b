package apiserver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/shellbox/shellbox/executor"
)

// spillPrefix is the spill directory with a trailing slash: what a spill
// file's path starts with.
func (s *Server) spillPrefix() string {
	return strings.TrimSuffix(s.cfg.SpillDir, "/") + "/"
}

// spill serves GET /v1/spill?path=P[&offset=N][&limit=M]: the bytes of the
// spill file P (an absolute path strictly inside the spill directory, as
// executor.Result.SpillPath names it) from offset N, at most M of them. The
// file is opened through an os.Root on the spill directory, so neither ".."
// nor a symlink can lead out of it, and only a regular file is served.
func (s *Server) spill(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := q.Get("path")
	offset, err := queryInt(q, "offset", 0)
	if err != nil {
		writeError(w, err)
		return
	}
	limit, err := queryInt(q, "limit", -1)
	if err != nil {
		writeError(w, err)
		return
	}
	rel, ok := strings.CutPrefix(p, s.spillPrefix())
	if !ok || p != filepath.Clean(p) || !filepath.IsLocal(rel) || strings.ContainsRune(rel, 0) {
		writeError(w, executor.Errorf(executor.ErrInvalid, "not a spill file: %q is not inside %s", p, s.cfg.SpillDir))
		return
	}
	f, size, err := openSpill(s.cfg.SpillDir, rel, p)
	if err != nil {
		writeError(w, err)
		return
	}
	defer f.Close()
	// What the file holds now: a running task's spill grows meanwhile, and
	// the client pages on with the next offset.
	n := max(size-offset, 0)
	if limit >= 0 {
		n = min(n, limit)
	}
	if n > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			writeError(w, fmt.Errorf("agent: spill file %s: %w", p, err))
			return
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	// A failure here (the client went away) leaves the body short of its
	// Content-Length: net/http closes the connection and the client's read
	// fails, so a short read is never mistaken for the file's end.
	io.Copy(w, io.LimitReader(f, n))
}

// openSpill opens rel under dir, refusing anything but a regular file (a
// symlink, even one that stays inside, a directory, a FIFO, a device). p is
// the path the client named, for messages. The file is Lstat'ed, then opened
// without blocking (a FIFO swapped in meanwhile must not hang the handler),
// and must be the very file the Lstat saw: os.Root follows a final symlink
// that stays inside, so one swapped in meanwhile is caught here.
func openSpill(dir, rel, p string) (*os.File, int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, noSpill(p)
		}
		return nil, 0, fmt.Errorf("agent: spill dir: %w", err)
	}
	defer root.Close()
	before, err := root.Lstat(rel)
	if err != nil {
		return nil, 0, spillOpenError(p, err)
	}
	if !before.Mode().IsRegular() {
		return nil, 0, notRegular(p, before.Mode())
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, spillOpenError(p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("agent: spill file %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, notRegular(p, fi.Mode())
	}
	if !os.SameFile(before, fi) {
		f.Close()
		return nil, 0, executor.Errorf(executor.ErrInvalid, "not a spill file: %s was replaced while it was opened", p)
	}
	return f, fi.Size(), nil
}

func noSpill(p string) error {
	return executor.Errorf(executor.ErrNotFound, "no such spill file: %s", p)
}

func notRegular(p string, m fs.FileMode) error {
	return executor.Errorf(executor.ErrInvalid, "not a spill file: %s is not a regular file (%s)", p, m.Type())
}

// spillOpenError classes a failure to find or open a spill file: missing is
// not_found; anything else (a path through a symlink that leaves the spill
// directory, a component that is not a directory, a symlink loop) is a path
// that names no spill file, invalid.
func spillOpenError(p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return noSpill(p)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the relative name in it is p's tail: p says more
	}
	return executor.Errorf(executor.ErrInvalid, "not a spill file: %s: %w", p, err)
}

// queryInt is the non-negative integer query parameter name, or def when
// absent.
func queryInt(q url.Values, name string, def int64) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, executor.Errorf(executor.ErrInvalid, "invalid %s %q: want a non-negative integer", name, v)
	}
	return n, nil
}
