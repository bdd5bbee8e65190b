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

	"github.com/shellbox/shellbox/tools"
)

// SessionHeader names the sandbox session of an MCP client (or of a REST
// events or tool request made without a path id). Without it, an MCP
// client's session is its MCP session id. Reconnecting with the same name
// reaches the same sandbox.
const SessionHeader = "Shellbox-Session"

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
func (s *Server) mcpServer(tenant string, defs []tools.Definition) *mcp.Server {
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	key := tenant + "|" + strings.Join(names, ",")
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
func (s *Server) mcpServerFor(r *http.Request) *mcp.Server {
	tenant := tenantOf(r.Context())
	return s.mcpServer(tenant, s.definitions(r.Context(), tenant, r.Header.Get(SessionHeader)))
}

// mcpSessions counts the tenant's open MCP sessions.
func (s *Server) mcpSessions(tenant string) int {
	s.mcpMu.Lock()
	var srvs []*mcp.Server
	for key, srv := range s.mcpSrvs {
		if strings.HasPrefix(key, tenant+"|") {
			srvs = append(srvs, srv)
		}
	}
	s.mcpMu.Unlock()
	n := 0
	for _, srv := range srvs {
		for range srv.Sessions() {
			n++
		}
	}
	return n
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

// mcpHandler serves /mcp. The tenant comes from the bearer token (checked
// by authenticate); the SDK also records it as the MCP session's user, so an
// MCP session id cannot be used with another tenant's token.
func (s *Server) mcpHandler() http.Handler {
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		tenant, ok := s.tokens.lookup(token)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: tenant, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	inner := auth.RequireBearerToken(verify, nil)(s.mcpHTTP)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get(SessionHeader); name != "" {
			if err := validSession(name); err != nil {
				s.countError("invalid_session")
				writeError(w, http.StatusBadRequest, "invalid_session", SessionHeader+": "+err.Error())
				return
			}
			setLogAttr(r.Context(), "session", name)
		}
		// A POST without a session id opens a new MCP session.
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			tenant := tenantOf(r.Context())
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

// identity is the tenant and sandbox session of an MCP tool call.
func (s *Server) identity(ctx context.Context, req *mcp.CallToolRequest) (tenant, session string) {
	if id, ok := ctx.Value(stdioKey{}).(stdioIdentity); ok {
		return id.tenant, id.session
	}
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		tenant = req.Extra.TokenInfo.UserID
	}
	if req.Extra != nil && req.Extra.Header != nil {
		session = req.Extra.Header.Get(SessionHeader)
	}
	if session == "" && req.Session != nil {
		session = req.Session.ID()
	}
	return tenant, session
}

func (s *Server) mcpTool(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		tenant, session := s.identity(ctx, req)
		if tenant == "" {
			return toMCPResult(errorResult("unauthenticated MCP call")), nil
		}
		args := req.Params.Arguments
		if string(args) == "null" {
			// No arguments at all: the tools report the first missing one.
			args = nil
		}
		res, err := s.call(ctx, tenant, session, name, args)
		if err != nil {
			// The call did not run; the model reads why.
			return toMCPResult(errorResult(err.Error())), nil
		}
		s.watchMCP(req.Session, tenant, session)
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
	queue    chan Event
}

// watchMCP subscribes the MCP session to the sandbox session's events, once:
// each notice becomes a notifications/message (logger "shellbox", data the
// event). Delivery goes through a bounded queue and its own goroutine, so
// a slow client cannot stall the publisher; overflow drops events.
func (s *Server) watchMCP(ss *mcp.ServerSession, tenant, session string) {
	if ss == nil {
		return
	}
	v, loaded := s.mcpWatches.LoadOrStore(ss, &mcpWatch{sessions: map[string]bool{}, queue: make(chan Event, s.cfg.EventBuffer)})
	w := v.(*mcpWatch)
	key := tenant + "/" + session
	w.mu.Lock()
	if w.sessions[key] {
		w.mu.Unlock()
		return
	}
	w.sessions[key] = true
	w.mu.Unlock()
	cancel := s.events.subscribeFunc(tenant, session, func(e Event) {
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

// ServeStdio serves MCP over in and out (a local harness's pipes) until the
// client disconnects or ctx is done. Every call runs as the tenant's
// session.
func (s *Server) ServeStdio(ctx context.Context, tenant, session string, in io.ReadCloser, out io.WriteCloser) error {
	ctx = context.WithValue(ctx, stdioKey{}, stdioIdentity{tenant: tenant, session: session})
	srv := s.mcpServer(tenant, s.definitions(ctx, tenant, session))
	ss, err := srv.Connect(ctx, &mcp.IOTransport{Reader: in, Writer: out}, nil)
	if err != nil {
		return err
	}
	return ss.Wait()
}
