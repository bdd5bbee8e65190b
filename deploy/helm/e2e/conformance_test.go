package e2e

import (
	"context"
	"os"
	"testing"

	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

// TestMain runs the conformance cases 8 at a time (each waits seconds
// for its session's pod); the other tests of the package do not call
// t.Parallel.
func TestMain(m *testing.M) {
	kubetest.Parallel(8)
	os.Exit(m.Run())
}

// TestChartConformance runs the executor conformance suite, unchanged,
// against the chart installed on the real cluster (2 replicas), from
// outside it, through its Service: over REST (server/client), then over
// MCP with the official Go SDK's client at revision 2026-07-28 (any
// replica serves any call), every case's session a pod of the release
// under runc; then over REST again with every session a pod under gVisor
// (the release's RuntimeClass; the two transports share everything below
// the server's handlers, which runc's two runs cover). A session's pod is
// made on the case's first call and deleted through the API when the
// case ends. executor/sandboxed/kubeconformance runs the same cases
// against runc session pods directly; this one adds the server, the
// chart and the Service in between.
//
// The three runs go one after the other in one package: beside this
// package in a package of its own, the gVisor run loaded the 2-core CI
// node enough that the MCP run's timeout cases ran out of time.
func TestChartConformance(t *testing.T) {
	c := kubetest.Connect(t)
	tenants := append(SuiteTenants("conf", "runc"), SuiteTenants("confg", "runsc")...)
	r := Install(t, c, Options{Tenants: tenants})
	rest := func(t *testing.T, url, token string) func(context.Context, tools.Invocation) tools.Result {
		return servertest.RemoteREST(url, token)
	}
	mcp := func(t *testing.T, url, token string) func(context.Context, tools.Invocation) tools.Result {
		return servertest.RemoteMCP(t, url, token, server.Revision20260728)
	}
	// One after the other: the two share the release's tenants and the
	// suite's session names.
	t.Run("rest", func(t *testing.T) { executortest.Run(t, r.Harness("conf", rest, servertest.RESTSkips)) })
	t.Run("mcp", func(t *testing.T) { executortest.Run(t, r.Harness("conf", mcp, servertest.MCPSkips)) })
	t.Run("rest-gvisor", func(t *testing.T) { executortest.Run(t, r.Harness("confg", rest, servertest.RESTSkips)) })
}
