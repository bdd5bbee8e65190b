package sandboxed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/tools"
)

// BenchmarkColdSession measures a new session's first call end to end: the
// Manager creates the hardened container, waits for its agent, the executor
// dials it and runs `true` through the tools. Removal is outside the timing.
//
//	go test ./executor/sandboxed/ -run XXX -bench ColdSession -benchtime 20x
func BenchmarkColdSession(b *testing.B) {
	for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		b.Run(runtime, func(b *testing.B) {
			r := newRig(b, runtime, executor.DefaultLimits())
			ts, err := tools.New(r.exec, tools.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer ts.Close()
			args := json.RawMessage(`{"command":"true","description":"do nothing"}`)
			lat := make([]time.Duration, 0, b.N)
			i := 0
			for b.Loop() {
				session := fmt.Sprintf("cold-%d", i)
				i++
				t0 := time.Now()
				res := ts.Call(context.Background(), tools.Invocation{Tenant: "t1", Session: session, Tool: "bash", Args: args})
				lat = append(lat, time.Since(t0))
				if res.Text != "(no output)" {
					b.Fatalf("got %q", res.Text)
				}
				b.StopTimer()
				r.exec.Forget(session)
				if err := r.manager.Remove(context.Background(), "t1", session); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			executortest.ReportPercentiles(b, lat)
		})
	}
}

// BenchmarkWarmCall measures a call in a session whose sandbox runs.
func BenchmarkWarmCall(b *testing.B) {
	for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		b.Run(runtime, func(b *testing.B) {
			r := newRig(b, runtime, executor.DefaultLimits())
			ts, err := tools.New(r.exec, tools.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer ts.Close()
			args := json.RawMessage(`{"command":"true","description":"do nothing"}`)
			inv := tools.Invocation{Tenant: "t1", Session: "warm", Tool: "bash", Args: args}
			if res := ts.Call(context.Background(), inv); res.Text != "(no output)" {
				b.Fatalf("got %q", res.Text)
			}
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				res := ts.Call(context.Background(), inv)
				lat = append(lat, time.Since(t0))
				if res.Text != "(no output)" {
					b.Fatalf("got %q", res.Text)
				}
			}
			executortest.ReportPercentiles(b, lat)
		})
	}
}
