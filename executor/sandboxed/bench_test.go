package sandboxed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/executor/output"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/tools"
)

// BenchmarkColdSession measures a new session's first call end to end: the
// Manager creates the hardened container, waits for its agent, the executor
// dials it and runs `true` through the tools. Removal is outside the timing.
//
//	go test ./executor/sandboxed/ -run XXX -bench ColdSession -benchtime 20x
func BenchmarkColdSession(b *testing.B) {
	for _, e := range enginetest.All {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			benchCold(b, e, runtime)
		}
	}
}

func benchCold(b *testing.B, e enginetest.Engine, runtime string) {
	b.Run(e.Name+"-"+runtime, func(b *testing.B) {
		r := sandboxedtest.New(b, e, runtime, executor.DefaultLimits())
		ts, err := tools.New(r.Exec, tools.Config{})
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
			r.Exec.Forget(session)
			if err := r.Manager.Remove(context.Background(), tenant, session); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		executortest.ReportPercentiles(b, lat)
	})
}

// BenchmarkWarmCall compares, side by side in one run, a foreground `true`
// in a session whose sandbox runs: through the tools into the sandboxed
// executor and its agent on each engine ("tools-<engine>-<runtime>"),
// through Docker's exec API into the same container ("execapi-<runtime>"),
// and `bash -c true` on the host.
// The parent logs the ratios.
//
//	go test ./executor/sandboxed/ -run '^$' -bench WarmCall -benchtime 200x
//
// On fuse-overlayfs storage every process start in a container pays FUSE
// round trips for its path lookups and library opens (~4 ms here); compare
// on an overlay2 engine with .ci/bench-engine.sh (see the README).
func BenchmarkWarmCall(b *testing.B) {
	p50 := map[string]time.Duration{}
	b.Run("host", func(b *testing.B) { p50["host"] = executortest.HostFork(b) })
	for _, e := range enginetest.All {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			benchWarm(b, e, runtime, p50)
		}
	}
	logWarm(b, p50)
}

// benchWarm measures a warm call on engine e and runtime into p50; on
// Docker also the exec API into the same container.
func benchWarm(b *testing.B, e enginetest.Engine, runtime string, p50 map[string]time.Duration) {
	r := sandboxedtest.New(b, e, runtime, executor.DefaultLimits())
	ts, err := tools.New(r.Exec, tools.Config{})
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"command":"true","description":"do nothing"}`)
	session := "warm-" + runtime
	inv := tools.Invocation{Tenant: tenant, Session: session, Tool: "bash", Args: args}
	if res := ts.Call(context.Background(), inv); res.Text != "(no output)" {
		b.Fatalf("got %q", res.Text)
	}
	name := e.Name + "-" + runtime
	b.Run("tools-"+name, func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			res := ts.Call(context.Background(), inv)
			lat = append(lat, time.Since(t0))
			if res.Text != "(no output)" {
				b.Fatalf("got %q", res.Text)
			}
		}
		p50["tools-"+name] = executortest.ReportPercentiles(b, lat)
	})
	defer ts.Close()
	if e.Name != "docker" {
		return
	}
	var id string
	for _, sb := range r.Manager.Sandboxes() {
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
}

func logWarm(b *testing.B, p50 map[string]time.Duration) {
	for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		dp, cp, ep := p50["tools-docker-"+runtime], p50["tools-containerd-"+runtime], p50["execapi-"+runtime]
		if dp > 0 && ep > 0 {
			b.Logf("%s: p50 through the tools: docker %v, containerd %v; Docker's exec API %v (%.1fx docker's); host bash -c true %v",
				runtime, dp.Round(10*time.Microsecond), cp.Round(10*time.Microsecond), ep.Round(10*time.Microsecond),
				float64(ep)/float64(dp), p50["host"].Round(10*time.Microsecond))
		}
	}
}

// BenchmarkLive100MB: a foreground call printing 100 MB in a warm sandbox,
// through the tools, without and with live output (an output.Feed of the
// server's bound drained every 200 ms, as the server streams it), the two
// alternating within each iteration; the medians are reported as plain-ms
// and live-ms.
//
//	go test ./executor/sandboxed/ -run '^$' -bench Live100MB -benchtime 5x
func BenchmarkLive100MB(b *testing.B) {
	for _, e := range enginetest.All {
		b.Run(e.Name, func(b *testing.B) {
			r := sandboxedtest.New(b, e, sandbox.RuntimeRunc, executor.DefaultLimits())
			ts, err := tools.New(r.Exec, tools.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer ts.Close()
			session := "live-bench"
			defer func() {
				r.Exec.Forget(session)
				r.Manager.Remove(context.Background(), tenant, session)
			}()
			args := json.RawMessage(`{"command":"head -c 104857600 /dev/zero | tr '\\0' x","description":"print 100 MB"}`)
			call := func(live executor.Live) time.Duration {
				t0 := time.Now()
				res := ts.Call(context.Background(), tools.Invocation{Tenant: tenant, Session: session, Tool: "bash", Args: args, Live: live})
				d := time.Since(t0)
				if fg, ok := res.Value.(*tools.Foreground); !ok || !fg.Truncated {
					b.Fatalf("got %q", res.Text)
				}
				return d
			}
			call(nil) // creates the sandbox
			var plain, live []time.Duration
			for i := 0; b.Loop(); i++ {
				feed := output.NewFeed(16 << 10)
				done := make(chan struct{})
				go func() {
					defer close(done)
					feed.Pump(context.Background(), 200*time.Millisecond, func([]executor.Chunk) error { return nil })
				}()
				if i%2 == 0 {
					plain = append(plain, call(nil))
					live = append(live, call(feed.Write))
				} else {
					live = append(live, call(feed.Write))
					plain = append(plain, call(nil))
				}
				feed.Close()
				<-done
			}
			slices.Sort(plain)
			slices.Sort(live)
			b.ReportMetric(float64(plain[len(plain)/2].Microseconds())/1000, "plain-ms")
			b.ReportMetric(float64(live[len(live)/2].Microseconds())/1000, "live-ms")
		})
	}
}
