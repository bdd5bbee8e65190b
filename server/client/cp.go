package client

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/server"
)

// Transfer is what CopyIn and CopyOut need of a session's files: a Client,
// or the session layer of a process that runs the sandboxes itself.
type Transfer interface {
	PutFile(ctx context.Context, session, path string, body io.Reader, o PutOptions) (files.Written, error)
	GetFile(ctx context.Context, session, path string, tar bool) (files.Info, io.ReadCloser, error)
	StatFile(ctx context.Context, session, path string) (files.Info, error)
}

var _ Transfer = (*Client)(nil)

// Path is one side of a copy: a session's path, or (Session "") a local one.
type Path struct {
	Session, Path string
}

func (p Path) String() string {
	if p.Session == "" {
		return p.Path
	}
	return p.Session + ":" + p.Path
}

// ParsePath splits SESSION:PATH; anything else (a path starting with / or
// ., or without a colon, or "-") is local.
func ParsePath(s string) Path {
	if s == "-" || strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return Path{Path: s}
	}
	sess, p, ok := strings.Cut(s, ":")
	if !ok || executor.ValidSession(sess) != nil {
		return Path{Path: s}
	}
	if p == "" {
		p = "."
	}
	return Path{Session: sess, Path: p}
}

// notFound reports a refusal that says the path does not exist.
func notFound(err error) bool {
	var ce *Error
	return errors.Is(err, server.ErrNotFound) || (errors.As(err, &ce) && ce.Status == 404 && ce.Code == "not_found")
}

// statRemote describes a session's path; ok false when it does not exist.
func statRemote(ctx context.Context, t Transfer, dst Path) (files.Info, bool, error) {
	info, err := t.StatFile(ctx, dst.Session, dst.Path)
	if notFound(err) {
		return files.Info{}, false, nil
	}
	return info, err == nil, err
}

// CopyIn copies the local src (a file or a directory; "-": a tar read
// from stdin) into a session, as docker cp does: into dst when it is a
// directory, else to that name. It returns what was written and where.
func CopyIn(ctx context.Context, t Transfer, src string, dst Path, stdin io.Reader) (files.Written, string, error) {
	if src == "-" {
		w, err := t.PutFile(ctx, dst.Session, dst.Path, stdin, PutOptions{Tar: true})
		return w, dst.String(), err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return files.Written{}, "", err
	}
	info, exists, err := statRemote(ctx, t, dst)
	if err != nil {
		return files.Written{}, "", err
	}
	into := exists && info.Type == files.TypeDirectory
	target := dst.Path
	if fi.Mode().IsRegular() {
		if into || strings.HasSuffix(dst.Path, "/") {
			target = path.Join(dst.Path, filepath.Base(src))
		}
		f, err := os.Open(src)
		if err != nil {
			return files.Written{}, "", err
		}
		defer f.Close()
		w, err := t.PutFile(ctx, dst.Session, target, f, PutOptions{Mode: fi.Mode().Perm(), Size: fi.Size()})
		return w, dst.Session + ":" + target, err
	}
	if !fi.IsDir() {
		return files.Written{}, "", fmt.Errorf("%s is neither a regular file nor a directory", src)
	}
	if exists && !into {
		return files.Written{}, "", fmt.Errorf("cannot copy the directory %s onto %s: it is a %s", src, dst, info.Type)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return files.Written{}, "", err
	}
	// A tar of the directory, its entries under its own name: into an
	// existing directory as is, as a new directory with the name dropped.
	parent := files.Tree{Root: filepath.Dir(abs), UID: -1, GID: -1}
	_, body, err := parent.Open(ctx, filepath.Base(abs), files.GetOptions{Tar: true, Limits: files.Limits{MaxBytes: 1 << 62, MaxEntries: 1 << 30}})
	if err != nil {
		return files.Written{}, "", err
	}
	defer body.Close()
	var r io.Reader = body
	if !into {
		r = stripTar(body, filepath.Base(abs))
	}
	w, err := t.PutFile(ctx, dst.Session, dst.Path, r, PutOptions{Tar: true})
	return w, dst.String(), err
}

// CopyOut copies a session's src to the local dst (a file or a directory;
// "-": a tar written to stdout), as docker cp does. A tar from the sandbox
// is checked as an upload into one is: it cannot lead out of dst.
func CopyOut(ctx context.Context, t Transfer, src Path, dst string, stdout io.Writer) (files.Written, error) {
	if dst == "-" {
		_, body, err := t.GetFile(ctx, src.Session, src.Path, true)
		if err != nil {
			return files.Written{}, err
		}
		defer body.Close()
		n, err := io.Copy(stdout, body)
		return files.Written{Bytes: n}, err
	}
	info, err := t.StatFile(ctx, src.Session, src.Path)
	if err != nil {
		return files.Written{}, err
	}
	abs, err := filepath.Abs(dst)
	if err != nil {
		return files.Written{}, err
	}
	lfi, lerr := os.Stat(abs)
	into := lerr == nil && lfi.IsDir()
	name := filepath.Base(abs)
	local := files.Tree{Root: filepath.Dir(abs), UID: -1, GID: -1}
	if into {
		local, name = files.Tree{Root: abs, UID: -1, GID: -1}, path.Base(info.Path)
	}
	noCap := files.Limits{MaxBytes: 1 << 62, MaxEntries: 1 << 30}
	var w files.Written
	switch info.Type {
	case files.TypeFile:
		_, body, err := t.GetFile(ctx, src.Session, src.Path, false)
		if err != nil {
			return files.Written{}, err
		}
		defer body.Close()
		w, err = local.Put(ctx, name, body, files.PutOptions{Mode: info.Mode.Perm(), Limits: noCap})
		if err != nil {
			return files.Written{}, err
		}
	case files.TypeDirectory:
		if lerr == nil && !into {
			return files.Written{}, fmt.Errorf("cannot copy the directory %s onto the file %s", src, dst)
		}
		_, body, err := t.GetFile(ctx, src.Session, src.Path, true)
		if err != nil {
			return files.Written{}, err
		}
		defer body.Close()
		var r io.Reader = body
		target := "."
		if !into {
			r, target = stripTar(body, path.Base(info.Path)), name
		}
		// The same checks as an upload into a sandbox: a tar from a
		// sandbox cannot lead out of dst either.
		w, err = local.Put(ctx, target, r, files.PutOptions{Tar: true, Limits: noCap})
		if err != nil {
			return files.Written{}, err
		}
	default:
		return files.Written{}, fmt.Errorf("%s is a %s: only files and directories can be copied", src, info.Type)
	}
	return w, nil
}

// Describe says what a copy wrote: bytes, and files, directories and links
// when there is more than one file.
func Describe(w files.Written) string {
	s := fmt.Sprintf("%d bytes", w.Bytes)
	if w.Dirs > 0 || w.Files > 1 || w.Links > 0 {
		s += fmt.Sprintf(" (%d files, %d directories, %d links)", w.Files, w.Dirs, w.Links)
	}
	return s
}

// stripTar rewrites a tar whose entries are under prefix/ to entries
// relative to it (prefix/ itself becomes "./"), streaming.
func stripTar(r io.Reader, prefix string) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tr, tw := tar.NewReader(r), tar.NewWriter(pw)
		err := func() error {
			for {
				h, err := tr.Next()
				if err == io.EOF {
					return tw.Close()
				}
				if err != nil {
					return err
				}
				name := strings.TrimSuffix(h.Name, "/")
				switch {
				case name == prefix:
					h.Name = "./"
				case strings.HasPrefix(name, prefix+"/"):
					h.Name = strings.TrimPrefix(h.Name, prefix+"/")
				default:
					return fmt.Errorf("tar entry %q is not under %s/", h.Name, prefix)
				}
				if h.Typeflag == tar.TypeLink {
					h.Linkname = strings.TrimPrefix(h.Linkname, prefix+"/")
				}
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				if _, err := io.Copy(tw, tr); err != nil {
					return err
				}
			}
		}()
		pw.CloseWithError(err)
	}()
	return pr
}
