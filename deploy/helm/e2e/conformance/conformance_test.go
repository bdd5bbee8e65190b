// Package conformance runs the executor conformance suite through a
// shellbox installed by the Helm chart on the real cluster of
// SHELLBOX_KUBECONFIG, from outside the cluster through the chart's
// Service. A package of its own so that its test binary (every case makes
// a session pod) runs beside the others under its own timeout.
package conformance_test

import (
	"context"
	"testing"

	"github.com/shellbox/shellbox/deploy/helm/e2e"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/sandbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

func rest(_ *testing.T, url, token string) func(context.Context, tools.Invocation) tools.Result {
	return servertest.RemoteREST(url, token)
}

func mcpStateless(t *testing.T, url, token string) func(context.Context, tools.Invocation) tools.Result {
	return servertest.RemoteMCP(t, url, token, "")
}

// TestChartConformance: one release, a tenant per limits profile and
// runtime; the suite over REST on runc, then over MCP (revision
// 2026-07-28) under gVisor. (The other two pairings run the same server
// code: REST under gVisor and MCP on runc are the chart tests' cases in
// package e2e; both transports on both runtimes pass the suite on Docker.)
func TestChartConformance(t *testing.T) {
	c := kubetest.Connect(t)
	tenants := append(e2e.SuiteTenants("runc", "runc"), e2e.SuiteTenants("gvisor", "runsc")...)
	r := e2e.Install(t, c, e2e.Options{Tenants: tenants})
	t.Run("runc-rest", func(t *testing.T) {
		executortest.Run(t, r.Harness("runc", rest, servertest.RESTSkips))
	})
	t.Run("gvisor-mcp", func(t *testing.T) {
		executortest.Run(t, r.Harness("gvisor", mcpStateless, servertest.MCPSkips))
	})
}
