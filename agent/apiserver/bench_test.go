package apiserver_test

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/output"
)

// BenchmarkRunTrue: the protocol's own cost. A foreground `bash -c true` run
// by a local executor directly, through the protocol (server and client in
// this process, over a unix socket), and by os/exec alone.
func BenchmarkRunTrue(b *testing.B) {
	a := newAgent(b, testLimits(), b.TempDir(), b.TempDir())
	spec := a.spec(b, executor.Request{Command: "true"})
	ctx := context.Background()
	b.Run("exec", func(b *testing.B) {
		for range b.N {
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("local", func(b *testing.B) {
		for range b.N {
			if _, err := a.exec.Run(ctx, spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protocol", func(b *testing.B) {
		for range b.N {
			if _, err := a.client.Run(ctx, spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRun100MB: the cost of live output on a call that prints 100 MB,
// side by side with the same call without it, run by the local executor
// directly (its pumps feed an output.Feed drained by a consumer, as the
// server does) and through the protocol (the agent's streamed answer). The
// two runs alternate within each iteration, so a load on the machine hits
// both alike; the medians are reported as plain-ms and live-ms.
func BenchmarkRun100MB(b *testing.B) {
	a := newAgent(b, testLimits(), b.TempDir(), b.TempDir())
	spec := a.spec(b, executor.Request{Command: "head -c 104857600 /dev/zero | tr '\\0' x"})
	ctx := context.Background()
	withLive := func(spec executor.Spec) (executor.Spec, func()) {
		feed := output.NewFeed(agentapi.StreamPending)
		done := make(chan struct{})
		go func() {
			defer close(done)
			feed.Pump(ctx, agentapi.StreamInterval, func([]executor.Chunk) error { return nil })
		}()
		spec.Live = feed.Write
		return spec, func() { feed.Close(); <-done }
	}
	for _, via := range []struct {
		name string
		run  func(context.Context, executor.Spec) (executor.Result, error)
	}{{"local", a.exec.Run}, {"protocol", a.client.Run}} {
		b.Run(via.name, func(b *testing.B) {
			var plain, live []time.Duration
			for i := range b.N {
				for _, streamed := range order(i) {
					s, stop := spec, func() {}
					if streamed {
						s, stop = withLive(spec)
					}
					start := time.Now()
					res, err := via.run(ctx, s)
					stop()
					d := time.Since(start)
					if err != nil || !res.Truncated {
						b.Fatalf("%+v, %v", res, err)
					}
					if streamed {
						live = append(live, d)
					} else {
						plain = append(plain, d)
					}
				}
			}
			b.ReportMetric(median(plain), "plain-ms")
			b.ReportMetric(median(live), "live-ms")
		})
	}
}

func median(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Microseconds()) / 1000
}

// order alternates which run goes first, so neither pays for the other's
// leftovers (its spill file's writeback) more often.
func order(i int) []bool {
	if i%2 == 0 {
		return []bool{false, true}
	}
	return []bool{true, false}
}
