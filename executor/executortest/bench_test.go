package executortest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/tools"
)

// BenchmarkForegroundTrue compares, in one run, a foreground `true` through
// the whole model-facing path (tools → local executor: validation, resolve,
// workdir confinement, cgroup, supervision, rendering) with starting
// `bash -c true` directly. Run with
//
//	go test ./executor/executortest/ -run XXX -bench ForegroundTrue -count 10 | benchstat -
//
// p50 and p99 of per-call latency are reported as extra metrics.
func BenchmarkForegroundTrue(b *testing.B) {
	b.Run("exec.Command", func(b *testing.B) { executortest.HostFork(b) })
	for _, mode := range []local.CgroupMode{local.CgroupAuto, local.CgroupV1, local.CgroupOff} {
		b.Run("tools+local/cgroup="+string(mode), func(b *testing.B) {
			e, err := local.New(local.Config{Root: b.TempDir(), SpillDir: b.TempDir(), Cgroup: mode})
			if err != nil {
				b.Skipf("cgroup mode %s: %v", mode, err)
			}
			b.Cleanup(func() { e.Close(context.Background()) })
			ts, err := tools.New(e, tools.Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(ts.Close)
			args := json.RawMessage(`{"command":"true","description":"do nothing"}`)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				r := ts.Call(ctx, tools.Invocation{Session: "bench", Tool: "bash", Args: args})
				lat = append(lat, time.Since(t0))
				if r.IsError || r.Text != "(no output)" {
					b.Fatalf("got %q", r.Text)
				}
			}
			executortest.ReportPercentiles(b, lat)
		})
	}
}
