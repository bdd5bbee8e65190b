package apiserver

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/workspace"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
)

// holdWorkspace reads a workspace request's caps and takes the workspace
// for it (release with s.workspace.Unlock); when it cannot, it answers
// why and reports false. One export or import at a time: each moves the
// whole workspace.
func (s *Server) holdWorkspace(w http.ResponseWriter, r *http.Request) (agentapi.WorkspaceLimits, bool) {
	max, entries, err := transferCaps(r.URL.Query())
	if err != nil {
		writeError(w, err)
		return agentapi.WorkspaceLimits{}, false
	}
	if !s.workspace.TryLock() {
		writeError(w, executor.Errorf(executor.ErrUnavailable, "agent: a workspace export or import is in progress; try again once it ends"))
		return agentapi.WorkspaceLimits{}, false
	}
	return agentapi.WorkspaceLimits{MaxBytes: max, MaxEntries: entries}, true
}

// exportWorkspace serves GET /v1/workspace[?max=N][&entries=M]: the
// workspace as one stream (agentapi.ContentWorkspace, package
// agentapi/workspace), its WorkspaceStats as a trailer once the stream is
// whole.
func (s *Server) exportWorkspace(w http.ResponseWriter, r *http.Request) {
	lim, ok := s.holdWorkspace(w, r)
	if !ok {
		return
	}
	defer s.workspace.Unlock()
	out := &startWriter{w: w, start: func() {
		w.Header().Set("Content-Type", agentapi.ContentWorkspace)
		w.Header().Set("Trailer", agentapi.HeaderWorkspaceStats)
		w.WriteHeader(http.StatusOK)
	}}
	var st agentapi.WorkspaceStats
	err := s.asWorkspaceUser(func() error {
		var err error
		st, err = workspace.Export(r.Context(), s.cfg.Workspace.Root, out, lim)
		return err
	})
	if err == nil {
		out.begin()
		b, _ := json.Marshal(st)
		w.Header().Set(agentapi.HeaderWorkspaceStats, string(b))
		return
	}
	if !out.started {
		writeError(w, err)
		return
	}
	// The answer has begun: break the connection, so the client's read
	// fails rather than see a clean end of a short stream.
	panic(http.ErrAbortHandler)
}

// importWorkspace serves PUT /v1/workspace[?max=N][&entries=M]: the
// body, a stream an export wrote, replaces the workspace's content,
// swapped in only once whole (workspace.Import) → WorkspaceStats.
func (s *Server) importWorkspace(w http.ResponseWriter, r *http.Request) {
	lim, ok := s.holdWorkspace(w, r)
	if !ok {
		return
	}
	defer s.workspace.Unlock()
	var st agentapi.WorkspaceStats
	err := s.asWorkspaceUser(func() error {
		var err error
		st, err = workspace.Import(r.Context(), s.cfg.Workspace.Root, r.Body, lim)
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// asWorkspaceUser runs fn as the workspace's user, as the files
// endpoints do: what an import makes is the user's, and an export reads
// nothing the commands could not.
func (s *Server) asWorkspaceUser(fn func() error) error {
	if t := s.cfg.Workspace; t.UID >= 0 {
		return files.AsUser(t.UID, t.GID, fn)
	}
	return fn()
}

// startWriter begins the answer (start) at its first write.
type startWriter struct {
	w       io.Writer
	start   func()
	started bool
}

func (s *startWriter) begin() {
	if !s.started {
		s.started = true
		s.start()
	}
}

func (s *startWriter) Write(p []byte) (int, error) {
	s.begin()
	return s.w.Write(p)
}
