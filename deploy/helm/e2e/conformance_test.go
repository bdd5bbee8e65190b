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
// outside it, through its Service: over MCP with the official Go SDK's
// client at revision 2026-07-28 (any replica serves any call), every
// case's session a pod of the release under runc; then over REST
// (server/client) with every session a pod under gVisor (the release's
// RuntimeClass). A session's pod is made on the case's first call and
// deleted through the API when the case ends.
//
// Each pair of the three (transport, server, sandbox) is covered by a
// run that costs less than a third run here would (REST on runc through
// the chart, 2-4 minutes of the CI's longest package): REST and MCP
// through a real server on runc sandboxes (cmd/shellbox's Docker
// conformance), runc session pods without the server
// (executor/sandboxed/kubeconformance), the chart over REST (the gVisor
// run) and over runc (the MCP run).
//
// The two runs go one after the other in one package: beside this
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
	// One after the other: the two share the suite's session names.
	t.Run("mcp", func(t *testing.T) { executortest.Run(t, r.Harness("conf", mcp, servertest.MCPSkips)) })
	t.Run("rest-gvisor", func(t *testing.T) { executortest.Run(t, r.Harness("confg", rest, servertest.RESTSkips)) })
}
