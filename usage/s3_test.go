package usage_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/snapshot/snapshottest"
	"github.com/shellbox/shellbox/usage"
)

// TestS3Store runs on the S3 server of the environment (SeaweedFS in CI):
// two replicas write the same tenant's day at once, each many times; a
// third process reads every writer's objects and finds each bucket once,
// summed; a restarted Meter loads today's totals from them; a writer's
// Add to a day it no longer holds keeps what its object had.
func TestS3Store(t *testing.T) {
	opts, _ := snapshottest.S3Bucket(t)
	ctx := context.Background()
	open := func(writer string) *usage.S3 {
		t.Helper()
		s, err := usage.NewS3(ctx, usage.S3Options{Endpoint: opts.Endpoint, Insecure: true, AccessKey: opts.AccessKey,
			SecretKey: opts.SecretKey, Bucket: opts.Bucket, Prefix: "fleet/", Writer: writer})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := time.Now().UTC()
	hour := now.Truncate(time.Hour)
	old := hour.Add(-72 * time.Hour)
	a, b := open("replica-a"), open("replica-b")
	var wg sync.WaitGroup
	for i, s := range []*usage.S3{a, b} {
		wg.Go(func() {
			for range 10 {
				err := s.Add(ctx, []usage.Bucket{
					{Tenant: "acme", Session: "s1", Hour: hour, Figures: usage.Figures{CPUSeconds: 1, SandboxSeconds: 10, MemoryPeakBytes: int64(100 * (i + 1))}},
					{Tenant: "beta", Session: "s2", Hour: hour, Figures: usage.Figures{Calls: 1}},
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// An Add to a day three days back (not held) by a writer that wrote
	// there before another process's life: replica-a again, restarted.
	if err := a.Add(ctx, []usage.Bucket{{Tenant: "acme", Session: "s0", Hour: old, Figures: usage.Figures{CPUSeconds: 5}}}); err != nil {
		t.Fatal(err)
	}
	a2 := open("replica-a")
	if err := a2.Add(ctx, []usage.Bucket{{Tenant: "acme", Session: "s0", Hour: old, Figures: usage.Figures{CPUSeconds: 2}, Final: true}}); err != nil {
		t.Fatal(err)
	}

	reader := usage.NewMeter(open("reader"), nil)
	recs, err := reader.Query(ctx, usage.Filter{From: old, To: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("records = %+v, want acme/s0, acme/s1, beta/s2", recs)
	}
	if r := recs[0]; r.Session != "s0" || r.CPUSeconds != 7 || !r.Final {
		t.Errorf("acme/s0 = %+v, want 7 CPU-seconds (both of replica-a's lives), final", r)
	}
	if r := recs[1]; r.Session != "s1" || r.CPUSeconds != 20 || r.SandboxSeconds != 200 || r.MemoryPeakBytes != 200 {
		t.Errorf("acme/s1 = %+v, want 20 CPU-seconds, 200 sandbox-seconds, peak 200", r)
	}
	if r := recs[2]; r.Tenant != "beta" || r.Calls != 20 {
		t.Errorf("beta/s2 = %+v, want 20 calls", r)
	}
	pts, err := reader.Series(ctx, usage.Filter{From: hour, To: hour.Add(time.Hour), Tenant: "acme"})
	if err != nil || len(pts) != 1 || pts[0].CPUSeconds != 20 {
		t.Errorf("acme's series = %+v, %v", pts, err)
	}
	if err := reader.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reader.Today("acme").CPUSeconds; hour.Truncate(24*time.Hour).Equal(now.Truncate(24*time.Hour)) && got != 20 {
		t.Errorf("a new replica's today for acme = %v, want 20", got)
	}
}
