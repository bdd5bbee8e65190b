// Package gvisorconformance runs the executor conformance suite through
// the chart on the real cluster with every session a gVisor pod. It is a
// package of its own so that its test binary (about 5 minutes on the
// 2-core CI node: a gVisor pod per case) runs beside deploy/helm/e2e's
// under its own timeout instead of lengthening that one.
package gvisorconformance

import (
	"context"
	"os"
	"testing"

	"github.com/shellbox/shellbox/deploy/helm/e2e"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/sandbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

// TestMain runs the cases 8 at a time (each waits seconds for its
// session's pod).
func TestMain(m *testing.M) {
	kubetest.Parallel(8)
	os.Exit(m.Run())
}

// TestChartConformanceGVisor runs the executor conformance suite,
// unchanged, against the chart installed on the real cluster (2
// replicas), from outside it, through its Service over REST, with every
// case's session a pod under gVisor (the release's RuntimeClass), made on
// the case's first call and deleted when the case ends. The MCP transport
// and runc are deploy/helm/e2e's TestChartConformance; the two transports
// share everything below the server's handlers, which runc's run covers.
func TestChartConformanceGVisor(t *testing.T) {
	c := kubetest.Connect(t)
	r := e2e.Install(t, c, e2e.Options{Tenants: e2e.SuiteTenants("confg", "runsc")})
	rest := func(t *testing.T, url, token string) func(context.Context, tools.Invocation) tools.Result {
		return servertest.RemoteREST(url, token)
	}
	executortest.Run(t, r.Harness("confg", rest, servertest.RESTSkips))
}
