package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/tools"
)

// SessionHeader names the sandbox session of an MCP client (or of a REST
// events or tool request made without a path id). Without it, an MCP
// client's session is its MCP session id (2025-11-25), or the request's
// SessionMetaKey (any revision). Reconnecting with the same name reaches
// the same sandbox.
const SessionHeader = "Shellbox-Session"

// SessionMetaKey is the _meta key of an MCP request (tools/call) that names
// its sandbox session, for a client that cannot set SessionHeader per
// request. Where both are given they must agree.
const SessionMetaKey = "shellbox/session"

// Revision20260728 is the MCP revision served by the stateless core: a
// request whose Mcp-Protocol-Version header is this one (or a later one,
// which is refused with UnsupportedProtocolVersion naming the supported
// versions, so the client falls back) is served without MCP sessions.
// Earlier revisions (2025-11-25 and before) keep MCP sessions.
const Revision20260728 = "2026-07-28"

// mcpVersionHeader carries a request's MCP revision over HTTP.
const mcpVersionHeader = "Mcp-Protocol-Version"

// NoticesMetaKey is the _meta key of an MCP tool result that carries the
// session's background completion notices, typed; they are also appended
// to the result's content as text, for the model.
const NoticesMetaKey = "shellbox/notices"

// NoticeLogger is the logger name of the notifications/message an MCP
// client receives for a background completion notice (after it set a
// logging level with logging/setLevel).
const NoticeLogger = "shellbox"

type stdioKey struct{}

// stdioIdentity is the tenant and session of a stdio MCP server.
type stdioIdentity struct{ tenant, session string }

// mcpServer returns the MCP server offering defs, creating it once.
//
// Each tenant has its own MCP servers, so its open sessions can be counted
// (mcpSessions); there are at most a few per tenant, one per tool set.
//
// The stateless core (stateless true, for revision 2026-07-28) has servers
// of its own: their sessions last one request and are not MCP sessions.
func (s *Server) mcpServer(tenant string, defs []tools.Definition, stateless bool) *mcp.Server {
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	key := mcpKeyPrefix(tenant, stateless) + strings.Join(names, ",")
	s.mcpMu.Lock()
	defer s.mcpMu.Unlock()
	if srv, ok := s.mcpSrvs[key]; ok {
		return srv
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "shellbox", Version: s.cfg.Version}, &mcp.ServerOptions{
		Logger:   s.log,
		PageSize: 100,
	})
	for _, d := range defs {
		srv.AddTool(&mcp.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema}, s.mcpTool(d.Name))
	}
	s.mcpSrvs[key] = srv
	return srv
}

// mcpServerFor picks the MCP server of a new MCP session: the tools the
// tenant's Toolset offers the named session (pwsh only where its image has
// it, which may create the sandbox), or every tool when the session is
// named by its MCP session id, not yet known here.
func (s *Server) mcpServerFor(stateless bool) func(r *http.Request) *mcp.Server {
	return func(r *http.Request) *mcp.Server {
		tenant := tenantOf(r.Context())
		return s.mcpServer(tenant, s.definitions(r.Context(), tenant, r.Header.Get(SessionHeader)), stateless)
	}
}

// mcpKeyPrefix starts the mcpSrvs keys of the tenant's servers.
func mcpKeyPrefix(tenant string, stateless bool) string {
	if stateless {
		return "stateless|" + tenant + "|"
	}
	return "sessions|" + tenant + "|"
}

// mcpSessionList lists the tenant's open MCP sessions (2025-11-25 and
// before; the stateless core has none).
func (s *Server) mcpSessionList(tenant string) []*mcp.ServerSession {
	s.mcpMu.Lock()
	var srvs []*mcp.Server
	for key, srv := range s.mcpSrvs {
		if strings.HasPrefix(key, mcpKeyPrefix(tenant, false)) {
			srvs = append(srvs, srv)
		}
	}
	s.mcpMu.Unlock()
	var out []*mcp.ServerSession
	for _, srv := range srvs {
		for ss := range srv.Sessions() {
			out = append(out, ss)
		}
	}
	return out
}

// mcpSessions counts the tenant's open MCP sessions.
func (s *Server) mcpSessions(tenant string) int { return len(s.mcpSessionList(tenant)) }

// ownsMCPSession reports whether id is an open MCP session of the tenant.
func (s *Server) ownsMCPSession(tenant, id string) bool {
	for _, ss := range s.mcpSessionList(tenant) {
		if ss.ID() == id {
			return true
		}
	}
	return false
}

// statelessRevision reports whether an HTTP request is served by the
// stateless core: its revision header is 2026-07-28 or later (the
// revisions are dates, so they order as strings). A later revision than
// the core knows reaches it too, to be refused as the spec prescribes.
func statelessRevision(r *http.Request) bool {
	v := r.Header.Get(mcpVersionHeader)
	return v != "" && v >= Revision20260728
}

// definitions are the tools of the tenant's session ("" = every tool the
// tenant's Toolset has).
func (s *Server) definitions(ctx context.Context, tenant, session string) []tools.Definition {
	ts, err := s.cfg.Backend.Toolset(ctx, tenant)
	if err != nil {
		return DefaultTools()
	}
	if session == "" || validSession(session) != nil {
		return ts.AllDefinitions()
	}
	return ts.Definitions(ctx, session)
}

// DefaultTools are the tools with run_in_background enabled, pwsh included
// (a session whose image lacks pwsh answers that it is not available).
func DefaultTools() []tools.Definition {
	ts, err := tools.New(nil, tools.Config{})
	if err != nil {
		panic("server: " + err.Error())
	}
	return ts.AllDefinitions()
}

// mcpHandler serves /mcp: revision 2026-07-28 (by its Mcp-Protocol-Version
// header) on the stateless core, earlier revisions with MCP sessions. The
// tenant comes from the bearer token (checked by authenticate); an MCP
// session id of another tenant is answered as an unknown one (404), so
// session ids reveal nothing across tenants.
func (s *Server) mcpHandler() http.Handler {
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		tenant, ok := s.tokens.lookup(token)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: tenant, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	inner := auth.RequireBearerToken(verify, nil)(s.mcpHTTP)
	stateless := auth.RequireBearerToken(verify, nil)(s.mcpStateless)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			// Counted for Drain until the answer is written: closing the
			// MCP session before that cuts a finished call's result.
			s.mu.Lock()
			s.mcpPosts++
			s.mu.Unlock()
			defer func() {
				s.mu.Lock()
				s.mcpPosts--
				s.mu.Unlock()
			}()
		}
		if name := r.Header.Get(SessionHeader); name != "" {
			if err := validSession(name); err != nil {
				s.countError("invalid_session")
				writeError(w, http.StatusBadRequest, "invalid_session", SessionHeader+": "+err.Error())
				return
			}
			setLogAttr(r.Context(), "session", name)
		}
		if statelessRevision(r) {
			setLogAttr(r.Context(), "mcp_revision", clip(r.Header.Get(mcpVersionHeader), 32))
			stateless.ServeHTTP(w, r)
			return
		}
		tenant := tenantOf(r.Context())
		if id := r.Header.Get("Mcp-Session-Id"); id != "" && !s.ownsMCPSession(tenant, id) {
			// Unknown and foreign alike (the SDK would tell them apart).
			s.countError("no_such_mcp_session")
			writeError(w, http.StatusNotFound, "no_such_mcp_session", "no such MCP session: "+clip(id, 100)+" (it was closed or idled out: start a new one)")
			return
		}
		// A POST without a session id opens a new MCP session.
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			if l := s.limits[tenant]; l != nil && s.mcpSessions(tenant) >= l.cfg.MaxMCPSessions {
				s.countError("mcp_session_limit")
				writeError(w, http.StatusTooManyRequests, "mcp_session_limit", fmt.Sprintf(
					"tenant %s has %d MCP sessions open, the limit (server::tenants::%s::maxMCPSessions): close one (DELETE /mcp) or let one idle out",
					tenant, l.cfg.MaxMCPSessions, tenant))
				return
			}
		}
		inner.ServeHTTP(w, r)
	})
}

// identity is the tenant and sandbox session of an MCP tool call: the
// session named by SessionHeader or the request's SessionMetaKey (which
// must agree), else (stdio) the one ServeStdio serves, else the MCP
// session id. A stateless request naming none has no session ("").
func (s *Server) identity(ctx context.Context, req *mcp.CallToolRequest) (tenant, session string, err error) {
	var meta string
	if req.Params != nil {
		if v, ok := req.Params.Meta[SessionMetaKey]; ok {
			name, isString := v.(string)
			if !isString {
				return "", "", fmt.Errorf("_meta %q: want a session name (a string)", SessionMetaKey)
			}
			if err := validSession(name); err != nil {
				return "", "", fmt.Errorf("_meta %q: %w", SessionMetaKey, err)
			}
			meta = name
		}
	}
	if id, ok := ctx.Value(stdioKey{}).(stdioIdentity); ok {
		if meta != "" {
			return id.tenant, meta, nil
		}
		return id.tenant, id.session, nil
	}
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		tenant = req.Extra.TokenInfo.UserID
	}
	if req.Extra != nil && req.Extra.Header != nil {
		session = req.Extra.Header.Get(SessionHeader)
	}
	if meta != "" {
		if session != "" && session != meta {
			return "", "", fmt.Errorf("the %s header (%q) and _meta %q (%q) name different sessions", SessionHeader, session, SessionMetaKey, meta)
		}
		session = meta
	}
	if session == "" && req.Session != nil {
		session = req.Session.ID()
	}
	return tenant, session, nil
}

// unnamedSession is the error result of a stateless call that names no
// sandbox session.
const unnamedSession = "this MCP request names no sandbox session: on MCP revision " + Revision20260728 +
	" set the " + SessionHeader + " header (or the request's _meta \"" + SessionMetaKey + "\") to a session name; the same name reaches the same sandbox again"

// newRevision reports whether an MCP request uses the stateless revision
// (its _meta carries the protocol version, as 2026-07-28 requires).
func newRevision(req *mcp.CallToolRequest) bool {
	if req.Params == nil {
		return false
	}
	v, _ := req.Params.Meta[mcp.MetaKeyProtocolVersion].(string)
	return v >= Revision20260728
}

func (s *Server) mcpTool(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		tenant, session, err := s.identity(ctx, req)
		if err != nil {
			return toMCPResult(errorResult(err.Error())), nil
		}
		if tenant == "" {
			return toMCPResult(errorResult("unauthenticated MCP call")), nil
		}
		if session == "" {
			return toMCPResult(errorResult(unnamedSession)), nil
		}
		if newRevision(req) && req.Session != nil {
			// No MCP session outlives the request: notices that arrive
			// while it runs go out on its own stream.
			stop := s.forwardNotices(ctx, req.Session, tenant, session)
			defer stop()
		}
		args := req.Params.Arguments
		if string(args) == "null" {
			// No arguments at all: the tools report the first missing one.
			args = nil
		}
		live, stopLive := mcpLive(ctx, req, name)
		res, err := s.call(ctx, tenant, session, name, args, live)
		// The last progress notification goes out before the result.
		stopLive()
		if err != nil {
			// The call did not run; the model reads why.
			return toMCPResult(errorResult(err.Error())), nil
		}
		if !newRevision(req) {
			s.watchMCP(req.Session, tenant, session)
		}
		return toMCPResult(res), nil
	}
}

// toMCPResult is a tool result as MCP carries it: the model text as the
// first text content, each pending notice as one more, the typed result as
// structuredContent, and isError exactly when the tool result is an error.
func toMCPResult(r tools.Result) *mcp.CallToolResult {
	content := []mcp.Content{&mcp.TextContent{Text: r.Text}}
	for _, n := range r.Notices {
		content = append(content, &mcp.TextContent{Text: n.Text})
	}
	out := &mcp.CallToolResult{Content: content, StructuredContent: r.Value, IsError: r.IsError}
	if len(r.Notices) > 0 {
		out.Meta = mcp.Meta{NoticesMetaKey: r.Notices}
	}
	return out
}

// mcpWatch is the notice subscriptions of one MCP session.
type mcpWatch struct {
	mu       sync.Mutex
	sessions map[string]bool // tenant/session watched
	queue    chan eventstream.Event
}

// watchMCP subscribes the MCP session to the sandbox session's events, once:
// each notice becomes a notifications/message (logger "shellbox", data the
// event). Delivery goes through a bounded queue and its own goroutine, so
// a slow client cannot stall the publisher; overflow drops events.
func (s *Server) watchMCP(ss *mcp.ServerSession, tenant, session string) {
	if ss == nil {
		return
	}
	v, loaded := s.mcpWatches.LoadOrStore(ss, &mcpWatch{sessions: map[string]bool{}, queue: make(chan eventstream.Event, s.cfg.EventBuffer)})
	w := v.(*mcpWatch)
	key := tenant + "/" + session
	w.mu.Lock()
	if w.sessions[key] {
		w.mu.Unlock()
		return
	}
	w.sessions[key] = true
	w.mu.Unlock()
	cancel := s.events.subscribeFunc(tenant, session, func(e eventstream.Event) {
		select {
		case w.queue <- e:
		default:
			s.countError("slow_mcp_subscriber")
		}
	})
	if loaded {
		go func() { ss.Wait(); cancel() }()
		return
	}
	done := make(chan struct{})
	go func() {
		ss.Wait()
		cancel()
		close(done)
		s.mcpWatches.Delete(ss)
	}()
	go func() {
		for {
			select {
			case <-done:
				return
			case e := <-w.queue:
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: "notice", Logger: NoticeLogger, Data: e})
				cancel()
			}
		}
	}()
}

// forwardNotices sends the sandbox session's notices published while a
// stateless request runs as notifications/message (logger "shellbox") on
// the request's stream, when the request's _meta asked for log messages
// (io.modelcontextprotocol/logLevel); they also ride in the next result's
// _meta. stop ends the forwarding and waits for it.
func (s *Server) forwardNotices(ctx context.Context, ss *mcp.ServerSession, tenant, session string) (stop func()) {
	queue := make(chan eventstream.Event, s.cfg.EventBuffer)
	cancel := s.events.subscribeFunc(tenant, session, func(e eventstream.Event) {
		select {
		case queue <- e:
		default:
			s.countError("slow_mcp_subscriber")
		}
	})
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case e := <-queue:
				_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: "notice", Logger: NoticeLogger, Data: e})
			}
		}
	}()
	return func() {
		cancel()
		close(done)
		<-finished
	}
}

// ServeStdio serves MCP over in and out (a local harness's pipes) until the
// client disconnects or ctx is done. Every call runs as the tenant's
// session.
func (s *Server) ServeStdio(ctx context.Context, tenant, session string, in io.ReadCloser, out io.WriteCloser) error {
	ctx = context.WithValue(ctx, stdioKey{}, stdioIdentity{tenant: tenant, session: session})
	srv := s.mcpServer(tenant, s.definitions(ctx, tenant, session), false)
	ss, err := srv.Connect(ctx, &mcp.IOTransport{Reader: in, Writer: out}, nil)
	if err != nil {
		return err
	}
	return ss.Wait()
}
