package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

func runLocal(t *testing.T, transport func(t *testing.T, ts *tools.Toolset) func(context.Context, tools.Invocation) tools.Result, skip map[string]string) {
	root, home := t.TempDir(), t.TempDir()
	executortest.Run(t, executortest.Harness{
		New: func(t *testing.T, lim executor.Limits) executor.BashExecutor {
			e, err := local.New(local.Config{Root: root, Home: home, SpillDir: t.TempDir(), Limits: lim})
			if err != nil {
				t.Fatalf("local.New: %v", err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				e.Close(ctx)
			})
			return e
		},
		Root:      executortest.FixedRoot(root),
		Home:      home,
		InProcess: true,
		Transport: transport,
		Skip:      skip,
	})
}

// TestConformanceREST runs the conformance suite through the REST API.
func TestConformanceREST(t *testing.T) { runLocal(t, RESTTransport, RESTSkips) }

// RESTSkips are the cases a remote caller cannot observe as the suite does.
var RESTSkips = map[string]string{
	"tree/cancel_kills_tree": "a cancelled HTTP call returns at once on the client; the server aborts the command after it (server TestCancelAbortsCommand)",
}

// TestConformanceMCP runs it through /mcp with the official MCP client.
func TestConformanceMCP(t *testing.T) { runLocal(t, MCPTransport, MCPSkips) }

// serve starts a server whose every tenant uses ts.
func serve(t *testing.T, ts *tools.Toolset) *servertest.Server {
	b := servertest.NewLocalBackend(t)
	b.Toolsets = func(string) *tools.Toolset { return ts }
	return servertest.Start(t, b, nil)
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
	c := client.New(serve(t, ts).URL, servertest.TokenAcme, nil)
	return func(ctx context.Context, inv tools.Invocation) tools.Result {
		r, err := c.Call(ctx, inv.Session, inv.Tool, inv.Args)
		if err != nil {
			return transportResult(ctx, err)
		}
		return r
	}
}

// MCPSkips are the cases MCP cannot express as tool results; the server
// tests check what MCP does with them instead.
var MCPSkips = map[string]string{
	"tree/cancel_kills_tree": RESTSkips["tree/cancel_kills_tree"],
	"args/unknown_tool":      "MCP answers an unknown tool with a protocol error (TestMCPUnknownTool)",
	"args/invalid_session":   "MCP names the session in a header; an invalid name is refused with 400 before MCP (TestMCPBadSessionHeader)",
}

// MCPTransport carries suite calls over /mcp, one MCP session per sandbox
// session, named with the Shellbox-Session header.
func MCPTransport(t *testing.T, ts *tools.Toolset) func(context.Context, tools.Invocation) tools.Result {
	url := serve(t, ts).URL + "/mcp"
	var mu sync.Mutex
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
		c := mcp.NewClient(&mcp.Implementation{Name: "conformance", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := c.Connect(ctx, client.MCPTransport(url, servertest.TokenAcme, session, nil), nil)
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
		r, err := client.CallMCP(ctx, cs, inv.Tool, args)
		if err != nil {
			return transportResult(ctx, err)
		}
		return r
	}
}
