package executortest

import (
	"os/exec"
	"slices"
	"testing"
	"time"
)

// ReportPercentiles adds the p50 and p99 of per-call latencies to a
// benchmark's metrics (p50-ms, p99-ms), so runs of different executors
// compare side by side, and returns the p50. It sorts lat.
func ReportPercentiles(b *testing.B, lat []time.Duration) time.Duration {
	return ReportPercentilesAs(b, "", lat)
}

// ReportPercentilesAs is ReportPercentiles with the metric names prefixed
// (<prefix>p50-ms, <prefix>p99-ms), for a benchmark that measures more
// than one kind of call. It reports nothing and returns 0 when lat is
// empty.
func ReportPercentilesAs(b *testing.B, prefix string, lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	at := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(at(0.50)), prefix+"p50-ms")
	b.ReportMetric(ms(at(0.99)), prefix+"p99-ms")
	return at(0.50)
}

// HostFork times `bash -c true` on the host, the floor every executor's
// call is compared with side by side, reports its percentiles and
// returns its p50.
func HostFork(b *testing.B) time.Duration {
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	return ReportPercentiles(b, lat)
}
