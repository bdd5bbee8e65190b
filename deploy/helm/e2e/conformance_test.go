package e2e

import (
	"context"
	"os"
	"testing"

	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/kube/kubetest"
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
// against the chart installed on the real cluster, from outside it,
// through its Service, over REST (server/client), with every case's
// session a pod of the release under gVisor (the release's
// RuntimeClass): the one run of the whole suite on gVisor pods. A
// session's pod is made on the case's first call and deleted through the
// API when the case ends.
//
// One run, not one per transport: each pair of the three (transport,
// server, sandbox) is covered by a run that costs less than a second
// chart run would (the MCP run on runc pods took 5-9 minutes of the CI's
// longest package on the 2-core node, and its load on the node made its
// own timing cases flaky): MCP through a real server with the official
// SDK's client (cmd/shellbox's containerd conformance, server's), MCP
// through both replicas of the chart, plain and streamed
// (TestReplicas/alternate and TestReplicas/live). It is also the one run of
// the suite on session pods: the run on runc pods without the server
// (executor/sandboxed/kubeconformance) was dropped, a second pod per case.
func TestChartConformance(t *testing.T) {
	c := kubetest.Connect(t)
	r := Install(t, c, Options{Tenants: SuiteTenants("confg", "runsc")})
	rest := func(t *testing.T, url, token string) func(context.Context, tools.Invocation) tools.Result {
		return servertest.RemoteREST(url, token)
	}
	executortest.Run(t, r.Harness("confg", rest, servertest.RESTSkips))
}
