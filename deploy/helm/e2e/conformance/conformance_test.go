// Package conformance runs the executor conformance suite through a
// shellbox installed by the Helm chart on the real cluster of
// SHELLBOX_KUBECONFIG, from outside the cluster through the chart's
// Service. A package of its own so that its test binary (every case makes
// a session pod) runs beside the others under its own timeout.
package conformance_test

import (
	"context"
	"os"
	"testing"
	"time"

	m3client "github.com/mark3labs/mcp-go/client"
	m3transport "github.com/mark3labs/mcp-go/client/transport"
	m3 "github.com/mark3labs/mcp-go/mcp"

	"github.com/shellbox/shellbox/deploy/helm/e2e"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/sandbox/kube/kubetest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

// TestMain runs the suite's cases 8 at a time unless -test.parallel says
// otherwise (kubetest.Parallel); 8 is also the release's
// sandbox.maxCreating (e2e.Install).
func TestMain(m *testing.M) {
	kubetest.Parallel(8)
	os.Exit(m.Run())
}

func rest(_ *testing.T, url, token string) func(context.Context, tools.Invocation) tools.Result {
	return servertest.RemoteREST(url, token)
}

func mcpStateless(t *testing.T, url, token string) func(context.Context, tools.Invocation) tools.Result {
	return servertest.RemoteMCP(t, url, token, "")
}

// TestChartConformance: one release, a tenant per limits profile, session
// pods under runc; the suite over REST, then over MCP (revision
// 2026-07-28), completion notices from the tenants' event streams. (Under
// gVisor the suite, a pod per case, twice, outran the package's timeout on
// the 2-core CI node; gVisor through the chart is TestChart's, in package
// e2e, over both transports.)
func TestChartConformance(t *testing.T) {
	c := kubetest.Connect(t)
	r := e2e.Install(t, c, e2e.Options{Tenants: e2e.SuiteTenants("runc", "runc")})
	t.Run("rest", func(t *testing.T) {
		executortest.Run(t, r.Harness("runc", rest, servertest.RESTSkips))
	})
	t.Run("mcp", func(t *testing.T) {
		executortest.Run(t, r.Harness("runc", mcpStateless, servertest.MCPSkips))
	})
	t.Run("mcp-go", func(t *testing.T) { outsider(t, r) })
}

// outsider: an MCP client nobody here wrote (mark3labs/mcp-go, at its
// default revision over streamable HTTP) makes one call through the
// Service and reads the command's output from the session's pod.
func outsider(t *testing.T, r *e2e.Release) {
	token, session := r.Tokens["runc-0"], "mcp-go-outsider"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	defer func() {
		if err := client.New(r.URL, token, nil).DeleteSession(ctx, session); err != nil {
			t.Errorf("delete session %s: %v", session, err)
		}
	}()
	tr, err := m3transport.NewStreamableHTTP(r.URL+"/mcp", m3transport.WithHTTPHeaders(map[string]string{
		"Authorization": "Bearer " + token, server.SessionHeader: session}))
	if err != nil {
		t.Fatal(err)
	}
	c := m3client.NewClient(tr)
	if err := c.Start(ctx); err != nil {
		t.Fatalf("mcp-go start: %v", err)
	}
	defer c.Close()
	ir, err := c.Initialize(ctx, m3.InitializeRequest{})
	if err != nil {
		t.Fatalf("mcp-go initialize: %v", err)
	}
	req := m3.CallToolRequest{}
	req.Params.Name = tools.ToolBash
	req.Params.Arguments = map[string]any{"command": `echo "$DSH_SESSION_ID in $PWD"`, "description": "say where it runs"}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("mcp-go call (revision %s): %v", ir.ProtocolVersion, err)
	}
	want := session + " in /workspace"
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("mcp-go result (revision %s): error %v, content %+v; want the text %q", ir.ProtocolVersion, res.IsError, res.Content, want)
	}
	if tc, ok := res.Content[0].(m3.TextContent); !ok || tc.Text != want {
		t.Fatalf("mcp-go result (revision %s): %+v, want the text %q", ir.ProtocolVersion, res.Content[0], want)
	}
}
