package servertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// Transports for executortest.Harness.Transport: the conformance suite's
// calls carried through a real server by real clients.

// RESTSkips are the cases a remote caller cannot observe as the suite does.
var RESTSkips = map[string]string{
	"tree/cancel_kills_tree": "a cancelled HTTP call returns at once on the client; the server aborts the command after it (server TestCancelAbortsCommand)",
}

// serve starts a server whose every tenant uses ts (the conformance
// suite's, over whatever executor it was built on).
func serve(t testing.TB, ts *tools.Toolset) *Server {
	b := NewLocalBackend(t)
	b.Toolsets = func(string) *tools.Toolset { return ts }
	return Start(t, b, nil)
}

// transportResult is what a call that did not get through returns: the
// aborted text when the caller gave up (the server aborted the command),
// else a text that fails the case.
func transportResult(ctx context.Context, err error) tools.Result {
	msg := "transport failure: " + err.Error()
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		msg = "tool call aborted"
	}
	return tools.Result{Text: tools.RenderError(msg), IsError: true, Value: &tools.ErrorValue{Kind: "error", Message: msg}}
}

// RESTTransport carries suite calls over POST /v1/sessions/{id}/tools/{tool}.
func RESTTransport(t *testing.T, ts *tools.Toolset) func(context.Context, tools.Invocation) tools.Result {
	return RemoteREST(serve(t, ts).URL, TokenAcme)
}

// RemoteREST carries suite calls over the REST API of the server at url
// (one already running: in a cluster, say) with a tenant's token.
func RemoteREST(url, token string) func(context.Context, tools.Invocation) tools.Result {
	c := client.New(url, token, nil)
	return func(ctx context.Context, inv tools.Invocation) tools.Result {
		var r tools.Result
		var err error
		if inv.Live != nil {
			r, err = c.CallStream(ctx, inv.Session, inv.Tool, inv.Args, func(o server.LiveOutput) {
				inv.Live(executor.Chunk{Stream: o.Stream, Data: []byte(o.Text), Skipped: o.Skipped})
			})
		} else {
			r, err = c.Call(ctx, inv.Session, inv.Tool, inv.Args)
		}
		if err != nil {
			return transportResult(ctx, err)
		}
		return r
	}
}

// MCPSkips are the cases MCP cannot express as tool results; the server
// tests check what MCP does with them instead.
var MCPSkips = map[string]string{
	"pwsh/pwsh":              "MCP offers pwsh only to sessions whose image has it; elsewhere calling it is an unknown tool, a protocol error (client TestMCPToolsAndResults)",
	"tree/cancel_kills_tree": RESTSkips["tree/cancel_kills_tree"],
	"args/unknown_tool":      "MCP answers an unknown tool with a protocol error (TestMCPUnknownTool)",
	"args/invalid_session":   "MCP names the session in a header; an invalid name is refused with 400 before MCP (TestMCPBadSessionHeader)",
}

// MCPTransport carries suite calls over /mcp at the client's default
// revision (2026-07-28, the stateless core), one client per sandbox
// session, named with the Shellbox-Session header.
func MCPTransport(t *testing.T, ts *tools.Toolset) func(context.Context, tools.Invocation) tools.Result {
	return mcpTransport(t, ts, "")
}

// MCPSessionsTransport is MCPTransport at revision 2025-11-25, one MCP
// session per sandbox session.
func MCPSessionsTransport(t *testing.T, ts *tools.Toolset) func(context.Context, tools.Invocation) tools.Result {
	return mcpTransport(t, ts, "2025-11-25")
}

func mcpTransport(t *testing.T, ts *tools.Toolset, revision string) func(context.Context, tools.Invocation) tools.Result {
	return RemoteMCP(t, serve(t, ts).URL, TokenAcme, revision)
}

// RemoteMCP carries suite calls over /mcp of the server at url with a
// tenant's token, at revision ("" for the client's default, 2026-07-28),
// one MCP client per sandbox session; they are closed when t ends.
func RemoteMCP(t testing.TB, url, token, revision string) func(context.Context, tools.Invocation) tools.Result {
	url += "/mcp"
	var opts *mcp.ClientSessionOptions
	if revision != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: revision}
	}
	var mu sync.Mutex
	var pr client.ProgressRouter
	sessions := map[string]*mcp.ClientSession{}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, cs := range sessions {
			cs.Close()
		}
	})
	get := func(session string) (*mcp.ClientSession, error) {
		mu.Lock()
		defer mu.Unlock()
		if cs, ok := sessions[session]; ok {
			return cs, nil
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "conformance", Version: "1"}, &mcp.ClientOptions{ProgressNotificationHandler: pr.Handle})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := c.Connect(ctx, client.MCPTransport(url, token, session, nil), opts)
		if err == nil && revision != "" && cs.InitializeResult().ProtocolVersion != revision {
			cs.Close()
			return nil, fmt.Errorf("negotiated MCP revision %s, want %s", cs.InitializeResult().ProtocolVersion, revision)
		}
		if err != nil {
			return nil, err
		}
		sessions[session] = cs
		return cs, nil
	}
	return func(ctx context.Context, inv tools.Invocation) tools.Result {
		cs, err := get(inv.Session)
		if err != nil {
			return transportResult(ctx, err)
		}
		args := inv.Args
		if len(args) > 0 && !json.Valid(args) {
			return transportResult(ctx, errors.New("MCP cannot carry malformed JSON"))
		}
		var r tools.Result
		if inv.Live != nil {
			// A progress message is both streams as text: it arrives as stdout.
			r, err = client.CallMCPLive(ctx, cs, &pr, inv.Tool, args, func(msg string) {
				inv.Live(executor.Chunk{Stream: executor.Stdout, Data: []byte(msg)})
			})
		} else {
			r, err = client.CallMCP(ctx, cs, inv.Tool, args)
		}
		if err != nil {
			return transportResult(ctx, err)
		}
		return r
	}
}

// RemoteNotices follows the event stream (GET /v1/events) of the tenant of
// token on the server at url and gives each background task's completion
// notice to notify, for executortest.Harness.Notices: through a remote
// server the tasks end in its Toolset, not the suite's, and a caller learns
// of them from this stream (an MCP client at 2026-07-28 only with its
// next result, which the suite checks as Result.Notices). It returns once
// the server has subscribed the stream; the stream ends when t does, and a
// stream the server ends earlier fails t.
func RemoteNotices(t testing.TB, url, token string, notify func(session string, n tools.Notice)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	es, err := client.New(url, token, nil).Subscribe(ctx, "")
	if err != nil {
		cancel()
		t.Fatalf("servertest: event stream of %s: %v", url, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer es.Close()
		for {
			e, err := es.Next()
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("servertest: event stream of %s ended: %v", url, err)
				}
				return
			}
			if e.Type == eventstream.EventNotice && e.Notice != nil {
				notify(e.Session, *e.Notice)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
