package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// BenchmarkChart measures, through the chart's Service from outside the
// cluster, side by side on runc and gVisor: a new session's first result
// over REST (the server creates its pod: scheduling, the init container
// copying the agent, the agent's start, the call), and a warm call of an
// existing session over MCP (revision 2026-07-28) and REST.
//
//	go test -run '^$' -bench Chart -benchtime 20x ./deploy/helm/e2e/
func BenchmarkChart(b *testing.B) {
	c := kubetest.Connect(b)
	var tenants []Tenant
	for _, rt := range runtimes {
		tenants = append(tenants, Tenant{Name: rt.tenant, Policy: chartPolicy(rt.runtime, "127.0.0.1:9")})
	}
	r := Install(b, c, Options{Tenants: tenants})
	ctx := context.Background()
	for _, rt := range runtimes {
		rc := client.New(r.URL, r.Tokens[rt.tenant], nil)
		callREST := func(b *testing.B, session string) {
			res, err := rc.Call(ctx, session, tools.ToolBash, bashArgs("true", false))
			if err != nil || res.IsError {
				b.Fatalf("%s: %v %+v", session, err, res)
			}
		}
		b.Run(rt.runtime+"/cold-first-result-rest", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				s := fmt.Sprintf("cold-%d", i)
				callREST(b, s)
				b.StopTimer()
				dctx, cancel := context.WithTimeout(ctx, time.Minute)
				if err := rc.DeleteSession(dctx, s); err != nil {
					b.Fatal(err)
				}
				cancel()
				b.StartTimer()
			}
		})
		b.Run(rt.runtime+"/warm-rest", func(b *testing.B) {
			callREST(b, "warm")
			for b.Loop() {
				callREST(b, "warm")
			}
		})
		b.Run(rt.runtime+"/warm-mcp", func(b *testing.B) {
			mc := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
			cs, err := mc.Connect(ctx, client.MCPTransport(r.URL+"/mcp", r.Tokens[rt.tenant], "warm", nil), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			callREST(b, "warm")
			for b.Loop() {
				res, err := client.CallMCP(ctx, cs, tools.ToolBash, bashArgs("true", false))
				if err != nil || res.IsError {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}
