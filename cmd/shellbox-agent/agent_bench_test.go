package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// BenchmarkForeground compares, in one run, a foreground `bash -c true`
// through the agent's protocol into a sandbox, through Docker's exec API
// into the same sandbox (create, attach, inspect for the exit code), and on
// the host. Each reports the median (p50-ms) and tail (p90-ms, p99-ms) of its
// per-call latencies besides ns/op; the parent logs the ratios, and the
// floor: `bash -c true` forked by bash inside the sandbox, which no agent
// can beat (on fuse-overlayfs storage every exec's path lookups go through
// FUSE).
//
//	go test ./cmd/shellbox-agent/ -run '^$' -bench Foreground -benchtime 3s
func BenchmarkForeground(b *testing.B) {
	cli := engine(b)
	ctx := context.Background()
	p50 := map[string]time.Duration{}
	floor := map[string]time.Duration{}
	agentTrue := spec(executor.Request{Command: "true"})

	b.Run("host", func(b *testing.B) {
		p50["host"] = measure(b, func() error { return exec.Command("bash", "-c", "true").Run() })
	})
	for _, rt := range []string{"runc", "runsc"} {
		if rt == "runsc" {
			args, ok := runtimeArgs(b, cli, rt)
			if !ok || !hasArg(args, "host-uds=create", "host-uds=all") {
				b.Logf("runsc not registered with --host-uds=create (runtimeArgs %q): no runsc numbers", args)
				continue
			}
		}
		sb := newSandbox(b, cli, rt, 512<<20, 1024)
		b.Run("agent-"+rt, func(b *testing.B) {
			sb.t = b
			p50["agent-"+rt] = measure(b, func() error {
				res, err := sb.agent.Run(ctx, agentTrue)
				if err == nil && (res.ExitCode != 0 || res.Signal != "") {
					err = fmt.Errorf("result %+v", res)
				}
				return err
			})
		})
		b.Run("execapi-"+rt, func(b *testing.B) {
			p50["execapi-"+rt] = measure(b, func() error { return dockertest.ExecTrue(ctx, cli, sb.id, "1000:1000", workspace) })
		})
		// The floor: what `bash -c true` costs inside the sandbox, forked by
		// bash itself (the container's storage and runtime, no agent).
		res, err := sb.agent.Run(ctx, spec(executor.Request{Command: "TIMEFORMAT=%3R; time (for i in $(seq 100); do bash -c true; done)"}))
		if secs, perr := strconv.ParseFloat(strings.TrimSpace(res.Stderr), 64); err == nil && perr == nil {
			floor[rt] = time.Duration(secs * float64(time.Second) / 100)
		}
	}
	for _, rt := range []string{"runc", "runsc"} {
		a, e := p50["agent-"+rt], p50["execapi-"+rt]
		if a > 0 && e > 0 {
			b.Logf("%s: p50 agent %v, exec API %v: the agent is %.1fx faster; bash -c true costs %v inside the sandbox (forked by bash), %v on the host",
				rt, a.Round(10*time.Microsecond), e.Round(10*time.Microsecond), float64(e)/float64(a),
				floor[rt].Round(10*time.Microsecond), p50["host"].Round(10*time.Microsecond))
		}
	}
}

// measure runs f b.N times, timing each call, and reports the percentiles;
// it returns the median.
func measure(b *testing.B, f func() error) time.Duration {
	// One call first: connections, page cache, the sandbox's first fork.
	if err := f(); err != nil {
		b.Fatal(err)
	}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(samples)
	at := func(q float64) time.Duration { return samples[min(len(samples)-1, int(q*float64(len(samples))))] }
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(at(0.5)), "p50-ms")
	b.ReportMetric(ms(at(0.9)), "p90-ms")
	b.ReportMetric(ms(at(0.99)), "p99-ms")
	return at(0.5)
}
