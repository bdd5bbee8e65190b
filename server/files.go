package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"

	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/internal/mediatype"
)

// The media types and header of the REST file endpoints (openapi.json),
// the server's own contract with its clients. Their values are the agent
// protocol's (ContentTar, ...) by choice, not need: the server
// turns them into a bool (PutFileOptions.Tar, GetFile's tar) before the
// backend asks an agent anything, so either wire may change alone.
const (
	// ContentTar is a tar stream: a directory (or a file with its name and
	// mode).
	ContentTar = "application/x-tar"
	// ContentBytes is a file's bytes.
	ContentBytes = "application/octet-stream"
	// HeaderFile carries, on a download, the files.Info of what was asked
	// for as JSON (for a directory, Size is the total of its files).
	HeaderFile = "Shellbox-File"
)

// FileTransfer is an optional ability of a Backend: files in and out of a
// session, where its commands run (PUT, GET /v1/sessions/{id}/files). The
// session's sandbox is created on first use, as a tool call would. Paths
// are absolute inside the session root or relative to it, and resolved
// where the files are, with no ".." or symlink leading out (package
// executor/files says how, and what is atomic).
//
// Errors wrap the server's classes: ErrInvalid (a path outside the root, a
// symlink out, a directory where a file is expected or the reverse, a bad
// tar, an interrupted upload: 400), ErrNotAllowed (the policy's files
// rules: 403), ErrNotFound (404), ErrTooLarge (over the policy's cap: 413),
// ErrNoSpace (a full workspace: 507), ErrUnavailable (503).
type FileTransfer interface {
	// PutFile writes body at path: a file's bytes, or with o.Tar a tar
	// whose entries go into the directory at path. body is read to its
	// end or until the cap; nothing is visible unless it all arrived.
	PutFile(ctx context.Context, tenant, session, path string, body io.Reader, o PutFileOptions) (files.Written, error)
	// GetFile reads path: a regular file's bytes, or with tar a tar of
	// path (a directory and everything below it, or one file), its entries
	// named after path's last element. The caller closes the body.
	GetFile(ctx context.Context, tenant, session, path string, tar bool) (files.Info, io.ReadCloser, error)
	// StatFile describes path, without following a final symlink.
	StatFile(ctx context.Context, tenant, session, path string) (files.Info, error)
}

// PutFileOptions describe an upload.
type PutFileOptions struct {
	// Tar: the body is a tar stream into the directory at the path.
	Tar bool
	// Mode is a file's permission bits (0: 0644).
	Mode fs.FileMode
	// Size is the body's declared length, -1 when unknown: over the cap,
	// the upload is refused before it is read.
	Size int64
}

// Error classes of FileTransfer beyond those of Backend: the classes of
// errdefs.
var (
	ErrNotFound = errdefs.ErrNotFound
	ErrTooLarge = errdefs.ErrTooLarge
	ErrNoSpace  = errdefs.ErrNoSpace
)

// isFileUpload reports a request to PUT /v1/sessions/{id}/files: its body
// is capped by the tenant's policy as it streams, not by MaxBodyBytes.
func isFileUpload(r *http.Request) bool {
	if r.Method != http.MethodPut {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	if !ok {
		return false
	}
	id, tail, ok := strings.Cut(rest, "/")
	return ok && id != "" && tail == "files"
}

// fileTransfer returns the backend's FileTransfer, or writes the 501.
func (s *Server) fileTransfer(w http.ResponseWriter) (FileTransfer, bool) {
	ft, ok := s.cfg.Backend.(FileTransfer)
	if !ok {
		writeError(w, http.StatusNotImplemented, "not_implemented", "this server's backend cannot transfer files")
	}
	return ft, ok
}

// fileRequest reads what every files request names (the session, the path)
// and takes a call slot of the tenant for it (a stat may create the
// sandbox, as any transfer may); done releases the slot. ok false: the
// answer is written.
func (s *Server) fileRequest(w http.ResponseWriter, r *http.Request) (id, p string, ft FileTransfer, tenant string, done func(), ok bool) {
	if id, ok = s.sessionID(w, r); !ok {
		return
	}
	if p, ok = filePath(w, r); !ok {
		return
	}
	if ft, ok = s.fileTransfer(w); !ok {
		return
	}
	tenant = tenantOf(r.Context())
	done, ok = s.beginTransfer(r.Context(), w, tenant)
	return
}

// FileError narrows an error of executor/files (or the executor's) to the
// one class the server answers a transfer with, for a FileTransfer
// implementation: an abort is the client's doing (ErrInvalid), and a class
// the server maps to no status (ErrLimit) or none at all is ErrUnavailable.
func FileError(err error) error {
	class := errdefs.ErrUnavailable
	switch {
	case errors.Is(err, errdefs.ErrInvalid), errors.Is(err, errdefs.ErrAborted):
		class = errdefs.ErrInvalid
	case errors.Is(err, errdefs.ErrNotFound):
		class = errdefs.ErrNotFound
	case errors.Is(err, errdefs.ErrTooLarge):
		class = errdefs.ErrTooLarge
	case errors.Is(err, errdefs.ErrNoSpace):
		class = errdefs.ErrNoSpace
	}
	return errdefs.Errorf(class, "%v", err)
}

// beginTransfer takes a call slot of the tenant and registers with Drain,
// as a tool call does; the returned func releases both.
func (s *Server) beginTransfer(ctx context.Context, w http.ResponseWriter, tenant string) (func(), bool) {
	tl := s.limits[tenant]
	if tl != nil {
		if err := tl.acquire(); err != nil {
			s.writeCallErr(w, &limitError{err.Error()})
			return nil, false
		}
	}
	if !s.beginCall(ctx) {
		if tl != nil {
			tl.release()
		}
		s.writeCallErr(w, errDraining)
		return nil, false
	}
	return func() {
		s.endCall()
		if tl != nil {
			tl.release()
		}
	}, true
}

// filePath reads the ?path= query.
func filePath(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, "invalid", "the path query parameter is required (?path=/workspace/file)")
		return "", false
	}
	setLogAttr(r.Context(), "path", clip(p, 200))
	return p, true
}

// putFile serves PUT /v1/sessions/{id}/files?path=P[&mode=0644].
func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	id, p, ft, tenant, done, ok := s.fileRequest(w, r)
	if !ok {
		return
	}
	defer done()
	o := PutFileOptions{Tar: mediatype.Includes(r.Header.Get("Content-Type"), ContentTar), Size: r.ContentLength}
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o777 {
			writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("invalid mode %q: want octal permission bits such as 0644", m))
			return
		}
		o.Mode = fs.FileMode(v)
	}
	res, err := ft.PutFile(r.Context(), tenant, id, p, r.Body, o)
	if err != nil {
		s.countError("files")
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// getFile serves GET /v1/sessions/{id}/files?path=P: a file's bytes, or
// with Accept: application/x-tar a tar of P. The Shellbox-File header
// carries what P is (files.Info as JSON).
func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	id, p, ft, tenant, done, ok := s.fileRequest(w, r)
	if !ok {
		return
	}
	defer done()
	tar := mediatype.Includes(r.Header.Get("Accept"), ContentTar)
	info, body, err := ft.GetFile(r.Context(), tenant, id, p, tar)
	if err != nil {
		s.countError("files")
		writeErr(w, err)
		return
	}
	defer body.Close()
	b, _ := json.Marshal(info)
	w.Header().Set(HeaderFile, string(b))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if tar {
		w.Header().Set("Content-Type", ContentTar)
	} else {
		w.Header().Set("Content-Type", ContentBytes)
		w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.CopyBuffer(w, body, make([]byte, 256<<10)); err != nil {
		// Begun: break the connection, so the client's read fails rather
		// than see a clean end of a short stream.
		panic(http.ErrAbortHandler)
	}
}

// statFile serves GET /v1/sessions/{id}/files/stat?path=P.
func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	id, p, ft, tenant, done, ok := s.fileRequest(w, r)
	if !ok {
		return
	}
	defer done()
	info, err := ft.StatFile(r.Context(), tenant, id, p)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}
