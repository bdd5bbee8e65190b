package apiserver

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/output"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Runner runs the commands: in the agent, a local.Executor. Required.
	Runner agentapi.Runner
	// Agent is the agent's build version, reported by the handshake.
	Agent string
	// Root and Home are the session cwd and HOME of the commands, reported by
	// the handshake.
	Root, Home string
	// NoExecGuard, reported by the handshake, says why the Runner's
	// commands' execs are not checked (no exec guard); empty: they are.
	NoExecGuard string
	// Egress, if set, serves POST /v1/egress: the server's relay polls it
	// for the connections of the sandbox's egress proxy (sandbox/egress).
	// Unset, the endpoint answers 404 like any unknown one.
	Egress http.Handler
	// Token, if set, is the per-session secret every request must carry
	// as "Authorization: Bearer <Token>" (an agent reached over a network;
	// on a unix socket the socket's directory keeps others out). It is
	// compared in constant time; a request without it answers 401.
	Token string
	// SpillDir, if set, serves GET /v1/spill: the spill files under it
	// (the Runner's spill directory; absolute, as the agent sees it), for a
	// server that has no host path to them. Unset, the endpoint answers
	// 404 like any unknown one.
	SpillDir string
	// Files, if set, serves PUT and GET /v1/files and GET /v1/files/stat:
	// uploads and downloads in the session root, confined to it, as its
	// user (package files). Unset, they answer 404 like any unknown
	// endpoint.
	Files *files.Tree
	// Workspace, if set, serves GET and PUT /v1/workspace: the session
	// root as one stream out (an export, for a suspend) and a stream
	// swapped in for its content (an import, for a resume), package
	// agentapi/workspace, done as Workspace.UID/GID as the files endpoints
	// are, one at a time. Unset, they answer 404 like any unknown
	// endpoint.
	Workspace *files.Tree
	// EgressOpen, if set, counts the connections the egress proxy holds
	// open, for GET /v1/activity.
	EgressOpen func() int
	// Log, if set, serves GET /v1/log: the agent's recent log lines (what
	// ended which command, and why), for an operator. Unset, the endpoint
	// answers 404 like any unknown one.
	Log func() string
	// Exit, if set, serves POST /v1/exit: the server is done with the
	// sandbox (it is being deleted: by shellbox, or by someone else and
	// its workspace is saved), and the agent ends now rather than at the
	// end of the pod's termination grace. Exit is called after the
	// answer is written. Unset, the endpoint answers 404.
	Exit func()
}

// Server serves the protocol over a Runner. It is an http.Handler; serve it
// with net/http on the listener of Listen. It holds no state of its own
// beyond the names of the foreground calls in flight (for cancellation):
// tasks live in the Runner.
type Server struct {
	cfg ServerConfig
	mux *http.ServeMux

	mu        sync.Mutex
	calls     map[string]context.CancelFunc // call name → cancel of its run
	cancelled map[string]time.Time          // cancels that arrived before their run

	// runs is the foreground runs in flight, for GET /v1/activity.
	runs atomic.Int64

	// workspace is held by the workspace export or import in progress.
	workspace sync.Mutex

	// fenced: the sandbox is being deleted (Fence); runs and starts are
	// refused with agentapi.ErrTerminating.
	fenced atomic.Bool
}

// Fence makes the server refuse every new foreground run and background
// task with agentapi.ErrTerminating, and serve the rest (the workspace's
// export above all, tasks' output, activity) as before: the agent of a
// pod in its termination grace, whose workspace the server is saving. What
// runs already runs on. It cannot be undone.
func (s *Server) Fence() { s.fenced.Store(true) }

var _ http.Handler = (*Server)(nil)

// tombstoneAge is how long a cancel that arrived before its run is
// remembered: the run's request is in flight on another connection, so it
// arrives within moments or not at all.
const tombstoneAge = time.Minute

var callRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// NewServer returns a Server over cfg.Runner.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Runner == nil {
		return nil, errors.New("agentapi: ServerConfig.Runner is required")
	}
	if cfg.SpillDir != "" {
		if !filepath.IsAbs(cfg.SpillDir) {
			return nil, fmt.Errorf("agentapi: ServerConfig.SpillDir must be an absolute path, got %q", cfg.SpillDir)
		}
		cfg.SpillDir = filepath.Clean(cfg.SpillDir)
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), calls: map[string]context.CancelFunc{}, cancelled: map[string]time.Time{}}
	s.mux.HandleFunc("GET /v1/hello", s.hello)
	s.mux.HandleFunc("POST /v1/run", s.run)
	s.mux.HandleFunc("POST /v1/calls/{call}/cancel", s.cancel)
	s.mux.HandleFunc("POST /v1/start", s.start)
	s.mux.HandleFunc("GET /v1/tasks", s.list)
	s.mux.HandleFunc("GET /v1/tasks/{id}", s.info)
	s.mux.HandleFunc("POST /v1/tasks/{id}/read", s.read)
	s.mux.HandleFunc("POST /v1/tasks/{id}/peek", s.peek)
	s.mux.HandleFunc("POST /v1/tasks/{id}/wait", s.wait)
	s.mux.HandleFunc("POST /v1/tasks/{id}/kill", s.kill)
	s.mux.HandleFunc("GET /v1/has", s.has)
	s.mux.HandleFunc("GET /v1/activity", s.activity)
	if cfg.SpillDir != "" {
		s.mux.HandleFunc("GET /v1/spill", s.spill)
	}
	if cfg.Files != nil {
		s.mux.HandleFunc("PUT /v1/files", s.putFile)
		s.mux.HandleFunc("GET /v1/files", s.getFile)
		s.mux.HandleFunc("GET /v1/files/stat", s.statFile)
	}
	if cfg.Workspace != nil {
		s.mux.HandleFunc("GET /v1/workspace", s.exportWorkspace)
		s.mux.HandleFunc("PUT /v1/workspace", s.importWorkspace)
	}
	if cfg.Egress != nil {
		s.mux.Handle("POST /v1/egress", cfg.Egress)
	}
	if cfg.Exit != nil {
		s.mux.HandleFunc("POST /v1/exit", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNoContent)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			cfg.Exit()
		})
	}
	if cfg.Log != nil {
		s.mux.HandleFunc("GET /v1/log", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, agentapi.LogAnswer{Log: cfg.Log()})
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, agentapi.Error{Class: agentapi.ClassInvalid, Message: fmt.Sprintf("agent: no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
	return s, nil
}

// ServeHTTP checks the client's token and protocol version and
// dispatches.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
			writeJSON(w, http.StatusUnauthorized, agentapi.Error{Class: agentapi.ClassInvalid, Message: "agent: missing or wrong token"})
			return
		}
	}
	if v := r.Header.Get(agentapi.HeaderProtocol); v != "" && v != strconv.Itoa(agentapi.Protocol) && r.URL.Path != "/v1/hello" {
		writeError(w, executor.Errorf(executor.ErrInvalid,
			"agent protocol mismatch: the agent speaks protocol %d (agent version %s), the client %s", agentapi.Protocol, s.cfg.Agent, v))
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) hello(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, agentapi.Hello{
		Protocol: agentapi.Protocol,
		Agent:    s.cfg.Agent,
		Pwsh:     s.cfg.Runner.Has(r.Context(), "", executor.Pwsh),
		Root:     s.cfg.Root,
		Home:     s.cfg.Home,

		NoExecGuard: s.cfg.NoExecGuard,
	})
}

// run runs a spec in the foreground under the request's context: if the
// client disconnects, or cancels the call by name, the command's tree is
// killed. The command's own timeout is the Runner's, whatever the client.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	var spec executor.Spec
	if err := decode(w, r, agentapi.MaxSpecBytes, &spec); err != nil {
		writeError(w, err)
		return
	}
	if s.fenced.Load() {
		writeError(w, agentapi.ErrTerminating)
		return
	}
	s.runs.Add(1)
	defer s.runs.Add(-1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if call := r.Header.Get(agentapi.HeaderCall); call != "" {
		if !callRE.MatchString(call) {
			writeError(w, executor.Errorf(executor.ErrInvalid, "invalid %s header %q", agentapi.HeaderCall, call))
			return
		}
		s.register(call, cancel)
		defer s.unregister(call)
	}
	if streamed(r) {
		s.runStreamed(ctx, cancel, w, spec)
		return
	}
	res, err := s.cfg.Runner.Run(ctx, spec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// runStreamed runs spec with its live output sent as it arrives: a
// ContentTypeStream answer of Frames, output frames while the command runs
// (bounded and paced by an output.Feed: a slow client loses bytes with a
// count, it never stalls the command), then one result or error frame.
// A client that stops reading is a client gone: the command is killed.
func (s *Server) runStreamed(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, spec executor.Spec) {
	feed := output.NewFeed(agentapi.StreamPending)
	spec.Live = feed.Write
	type outcome struct {
		res executor.Result
		err error
	}
	ran := make(chan outcome, 1)
	go func() {
		res, err := s.cfg.Runner.Run(ctx, spec)
		feed.Close()
		ran <- outcome{res, err}
	}()
	w.Header().Set("Content-Type", agentapi.ContentTypeStream)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	if rc.Flush() != nil {
		cancel()
	}
	err := feed.Pump(ctx, agentapi.StreamInterval, func(chunks []executor.Chunk) error {
		for i := range chunks {
			if err := enc.Encode(agentapi.Frame{Output: &chunks[i]}); err != nil {
				return err
			}
		}
		return rc.Flush()
	})
	if err != nil {
		cancel()
	}
	o := <-ran
	if o.err != nil {
		e, _ := agentapi.EncodeError(o.err)
		enc.Encode(agentapi.Frame{Error: &e})
		return
	}
	enc.Encode(agentapi.Frame{Result: &o.res})
}

// streamed reports whether a run asks for a streamed answer.
func streamed(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, t := range strings.Split(v, ",") {
			if mt, _, _ := strings.Cut(strings.TrimSpace(t), ";"); strings.EqualFold(mt, agentapi.ContentTypeStream) {
				return true
			}
		}
	}
	return false
}

// register names a run for cancel; a cancel that came first cancels it now.
func (s *Server) register(call string, cancel context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cancelled[call]; ok {
		delete(s.cancelled, call)
		cancel()
		return
	}
	s.calls[call] = cancel
}

func (s *Server) unregister(call string) {
	s.mu.Lock()
	delete(s.calls, call)
	s.mu.Unlock()
}

// cancel cancels a foreground run by name. It answers 204 at once, whether
// or not the run is known (it may still be on its way, or over): the run's
// own response says how it ended.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	call := r.PathValue("call")
	if !callRE.MatchString(call) {
		writeError(w, executor.Errorf(executor.ErrInvalid, "invalid call name %q", call))
		return
	}
	s.mu.Lock()
	if c, ok := s.calls[call]; ok {
		c()
	} else {
		now := time.Now()
		if len(s.cancelled) >= 1024 {
			for k, t := range s.cancelled {
				if now.Sub(t) > tombstoneAge {
					delete(s.cancelled, k)
				}
			}
		}
		if len(s.cancelled) < 4096 {
			s.cancelled[call] = now
		}
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	var spec executor.Spec
	if err := decode(w, r, agentapi.MaxSpecBytes, &spec); err != nil {
		writeError(w, err)
		return
	}
	if s.fenced.Load() {
		writeError(w, agentapi.ErrTerminating)
		return
	}
	t, err := s.cfg.Runner.Start(r.Context(), spec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, agentapi.Started{ID: t.ID()})
}

// statuser is a task handle that can tell its status without a read.
type statuser interface {
	Status() executor.Status
}

func taskInfo(session string, t executor.Task) agentapi.TaskInfo {
	ti := agentapi.TaskInfo{ID: t.ID(), Session: session}
	if st, ok := t.(statuser); ok {
		s := st.Status()
		ti.Status = &s
	}
	return ti
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	l, ok := s.cfg.Runner.(agentapi.TaskLister)
	if !ok {
		writeError(w, executor.Errorf(executor.ErrInvalid, "this agent cannot list tasks"))
		return
	}
	session := r.URL.Query().Get("session")
	if err := executor.ValidSession(session); err != nil {
		writeError(w, err)
		return
	}
	ts, err := l.ListTasks(r.Context(), session)
	if err != nil {
		writeError(w, err)
		return
	}
	out := agentapi.TaskList{Tasks: make([]agentapi.TaskInfo, 0, len(ts))}
	for _, t := range ts {
		out.Tasks = append(out.Tasks, taskInfo(session, t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	session := r.URL.Query().Get("session")
	t, err := s.cfg.Runner.Task(r.Context(), session, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, taskInfo(session, t))
}

// task finds the task a task request names: {id} in the path, the session
// in the body.
func (s *Server) task(w http.ResponseWriter, r *http.Request) (executor.Task, error) {
	var ref agentapi.TaskRef
	if err := decode(w, r, agentapi.MaxSmallBytes, &ref); err != nil {
		return nil, err
	}
	return s.cfg.Runner.Task(r.Context(), ref.Session, r.PathValue("id"))
}

func (s *Server) read(w http.ResponseWriter, r *http.Request) {
	t, err := s.task(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	o, err := t.Read(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// wait is a long poll: it answers when the task ends, or gives up when the
// client does.
func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	t, err := s.task(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := t.Wait(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// kill kills the task's tree. Once the request arrived the kill completes,
// whether or not the client stays for the answer.
func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	t, err := s.task(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	k, err := t.Kill(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, k)
}

func (s *Server) has(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	shell := executor.Shell(q.Get("shell"))
	if shell != executor.Bash && shell != executor.Pwsh {
		writeError(w, executor.Errorf(executor.ErrInvalid, "unknown shell %q", shell))
		return
	}
	writeJSON(w, http.StatusOK, agentapi.HasAnswer{Has: s.cfg.Runner.Has(r.Context(), q.Get("session"), shell)})
}

// activity answers what runs now: the idle reaper's question.
func (s *Server) activity(w http.ResponseWriter, _ *http.Request) {
	a := agentapi.Activity{Calls: int(s.runs.Load()), Commands: -1}
	if c, ok := s.cfg.Runner.(agentapi.ActivityCounter); ok {
		a.Commands = c.Running()
	}
	if s.cfg.EgressOpen != nil {
		a.Egress = s.cfg.EgressOpen()
	}
	writeJSON(w, http.StatusOK, a)
}

// decode reads the whole body (bounded), then parses it. Reading to EOF
// matters: only then does net/http watch the connection and cancel the
// request's context when the client goes away.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return executor.Errorf(executor.ErrLimit, "agent: request body over %d bytes", limit)
		}
		return executor.Errorf(executor.ErrInvalid, "agent: read request: %v", err)
	}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(v); err != nil {
		return executor.Errorf(executor.ErrInvalid, "agent: bad request body: %v", err)
	}
	return nil
}

func writeError(w http.ResponseWriter, err error) {
	e, status := agentapi.EncodeError(err)
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(agentapi.Error{Class: agentapi.ClassInternal, Message: "agent: encode response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
