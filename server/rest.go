package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// ToolResponse is the body of POST /v1/sessions/{id}/tools/{tool}: the tool
// result, and an error object when the status is not 200.
type ToolResponse struct {
	Text    string         `json:"text"`
	IsError bool           `json:"isError"`
	Result  any            `json:"result"`
	Notices []tools.Notice `json:"notices,omitempty"`
	Error   *errorBody     `json:"error,omitempty"`
}

func toolResponse(r tools.Result) ToolResponse {
	return ToolResponse{Text: r.Text, IsError: r.IsError, Result: r.Value, Notices: r.Notices}
}

// readJSON reads a JSON body into v: 415 for another content type, 413 past
// the body limit, 400 for malformed JSON. An empty body leaves v as is.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	raw, ok := s.readRaw(w, r)
	if !ok {
		return false
	}
	if len(raw) == 0 {
		return true
	}
	if err := json.Unmarshal(raw, v); err != nil {
		s.countError("malformed_json")
		writeError(w, http.StatusBadRequest, "malformed_json", "malformed JSON body: "+err.Error())
		return false
	}
	return true
}

// readRaw reads the body and checks it is well-formed JSON (or empty).
func (s *Server) readRaw(w http.ResponseWriter, r *http.Request) (json.RawMessage, bool) {
	raw, ok := s.readBody(w, r)
	if !ok {
		return nil, false
	}
	if len(raw) > 0 && !json.Valid(raw) {
		s.countError("malformed_json")
		writeError(w, http.StatusBadRequest, "malformed_json", malformed(raw))
		return nil, false
	}
	return raw, true
}

func malformed(raw []byte) string {
	var v any
	err := json.Unmarshal(raw, &v)
	return "malformed JSON body: " + err.Error()
}

// readBody reads a body declared JSON, within the body limit.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (json.RawMessage, bool) {
	if !requireJSON(w, r) {
		s.countError("unsupported_media_type")
		return nil, false
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.countError("body_too_large")
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", s.bodyTooLarge())
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "bad_body", "reading the request body: "+err.Error())
		return nil, false
	}
	return raw, true
}

// sessionID reads and checks the {id} path value.
func (s *Server) sessionID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := validSession(id); err != nil {
		s.countError("invalid_session")
		writeError(w, http.StatusBadRequest, "invalid_session", err.Error())
		return "", false
	}
	setLogAttr(r.Context(), "session", id)
	return id, true
}

func (s *Server) callTool(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r.Context())
	id := r.PathValue("id")
	tool := r.PathValue("tool")
	if err := validSession(id); err != nil {
		// The tool result rides along, so a harness relays the same text
		// the model would get in process.
		resp := toolResponse(errorResult(err.Error()))
		resp.Error = &errorBody{Code: "invalid_session", Message: err.Error()}
		s.countError("invalid_session")
		writeJSON(w, http.StatusBadRequest, resp)
		return
	}
	setLogAttr(r.Context(), "session", id)
	setLogAttr(r.Context(), "tool", clip(tool, 64))
	raw, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if !knownTools[tool] {
		msg := "unknown tool: " + clip(tool, 64)
		resp := toolResponse(errorResult(msg))
		resp.Error = &errorBody{Code: "unknown_tool", Message: msg}
		s.countError("unknown_tool")
		writeJSON(w, http.StatusNotFound, resp)
		return
	}
	if wantsStream(r) {
		s.callStreamed(w, r, tenant, id, tool, raw)
		return
	}
	res, err := s.call(r.Context(), tenant, id, tool, raw, nil)
	if err != nil {
		s.writeCallErr(w, err)
		return
	}
	status, resp := s.callResponse(raw, res)
	writeJSON(w, status, resp)
}

// callStreamed is a tool call answered as server-sent events: "output"
// events (LiveOutput) while a foreground command runs, then one "result"
// event whose data is exactly the body the call answers without streaming
// (its status, when not 200, is in that body's error). A call refused
// before it ran, or answered with another status than 200 before any
// event, answers as without streaming.
func (s *Server) callStreamed(w http.ResponseWriter, r *http.Request, tenant, id, tool string, raw json.RawMessage) {
	sse := newSSEWriter(w)
	var live executor.Live
	stop := func() {}
	if streams(tool) {
		live, stop = liveFeed(r.Context(), func(chunks []executor.Chunk) error {
			for _, o := range liveOutputs(chunks) {
				if err := sse.event("output", o); err != nil {
					return err
				}
			}
			return nil
		})
	}
	stopKeepalive := sse.keepalive(s.liveKeepalive)
	res, err := s.call(r.Context(), tenant, id, tool, raw, live)
	stop()
	stopKeepalive()
	if err != nil && !sse.begun() {
		s.writeCallErr(w, err)
		return
	}
	if err != nil {
		// Refusals (limits, shutdown) come before the command runs, so
		// before any output; an error after output is the backend's.
		_, code := statusOf(err)
		sse.event("error", apiError{errorBody{Code: code, Message: err.Error()}})
		return
	}
	status, resp := s.callResponse(raw, res)
	if status != http.StatusOK && !sse.begun() {
		// Nothing was streamed (malformed arguments, an unknown task): the
		// plain answer keeps its status.
		writeJSON(w, status, resp)
		return
	}
	sse.event("result", resp)
}

// callResponse is the status and body of a finished tool call.
func (s *Server) callResponse(raw json.RawMessage, res tools.Result) (int, ToolResponse) {
	resp := toolResponse(res)
	status := http.StatusOK
	if len(raw) > 0 && !json.Valid(raw) {
		// The tool's own text rides along (the arguments error a model
		// would read), under the API's 400.
		status = http.StatusBadRequest
		s.countError("malformed_json")
		resp.Error = &errorBody{Code: "malformed_json", Message: malformed(raw)}
	} else if notFound(res) {
		status = http.StatusNotFound
		resp.Error = &errorBody{Code: "no_such_task", Message: res.Value.(*tools.ErrorValue).Message}
	}
	return status, resp
}

func (s *Server) writeCallErr(w http.ResponseWriter, err error) {
	var le *limitError
	switch {
	case errors.As(err, &le):
		s.countError("concurrency_limited")
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "concurrency_limited", le.msg)
	case errors.Is(err, errDraining):
		s.countError("draining")
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "draining", err.Error())
	default:
		s.countError("backend")
		status, code := statusOf(err)
		if status == http.StatusInternalServerError {
			status, code = http.StatusServiceUnavailable, "unavailable"
		}
		writeError(w, status, code, err.Error())
	}
}

// listTools lists the tools: of one session with ?session= (pwsh only
// where its image has it), else every tool the tenant's Toolset has.
func (s *Server) listTools(w http.ResponseWriter, r *http.Request) {
	tenant := tenantOf(r.Context())
	ts, err := s.cfg.Backend.Toolset(r.Context(), tenant)
	if err != nil {
		s.writeCallErr(w, err)
		return
	}
	defs := ts.AllDefinitions()
	if session := r.URL.Query().Get("session"); session != "" {
		if err := validSession(session); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_session", err.Error())
			return
		}
		defs = ts.Definitions(r.Context(), session)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": defs})
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	list, err := s.cfg.Backend.Sessions(r.Context(), tenantOf(r.Context()))
	if err != nil {
		writeErr(w, err)
		return
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	if list == nil {
		list = []SessionInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": list})
}

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	ID string `json:"id"`
	SessionOptions
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req CreateSessionRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if err := validSession(req.ID); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_session", err.Error())
		return
	}
	tenant := tenantOf(r.Context())
	info, err := s.cfg.Backend.CreateSession(r.Context(), tenant, req.ID, req.SessionOptions)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

// findSession returns the tenant's session id, or writes the 404.
func (s *Server) findSession(w http.ResponseWriter, r *http.Request) (SessionInfo, bool) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return SessionInfo{}, false
	}
	list, err := s.cfg.Backend.Sessions(r.Context(), tenantOf(r.Context()))
	if err != nil {
		writeErr(w, err)
		return SessionInfo{}, false
	}
	for _, si := range list {
		if si.ID == id {
			return si, true
		}
	}
	writeErr(w, NoSuchSession(id))
	return SessionInfo{}, false
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	if si, ok := s.findSession(w, r); ok {
		writeJSON(w, http.StatusOK, si)
	}
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	if err := s.cfg.Backend.DeleteSession(r.Context(), tenantOf(r.Context()), id); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ResumeRequest is the body of POST /v1/sessions/{id}/resume (optional).
type ResumeRequest struct {
	// Snapshot resumes a suspended session from one of its snapshots by
	// id (say the one before a corrupt newest); empty: its newest.
	Snapshot string `json:"snapshot,omitempty"`
}

// suspender is the Backend's Suspender, or an error answered.
func (s *Server) suspender(w http.ResponseWriter) (Suspender, bool) {
	sp, ok := s.cfg.Backend.(Suspender)
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid", "this server's backend suspends no sessions")
	}
	return sp, ok
}

func (s *Server) suspendSession(w http.ResponseWriter, r *http.Request) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	sp, ok := s.suspender(w)
	if !ok {
		return
	}
	si, err := sp.SuspendSession(r.Context(), tenantOf(r.Context()), id)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, si)
}

func (s *Server) resumeSession(w http.ResponseWriter, r *http.Request) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	var req ResumeRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	sp, ok := s.suspender(w)
	if !ok {
		return
	}
	si, err := sp.ResumeSession(r.Context(), tenantOf(r.Context()), id, req.Snapshot)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, si)
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) {
	list := []approval.Approval{}
	if s.cfg.Approvals != nil {
		tenant := tenantOf(r.Context())
		for _, a := range s.cfg.Approvals.List(tenant) {
			// The seam promises tenant scoping; checking costs nothing.
			if a.Tenant == tenant && (r.URL.Query().Get("state") == "" || r.URL.Query().Get("state") == a.State) {
				list = append(list, a)
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": list})
}

func (s *Server) getApproval(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if s.cfg.Approvals != nil {
		tenant := tenantOf(r.Context())
		for _, a := range s.cfg.Approvals.List(tenant) {
			if a.ID == id && a.Tenant == tenant {
				writeJSON(w, http.StatusOK, a)
				return
			}
		}
	}
	writeErr(w, NoSuchApproval(clip(id, 128)))
}

// DecisionRequest is the body of POST /v1/approvals/{id}/approve|deny.
type DecisionRequest struct {
	Approver string `json:"approver"`
	Reason   string `json:"reason"`
}

func (s *Server) decideApproval(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		var req DecisionRequest
		if !s.readJSON(w, r, &req) {
			return
		}
		if s.cfg.Approvals == nil {
			writeErr(w, NoSuchApproval(clip(id, 128)))
			return
		}
		tenant := tenantOf(r.Context())
		if req.Approver == "" {
			req.Approver = "tenant:" + tenant
		}
		s.decide(w, tenant, id, approve, req.Approver, req.Reason)
	}
}

// decide decides an approval for REST and the console alike, counts the
// decision and answers with the approval.
func (s *Server) decide(w http.ResponseWriter, tenant, id string, approve bool, approver, reason string) {
	a, err := s.cfg.Approvals.Decide(tenant, id, approve, approver, reason)
	if err != nil {
		writeErr(w, err)
		return
	}
	decision := "denied"
	if approve {
		decision = "approved"
	}
	s.metrics.policyDecision(tenant, decision)
	writeJSON(w, http.StatusOK, a)
}

// sessionEvents streams one session's events; tenantEvents all of the
// tenant's.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	s.stream(w, r, id)
}

func (s *Server) tenantEvents(w http.ResponseWriter, r *http.Request) { s.stream(w, r, "") }

// stream writes server-sent events until the client goes, the subscriber is
// dropped for falling behind, or the server drains.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, session string) {
	rc := http.NewResponseController(w)
	tenant := tenantOf(r.Context())
	sub, cancel := s.events.subscribe(tenant, session)
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": shellbox events\n\n")
	rc.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	seq := 0
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			rc.Flush()
		case e, ok := <-sub.ch:
			if !ok {
				if s.events.wasDropped(sub) {
					s.countError("slow_subscriber")
					writeEvent(w, seq+1, eventstream.Event{Type: eventstream.EventDropped, Tenant: tenant, Session: session, Time: time.Now().UTC(),
						Message: fmt.Sprintf("this stream fell %d events behind and was dropped; reconnect", s.cfg.EventBuffer)})
					rc.Flush()
				}
				return
			}
			seq++
			if err := writeEvent(w, seq, e); err != nil {
				return
			}
			rc.Flush()
		}
	}
}

func writeEvent(w io.Writer, id int, e eventstream.Event) error {
	b, _ := json.Marshal(e)
	_, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", id, e.Type, b)
	return err
}
