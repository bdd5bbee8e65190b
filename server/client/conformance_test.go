package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/executor/local"
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
func TestConformanceREST(t *testing.T) { runLocal(t, servertest.RESTTransport, servertest.RESTSkips) }

// TestConformanceMCP runs it through /mcp with the official MCP client at
// its default revision (2026-07-28).
func TestConformanceMCP(t *testing.T) { runLocal(t, servertest.MCPTransport, servertest.MCPSkips) }

// TestConformanceMCPSessions runs it at revision 2025-11-25.
func TestConformanceMCPSessions(t *testing.T) {
	runLocal(t, servertest.MCPSessionsTransport, servertest.MCPSkips)
}
