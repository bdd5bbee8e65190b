package docker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// timedRuntime measures Create: container create + start until the engine
// reports it running.
type timedRuntime struct {
	sandbox.Runtime
	creates []time.Duration
}

func (r *timedRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	start := time.Now()
	sb, err := r.Runtime.Create(ctx, spec)
	r.creates = append(r.creates, time.Since(start))
	return sb, err
}

// BenchmarkCreate measures a session's first use: create→running
// (p50-create-ms: Runtime.Create, i.e. create + start + inspect) and
// Ensure→agent ready (p50-ensure-ms: host dir, create, and the stand-in
// agent's socket accepting). Removal is not timed. Run with -benchtime=10x.
func BenchmarkCreate(b *testing.B) {
	for _, rt := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		b.Run(rt, func(b *testing.B) {
			e := newEnv(b, rt)
			timed := &timedRuntime{Runtime: e.rt}
			cfg := e.cfg
			cfg.Runtime = timed
			m, err := sandbox.NewManager(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var ensures []time.Duration
			b.ResetTimer()
			for i := range b.N {
				session := fmt.Sprintf("bench-%d", i)
				start := time.Now()
				if _, err := m.Ensure(ctx, e.spec(session)); err != nil {
					b.Fatal(err)
				}
				ensures = append(ensures, time.Since(start))
				b.StopTimer()
				if err := m.Remove(ctx, tenant, session); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(p50ms(timed.creates), "p50-create-ms")
			b.ReportMetric(p50ms(ensures), "p50-ensure-ms")
		})
	}
}

func p50ms(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}
