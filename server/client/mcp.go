package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/tools"
)

// MCPTransport returns the streamable HTTP transport to endpoint (…/mcp)
// that authenticates with token and names the sandbox session (empty: the
// MCP session id names it). base nil means http.DefaultTransport.
func MCPTransport(endpoint, token, session string, base http.RoundTripper) *mcp.StreamableClientTransport {
	if base == nil {
		base = http.DefaultTransport
	}
	return &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: headers{base: base, token: token, session: session}},
		MaxRetries: -1,
	}
}

type headers struct {
	base           http.RoundTripper
	token, session string
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.token)
	if h.session != "" {
		r.Header.Set(server.SessionHeader, h.session)
	}
	if r.Method == http.MethodPost && r.Header.Get(server.IdempotencyHeader) == "" {
		// Run once however often it arrives: net/http's transport resends
		// such a request when a kept-alive connection was closed under it.
		r.Header.Set(server.IdempotencyHeader, rand.Text())
	}
	return h.base.RoundTrip(r)
}

// CallMCP calls a tool over an MCP session and returns the tools.Result it
// carries: the first text content as Text, structuredContent decoded into
// the typed Value, the notices from _meta.
func CallMCP(ctx context.Context, cs *mcp.ClientSession, tool string, args json.RawMessage) (tools.Result, error) {
	p := &mcp.CallToolParams{Name: tool}
	if len(args) > 0 {
		p.Arguments = args
	}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		return tools.Result{}, err
	}
	return FromMCP(res)
}

// CallMCPLive is CallMCP with live output: the call carries a progress
// token, and live is called with the message of each progress notification
// the server sends for it (the command's output as text, see
// server.LiveBytes), in order. The server sends the last one before the
// result, but the SDK handles notifications on a goroutine of its own, so
// the last calls of live may come just after CallMCPLive returned. cs's
// client must route progress notifications with pr.
func CallMCPLive(ctx context.Context, cs *mcp.ClientSession, pr *ProgressRouter, tool string, args json.RawMessage, live func(message string)) (tools.Result, error) {
	p := &mcp.CallToolParams{Name: tool}
	if len(args) > 0 {
		p.Arguments = args
	}
	token := pr.add(live)
	defer pr.remove(token)
	p.SetProgressToken(token)
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		return tools.Result{}, err
	}
	return FromMCP(res)
}

// ProgressRouter hands each progress notification to the call whose token
// it carries. Set its Handle as the mcp.ClientOptions'
// ProgressNotificationHandler. The zero value is ready to use.
type ProgressRouter struct {
	mu    sync.Mutex
	next  int64
	calls map[string]func(string)
}

func (pr *ProgressRouter) add(live func(string)) string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.calls == nil {
		pr.calls = map[string]func(string){}
	}
	pr.next++
	token := "live-" + strconv.FormatInt(pr.next, 10)
	pr.calls[token] = live
	return token
}

func (pr *ProgressRouter) remove(token string) {
	pr.mu.Lock()
	delete(pr.calls, token)
	pr.mu.Unlock()
}

// Handle is an mcp.ClientOptions.ProgressNotificationHandler.
func (pr *ProgressRouter) Handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	token, _ := req.Params.ProgressToken.(string)
	pr.mu.Lock()
	live := pr.calls[token]
	pr.mu.Unlock()
	if live != nil {
		live(req.Params.Message)
	}
}

// FromMCP converts an MCP tool result made by the server.
func FromMCP(res *mcp.CallToolResult) (tools.Result, error) {
	r := tools.Result{IsError: res.IsError}
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			r.Text = tc.Text
		}
	}
	if res.StructuredContent != nil {
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return r, err
		}
		if r.Value, err = DecodeValue(raw); err != nil {
			return r, err
		}
	}
	if n, ok := res.Meta[server.NoticesMetaKey]; ok {
		raw, _ := json.Marshal(n)
		if err := json.Unmarshal(raw, &r.Notices); err != nil {
			return r, err
		}
	}
	return r, nil
}
