package sandboxed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
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
				res := ts.Call(context.Background(), tools.Invocation{Tenant: tenant, Session: session, Tool: "bash", Args: args})
				lat = append(lat, time.Since(t0))
				if res.Text != "(no output)" {
					b.Fatalf("got %q", res.Text)
				}
				b.StopTimer()
				r.exec.Forget(session)
				if err := r.manager.Remove(context.Background(), tenant, session); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			executortest.ReportPercentiles(b, lat)
		})
	}
}

// BenchmarkWarmCall compares, side by side in one run, a foreground `true`
// in a session whose sandbox runs: through the tools into the sandboxed
// executor and its agent ("tools-<runtime>"), through Docker's exec API into
// the same container ("execapi-<runtime>"), and `bash -c true` on the host.
// The parent logs the ratios.
//
//	go test ./executor/sandboxed/ -run '^$' -bench WarmCall -benchtime 200x
//
// On fuse-overlayfs storage every process start in a container pays FUSE
// round trips for its path lookups and library opens (~4 ms here); compare
// on an overlay2 engine with .ci/bench-engine.sh (see the README).
func BenchmarkWarmCall(b *testing.B) {
	p50 := map[string]time.Duration{}
	b.Run("host", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		p50["host"] = executortest.ReportPercentiles(b, lat)
	})
	for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		r := newRig(b, runtime, executor.DefaultLimits())
		ts, err := tools.New(r.exec, tools.Config{})
		if err != nil {
			b.Fatal(err)
		}
		args := json.RawMessage(`{"command":"true","description":"do nothing"}`)
		session := "warm-" + runtime
		inv := tools.Invocation{Tenant: tenant, Session: session, Tool: "bash", Args: args}
		if res := ts.Call(context.Background(), inv); res.Text != "(no output)" {
			b.Fatalf("got %q", res.Text)
		}
		b.Run("tools-"+runtime, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				res := ts.Call(context.Background(), inv)
				lat = append(lat, time.Since(t0))
				if res.Text != "(no output)" {
					b.Fatalf("got %q", res.Text)
				}
			}
			p50["tools-"+runtime] = executortest.ReportPercentiles(b, lat)
		})
		var id string
		for _, sb := range r.manager.Sandboxes() {
			if sb.Session == session {
				id = sb.ID
			}
		}
		cli := dockertest.Engine(b)
		b.Run("execapi-"+runtime, func(b *testing.B) {
			ctx := context.Background()
			if err := dockertest.ExecTrue(ctx, cli, id, "1000:1000", "/workspace"); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				if err := dockertest.ExecTrue(ctx, cli, id, "1000:1000", "/workspace"); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			p50["execapi-"+runtime] = executortest.ReportPercentiles(b, lat)
		})
		ts.Close()
	}
	for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		tp, ep := p50["tools-"+runtime], p50["execapi-"+runtime]
		if tp > 0 && ep > 0 {
			b.Logf("%s: p50 through the tools %v, exec API %v (%.1fx), host bash -c true %v",
				runtime, tp.Round(10*time.Microsecond), ep.Round(10*time.Microsecond), float64(ep)/float64(tp),
				p50["host"].Round(10*time.Microsecond))
		}
	}
}
