package executortest

import (
	"slices"
	"testing"
	"time"
)

// ReportPercentiles adds the p50 and p99 of per-call latencies to a
// benchmark's metrics (p50-ms, p99-ms), so runs of different executors
// compare side by side. It sorts lat.
func ReportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}
