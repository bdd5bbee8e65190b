package apiserver

import (
	"encoding/json"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
)

// transferCaps reads the caps of a transfer: max bytes and entries
// (0: the default).
func transferCaps(q url.Values) (int64, int, error) {
	max, err := queryInt(q, "max", 0)
	if err != nil {
		return 0, 0, err
	}
	entries, err := queryInt(q, "entries", 0)
	if err != nil {
		return 0, 0, err
	}
	return max, int(min(entries, 1<<30)), nil
}

// filesLimits reads the caps of a files request.
func filesLimits(q url.Values) (files.Limits, error) {
	max, entries, err := transferCaps(q)
	if err != nil {
		return files.Limits{}, err
	}
	return files.Limits{MaxBytes: max, MaxEntries: entries, NoSymlinks: q.Get("nosymlinks") == "1", OneLink: q.Get("onelink") == "1"}, nil
}

// putFile serves PUT /v1/files?path=P[&max=N][&entries=M][&mode=0644]: the
// body is the file's bytes, or with Content-Type application/x-tar a tar
// whose entries go into the directory P.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lim, err := filesLimits(q)
	if err != nil {
		writeError(w, err)
		return
	}
	o := files.PutOptions{Tar: agentapi.IsTar(r.Header.Get("Content-Type")), Limits: lim}
	if m := q.Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o777 {
			writeError(w, executor.Errorf(executor.ErrInvalid, "invalid mode %q: want octal permission bits such as 0644", m))
			return
		}
		o.Mode = fs.FileMode(v)
	}
	if r.ContentLength > 0 && lim.MaxBytes > 0 && r.ContentLength > lim.MaxBytes {
		writeError(w, executor.Errorf(files.ErrTooLarge, "upload of %s (%d bytes) exceeds the limit of %d bytes (policy files.maxBytes)", q.Get("path"), r.ContentLength, lim.MaxBytes))
		return
	}
	res, err := s.cfg.Files.Put(r.Context(), q.Get("path"), r.Body, o)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// getFile serves GET /v1/files?path=P[&max=N][&entries=M]: the file's
// bytes, or with Accept: application/x-tar a tar of P.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lim, err := filesLimits(q)
	if err != nil {
		writeError(w, err)
		return
	}
	o := files.GetOptions{Tar: agentapi.IsTar(r.Header.Get("Accept")), Limits: lim}
	started := false
	err = s.cfg.Files.Get(r.Context(), q.Get("path"), o, func(info files.Info) (io.Writer, error) {
		started = true
		b, _ := json.Marshal(info)
		w.Header().Set(agentapi.HeaderFile, string(b))
		if o.Tar {
			w.Header().Set("Content-Type", agentapi.ContentTar)
		} else {
			w.Header().Set("Content-Type", agentapi.ContentBytes)
			w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
		}
		w.WriteHeader(http.StatusOK)
		return w, nil
	})
	if err == nil {
		return
	}
	if !started {
		writeError(w, err)
		return
	}
	// The answer has begun: break the connection, so the client's read
	// fails rather than see a clean end of a short stream.
	panic(http.ErrAbortHandler)
}

// statFile serves GET /v1/files/stat?path=P: files.Info, without following
// a final symlink.
func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	info, err := s.cfg.Files.Stat(r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}
