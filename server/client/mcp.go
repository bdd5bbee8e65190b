package client

import (
	"context"
	"encoding/json"
	"net/http"

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
