package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/tools"
	"github.com/shellbox/shellbox/usage"
)

// Config configures a Server.
type Config struct {
	// Backend runs the tools. It or NewBackend is required.
	Backend Backend
	// NewBackend, instead of Backend, builds the backend once the server
	// can observe it: it is handed the server as its Notifier (event
	// streams) and its Metrics, so the backend gets its observers at
	// construction.
	NewBackend func(Notifier, Metrics) (Backend, error)
	// Starting, if set, stays open while the backend takes over what a
	// previous process left (session.Service.Start: adopting sandboxes
	// takes API calls per sandbox, long on a loaded cluster) and is closed
	// when that is done. The server can listen meanwhile: /healthz answers
	// (a liveness probe must not kill a process for adopting), /readyz
	// answers 503 "starting" (no traffic is routed to it yet), /metrics
	// is served, and every other request waits for Starting to close or
	// for its own end.
	Starting <-chan struct{}
	// Approvals, if set, serves the approvals endpoints and events; without
	// it the endpoints list nothing and every id is unknown.
	Approvals Approvals
	// Relay, if set, carries completion notices between the replicas of
	// a release (Kubernetes: kube/events); without it a notice reaches this
	// process's streams alone.
	Relay eventstream.EventRelay
	// Tenants maps tenant names to their tokens and limits. A request's
	// tenant is the one its token belongs to. Required for HTTP.
	Tenants map[string]TenantConfig
	// MaxBodyBytes bounds every request body (default 1 MiB).
	MaxBodyBytes int64
	// EventBuffer bounds each event-stream subscriber's queue (default 256).
	// A subscriber that falls that far behind is dropped with a final
	// "dropped" event.
	EventBuffer int
	// MCPSessionTimeout closes MCP sessions idle that long (default 1 h).
	// Sandboxes are unaffected: reconnecting with the same session name
	// reaches the same one.
	MCPSessionTimeout time.Duration
	// Logger receives one JSON line per request (default: discard).
	Logger *slog.Logger
	// Version is reported by /healthz and the MCP server info.
	Version string
	// Console configures the operator console at /ui.
	Console ConsoleConfig
	// Usage, if set, is where the sessions' use is measured: the server
	// counts each tool call that ran in it, serves GET /v1/usage from it
	// and exports its per-tenant totals as shellbox_usage_* counters.
	// Nil (the local backend): /v1/usage answers 503.
	Usage *usage.Meter
}

// TenantConfig is one tenant's tokens and limits.
type TenantConfig struct {
	// Tokens are sha256:<hex> hashes of the tenant's bearer tokens.
	Tokens []string `mapstructure:"tokens" json:"tokens"`
	// MaxConcurrentCalls bounds the tenant's tool calls in flight (default 16).
	MaxConcurrentCalls int `mapstructure:"maxConcurrentCalls" json:"maxConcurrentCalls"`
	// RatePerSecond and Burst bound the tenant's requests (default 50/s,
	// burst 100).
	RatePerSecond float64 `mapstructure:"ratePerSecond" json:"ratePerSecond"`
	Burst         int     `mapstructure:"burst" json:"burst"`
	// MaxMCPSessions bounds the tenant's open MCP sessions (default 64);
	// each holds server state until it is closed or idles out.
	MaxMCPSessions int `mapstructure:"maxMCPSessions" json:"maxMCPSessions"`
}

// Defaults of TenantConfig and Config.
const (
	DefaultMaxConcurrentCalls = 16
	DefaultRatePerSecond      = 50
	DefaultBurst              = 100
	DefaultMaxMCPSessions     = 64
	DefaultMaxBodyBytes       = 1 << 20
	DefaultEventBuffer        = 256
)

// Server serves the tools over HTTP (REST and MCP) and stdio (MCP).
type Server struct {
	cfg     Config
	tokens  tokens
	limits  map[string]*tenantLimits
	metrics *metrics
	events  *hub
	log     *slog.Logger
	book    *taskBook
	console *console

	mcpHTTP *mcp.StreamableHTTPHandler
	// liveKeepalive is how long a streamed REST call stays silent before a
	// keepalive comment (as the event streams, 15 s).
	liveKeepalive time.Duration
	// mcpStateless serves MCP revision 2026-07-28 (no MCP sessions).
	mcpStateless *mcp.StreamableHTTPHandler
	// mcpSrvs are the MCP servers, one per tool list (keyed by the tools'
	// names): a session is offered the tools its Toolset lists for it.
	mcpMu   sync.Mutex
	mcpSrvs map[string]*mcp.Server
	// mcpWatches are the notice subscriptions of MCP sessions,
	// *mcp.ServerSession → *mcpWatch.
	mcpWatches sync.Map

	// calls counts tool calls (and file transfers) running, for Drain
	// (under mu).
	calls int
	// mcpPosts counts MCP POST requests being served (under mu): a tool
	// call's result is written to its POST's stream by the SDK after the
	// call ends, so Drain closes MCP sessions only once these are done.
	mcpPosts int
	mu       sync.Mutex
	draining bool
	// retiring: Retire was called (shutdown.go).
	retiring bool

	cancelApprovals func()
	cancelRelay     func()
	// recent are the notices delivered lately, so a second copy (this
	// process's watcher and another replica's both saw the end) is dropped.
	recent *tools.RecentKeys
	// idem are the Idempotency-Keys of recent POSTs (idempotency.go).
	idem *idemStore
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if (cfg.Backend == nil) == (cfg.NewBackend == nil) {
		return nil, errors.New("server: exactly one of Config.Backend and Config.NewBackend is required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.EventBuffer <= 0 {
		cfg.EventBuffer = DefaultEventBuffer
	}
	if cfg.MCPSessionTimeout <= 0 {
		cfg.MCPSessionTimeout = time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := &Server{cfg: cfg, limits: map[string]*tenantLimits{}, log: cfg.Logger, liveKeepalive: 15 * time.Second}
	seen := map[[32]byte]string{}
	for name, tc := range cfg.Tenants {
		if !confine.ValidID(name) {
			return nil, fmt.Errorf("server: tenant %q: want %s", name, confine.IDRule)
		}
		if tc.MaxConcurrentCalls <= 0 {
			tc.MaxConcurrentCalls = DefaultMaxConcurrentCalls
		}
		if tc.RatePerSecond <= 0 {
			tc.RatePerSecond = DefaultRatePerSecond
		}
		if tc.Burst <= 0 {
			tc.Burst = DefaultBurst
		}
		if tc.MaxMCPSessions <= 0 {
			tc.MaxMCPSessions = DefaultMaxMCPSessions
		}
		cfg.Tenants[name] = tc
		for _, h := range tc.Tokens {
			sum, err := parseTokenHash(h)
			if err != nil {
				return nil, fmt.Errorf("server: tenant %s: %w", name, err)
			}
			if other, dup := seen[sum]; dup {
				return nil, fmt.Errorf("server: tenants %s and %s share a token hash", other, name)
			}
			seen[sum] = name
			s.tokens = append(s.tokens, tokenEntry{sum: sum, tenant: name})
		}
		s.limits[name] = newTenantLimits(name, tc)
	}
	s.metrics = newMetrics(s)
	s.events = newHub(cfg.EventBuffer)
	var spill func(tenant, session string, bytes int64)
	if cfg.Usage != nil {
		spill = cfg.Usage.Spill
	}
	s.book = newTaskBook(spill)
	s.recent = tools.NewRecentKeys(maxRecentNotices)
	s.idem = newIdemStore()
	c, err := newConsole(s, cfg.Console, seen)
	if err != nil {
		return nil, err
	}
	s.console = c
	s.mcpSrvs = map[string]*mcp.Server{}
	s.mcpHTTP = mcp.NewStreamableHTTPHandler(s.mcpServerFor(false),
		&mcp.StreamableHTTPOptions{
			SessionTimeout:      cfg.MCPSessionTimeout,
			MaxRequestBodyBytes: cfg.MaxBodyBytes,
			Logger:              cfg.Logger,
		})
	s.mcpStateless = mcp.NewStreamableHTTPHandler(s.mcpServerFor(true),
		&mcp.StreamableHTTPOptions{
			Stateless:           true,
			MaxRequestBodyBytes: cfg.MaxBodyBytes,
			Logger:              cfg.Logger,
			// A client that gives up on a call aborts the command.
			PropagateRequestCancellation: true,
		})
	if cfg.NewBackend != nil {
		b, err := cfg.NewBackend(s, s)
		if err != nil {
			return nil, err
		}
		s.cfg.Backend = b
	}
	if cfg.Approvals != nil {
		s.cancelApprovals = cfg.Approvals.Subscribe(s.onApproval)
	}
	if cfg.Relay != nil {
		s.cancelRelay = cfg.Relay.Subscribe(s.onRelayed)
	}
	return s, nil
}

// Notifier is where a backend the server builds (Config.NewBackend)
// delivers events: background completion notices for the sessions' event
// streams, and, for the other replicas, which notices were reported and
// which sessions' tasks they must watch. *Server implements it.
type Notifier interface {
	// Notify delivers a background completion notice (see Server.Notify).
	Notify(tenant, session string, n tools.Notice)
	// Reported says a task's end was reported to the model (see
	// Server.Reported).
	Reported(tenant, session, taskID string)
	// HandOver says this process, shutting down, watched tasks of the
	// session (see Server.HandOver).
	HandOver(tenant, session string)
}

// Metrics is what a backend the server builds (Config.NewBackend) counts
// and times for the server's metrics: its gates' decisions, sandbox
// creations, egress connections and leadership. *Server implements it.
type Metrics interface {
	// ObserveGate wraps a tenant's policy gate so its decisions are
	// counted; nil stays nil.
	ObserveGate(tenant string, g tools.Gate) tools.Gate
	// ObserveSandboxCreate records how long creating a sandbox took.
	ObserveSandboxCreate(tenant string, d time.Duration)
	// ObserveEgress counts one egress connection by outcome.
	ObserveEgress(tenant, outcome string)
	// ObserveLeader records whether this process reaps idle sandboxes and
	// keeps the warm pools (the elected replica on Kubernetes).
	ObserveLeader(leading bool)
}

var (
	_ Notifier = (*Server)(nil)
	_ Metrics  = (*Server)(nil)
)

// Notify delivers a background completion notice of the tenant's session to
// the session's event streams (SSE subscribers, MCP clients) and, through
// the Relay, to the other replicas'. A second notice of the same task is
// dropped. It never blocks: it is meant for tools.Config.OnNotice.
func (s *Server) Notify(tenant, session string, n tools.Notice) {
	s.notice(tenant, session, n, false)
}

func (s *Server) onApproval(a approval.Approval) {
	ac := a
	s.events.publish(eventstream.Event{Type: eventstream.EventApproval, Tenant: a.Tenant, Session: a.Session, Approval: &ac, Time: time.Now().UTC()})
}

// route is one REST route: a ServeMux pattern ("METHOD /path").
type route struct {
	pattern string
	public  bool // served without a token
	h       http.Handler
}

// routes are the REST routes, as documented in openapi.json (/mcp apart).
func (s *Server) routes() []route {
	return []route{
		{"GET /healthz", true, http.HandlerFunc(s.healthz)},
		{"GET /readyz", true, http.HandlerFunc(s.readyz)},
		{"GET /metrics", true, s.metrics.handler()},
		{"GET /openapi.json", true, http.HandlerFunc(serveOpenAPI)},
		{"GET /v1/usage", true, s.usageRoute()}, // authenticates tenants and operators itself
		{"GET /v1/tools", false, http.HandlerFunc(s.listTools)},
		{"GET /v1/sessions", false, http.HandlerFunc(s.listSessions)},
		{"POST /v1/sessions", false, http.HandlerFunc(s.createSession)},
		{"GET /v1/sessions/{id}", false, http.HandlerFunc(s.getSession)},
		{"DELETE /v1/sessions/{id}", false, http.HandlerFunc(s.deleteSession)},
		{"POST /v1/sessions/{id}/suspend", false, http.HandlerFunc(s.suspendSession)},
		{"POST /v1/sessions/{id}/resume", false, http.HandlerFunc(s.resumeSession)},
		{"POST /v1/sessions/{id}/tools/{tool}", false, http.HandlerFunc(s.callTool)},
		{"PUT /v1/sessions/{id}/files", false, http.HandlerFunc(s.putFile)},
		{"GET /v1/sessions/{id}/files", false, http.HandlerFunc(s.getFile)},
		{"GET /v1/sessions/{id}/files/stat", false, http.HandlerFunc(s.statFile)},
		{"GET /v1/sessions/{id}/events", false, http.HandlerFunc(s.sessionEvents)},
		{"GET /v1/events", false, http.HandlerFunc(s.tenantEvents)},
		{"GET /v1/approvals", false, http.HandlerFunc(s.listApprovals)},
		{"GET /v1/approvals/{id}", false, http.HandlerFunc(s.getApproval)},
		{"POST /v1/approvals/{id}/approve", false, s.decideApproval(true)},
		{"POST /v1/approvals/{id}/deny", false, s.decideApproval(false)},
	}
}

// Handler is the whole HTTP API: the REST routes, /mcp, and a JSON 404 for
// anything else. Everything but the public routes needs a token.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	api := http.NewServeMux()
	for _, r := range s.routes() {
		if r.public {
			mux.Handle(r.pattern, r.h)
		} else {
			api.Handle(r.pattern, r.h)
		}
	}
	api.Handle("/mcp", s.mcpHandler())
	api.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s", r.Method, clip(r.URL.Path, 200)))
	})
	// The operator console authenticates by its own cookie (console.go).
	s.console.register(mux)
	mux.Handle("/", s.authenticate(s.rateLimit(s.limitBody(s.idempotent(api)))))
	return s.closeWhenRetiring(s.logRequests(s.recoverPanics(s.waitStarted(mux))))
}

// starting reports whether Config.Starting is still open.
func (s *Server) starting() bool {
	if s.cfg.Starting == nil {
		return false
	}
	select {
	case <-s.cfg.Starting:
		return false
	default:
		return true
	}
}

// waitStarted holds every request but the probes and /metrics until
// Config.Starting closes (or the request ends: then 503).
func (s *Server) waitStarted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.starting() && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && r.URL.Path != "/metrics" {
			select {
			case <-s.cfg.Starting:
			case <-r.Context().Done():
				writeError(w, http.StatusServiceUnavailable, "starting", "the server is starting: taking over its sandboxes")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readiness is /readyz's answer when ready. /readyz is public: it counts
// the warnings (the console and the log name them), and says whether
// commands run unsandboxed.
type readiness struct {
	Status   string `json:"status"`
	Warnings int    `json:"warnings,omitempty"`
	// Unsandboxed is set when the backend is no Sandboxer's Sandboxed.
	Unsandboxed string `json:"unsandboxed,omitempty"`
}

// unsandboxed is readiness.Unsandboxed of a backend whose commands run
// outside any sandbox.
const unsandboxed = "commands run on the server's host, unsandboxed, as the server's user"

// warnings are the backend's problems that do not stop it serving
// (Warner) that login l may see — its tenant's, every one for an operator
// — at most 64 of them, each clipped.
func (s *Server) warnings(l *login) []string {
	wr, ok := s.cfg.Backend.(Warner)
	if !ok {
		return nil
	}
	var ws []string
	for _, w := range wr.Warnings() {
		if l.operator || w.Tenant != "" && w.Tenant == l.tenant {
			ws = append(ws, w.Text)
		}
	}
	if len(ws) > 64 {
		ws = append(ws[:63:63], fmt.Sprintf("and %d more", len(ws)-63))
	}
	for i := range ws {
		ws[i] = clip(ws[i], 1024)
	}
	return ws
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": s.cfg.Version})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if s.isRetiring() {
		writeError(w, http.StatusServiceUnavailable, "draining", "the server is shutting down")
		return
	}
	if s.starting() {
		writeError(w, http.StatusServiceUnavailable, "starting", "the server is starting: taking over its sandboxes")
		return
	}
	if err := s.cfg.Backend.Ready(ctx); err != nil {
		writeError(w, http.StatusServiceUnavailable, "not_ready", err.Error())
		return
	}
	n := 0
	if wr, ok := s.cfg.Backend.(Warner); ok {
		n = len(wr.Warnings()) // counted only: no need to clip what is not shown
	}
	ready := readiness{Status: "ready", Warnings: n}
	if sb, ok := s.cfg.Backend.(Sandboxer); ok && !sb.Sandboxed() {
		ready.Unsandboxed = unsandboxed
	}
	writeJSON(w, http.StatusOK, ready)
}

// recoverPanics turns a handler panic into a 500 JSON error (and a log line
// with the panic value, never the request body).
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic in handler", "panic", fmt.Sprint(v), "path", r.URL.Path)
				s.countError("internal")
				writeError(w, http.StatusInternalServerError, "internal", "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// admittedKey marks a request's context with whether it arrived before
// Drain began (closeWhenRetiring, the outermost handler).
type admittedKey struct{}

// beginCall registers a tool call with Drain; false when the server is
// draining and the call's request arrived after that began. A request read
// before the drain is served even when its handler reaches here after:
// by then the listener is closed and every answer closes its connection,
// so nothing new arrives, and an overloaded server must not refuse what a
// client sent while it still took calls.
func (s *Server) beginCall(ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if admitted, _ := ctx.Value(admittedKey{}).(bool); s.draining && !admitted {
		return false
	}
	s.calls++
	return true
}

// endCall ends what beginCall began.
func (s *Server) endCall() {
	s.mu.Lock()
	s.calls--
	s.mu.Unlock()
}

// idle reports whether no call runs and no MCP POST is being answered.
func (s *Server) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls == 0 && s.mcpPosts == 0
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// Drain is the server's part of a graceful shutdown: new tool calls are
// refused (503), calls in flight may finish until ctx is done (an MCP
// call until its result is written to its POST's stream), then event
// streams and MCP sessions are closed. Sandboxes and background tasks are
// left running for the next process to adopt. Call it alongside
// http.Server.Shutdown, which stops accepting connections.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	var err error
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !s.idle() && err == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
			err = fmt.Errorf("tool calls still running at the shutdown deadline: %w", ctx.Err())
		}
	}
	s.events.close()
	s.mcpMu.Lock()
	srvs := make([]*mcp.Server, 0, len(s.mcpSrvs))
	for _, srv := range s.mcpSrvs {
		srvs = append(srvs, srv)
	}
	s.mcpMu.Unlock()
	for _, srv := range srvs {
		for ss := range srv.Sessions() {
			ss.Close()
		}
	}
	if s.cancelApprovals != nil {
		s.cancelApprovals()
	}
	if s.cancelRelay != nil {
		s.cancelRelay()
	}
	return err
}
