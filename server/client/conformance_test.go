package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

// newLocal returns a local executor in root with lim, closed when t ends.
func newLocal(t *testing.T, root, home string, lim executor.Limits) *local.Executor {
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
}

func runLocal(t *testing.T, transport func(t *testing.T, ts *tools.Toolset) func(context.Context, tools.Invocation) tools.Result, skip map[string]string) {
	root, home := t.TempDir(), t.TempDir()
	executortest.Run(t, executortest.Harness{
		New: func(t *testing.T, lim executor.Limits) executor.BashExecutor {
			return newLocal(t, root, home, lim)
		},
		Root:      executortest.FixedRoot(root),
		Home:      home,
		InProcess: true,
		Transport: transport,
		Skip:      skip,
	})
}

// TestConformanceREST runs the conformance suite through the REST API.
func TestConformanceREST(t *testing.T) { runLocal(t, servertest.RESTTransport, servertest.RESTSkips) }

// TestConformanceMCP runs it through /mcp with the official MCP client at
// its default revision (2026-07-28).
func TestConformanceMCP(t *testing.T) { runLocal(t, servertest.MCPTransport, servertest.MCPSkips) }

// TestConformanceMCPSessions runs it at revision 2025-11-25.
func TestConformanceMCPSessions(t *testing.T) {
	runLocal(t, servertest.MCPSessionsTransport, servertest.MCPSkips)
}

// TestConformanceRemoteNotices runs it through the REST API of a server
// with Toolsets of its own over the suite's executors, as a remote server
// has (the chart's): the suite's Toolset starts no task, so it learns of
// tasks' ends only from the server's event stream
// (servertest.RemoteNotices), as it does through the chart. The home is
// the session cwd, as in the server's sandboxes (both /workspace).
func TestConformanceRemoteNotices(t *testing.T) {
	root := t.TempDir()
	home := root
	var last executor.BashExecutor
	var urls sync.Map // executor.BashExecutor → the URL of its server
	executortest.Run(t, executortest.Harness{
		New: func(t *testing.T, lim executor.Limits) executor.BashExecutor {
			last = newLocal(t, root, home, lim)
			return last
		},
		Root:      executortest.FixedRoot(root),
		Home:      home,
		InProcess: true,
		Transport: func(t *testing.T, _ *tools.Toolset) func(context.Context, tools.Invocation) tools.Result {
			b := servertest.NewLocalBackend(t)
			var srv *servertest.Server
			ts, err := tools.New(last, tools.Config{Home: home, OnNotice: func(session string, n tools.Notice) {
				srv.Notify("acme", session, n)
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ts.Close)
			b.Toolsets = func(string) *tools.Toolset { return ts }
			srv = servertest.Start(t, b, nil)
			urls.Store(last, srv.URL)
			return servertest.RemoteREST(srv.URL, servertest.TokenAcme)
		},
		Notices: func(t *testing.T, e executor.BashExecutor, notify func(string, tools.Notice)) {
			url, _ := urls.Load(e)
			servertest.RemoteNotices(t, url.(string), servertest.TokenAcme, notify)
		},
		Skip: servertest.RESTSkips,
	})
}
