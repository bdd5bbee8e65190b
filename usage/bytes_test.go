package usage_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"testing"
	"time"

	"github.com/shellbox/shellbox/usage"
)

// workspaceSource is a fakeSource that also measures workspaces.
type workspaceSource struct {
	*fakeSource
	bytes    map[string]int64     // by session
	measured map[string]time.Time // by session; none: now
}

func (w *workspaceSource) Workspace(_ context.Context, sb usage.Sandbox) (int64, time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, ok := w.bytes[sb.Session]
	if !ok {
		return 0, time.Time{}, errors.New("no workspace")
	}
	return n, w.measured[sb.Session], nil
}

// TestWorkspaceLastAndPeak: a workspace measured at each reading keeps its
// last value and its peak across hours, flushed or pending; a session
// whose workspace cannot be measured has none; a tenant's sum adds the
// sessions' last values.
func TestWorkspaceLastAndPeak(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0.Add(50 * time.Minute)}
	m := usage.NewMeter(&usage.Memory{}, clk.now)
	src := &workspaceSource{fakeSource: &fakeSource{counters: map[string]usage.Counters{}}, bytes: map[string]int64{"s1": 10 << 20, "s2": 3 << 20}}
	src.list = []usage.Sandbox{{Tenant: "acme", Session: "s1", ID: "a"}, {Tenant: "acme", Session: "s2", ID: "b"}, {Tenant: "acme", Session: "s3", ID: "c"}}
	for _, id := range []string{"a", "b", "c"} {
		src.set(id, usage.Counters{})
	}
	s := usage.NewSampler(m, src, 10*time.Second, nil)
	s.Sample(ctx) // flushes: the first pass
	src.bytes["s1"] = 40 << 20
	clk.advance(20 * time.Minute) // the next hour
	s.Sample(ctx)
	src.bytes["s1"] = 25 << 20
	clk.advance(time.Minute)
	s.Sample(ctx)

	recs, err := m.Query(ctx, usage.Filter{From: t0, To: t0.Add(3 * time.Hour)})
	if err != nil || len(recs) != 3 {
		t.Fatalf("%v %+v", err, recs)
	}
	if r := recs[0]; r.WorkspaceBytes != 25<<20 || r.WorkspacePeakBytes != 40<<20 || !r.WorkspaceMeasured.Equal(clk.now()) {
		t.Errorf("s1: workspace %d, peak %d, measured %v; want %d, %d, %v", r.WorkspaceBytes, r.WorkspacePeakBytes, r.WorkspaceMeasured, 25<<20, 40<<20, clk.now())
	}
	if r := recs[1]; r.WorkspaceBytes != 3<<20 || r.WorkspacePeakBytes != 3<<20 {
		t.Errorf("s2: workspace %d, peak %d", r.WorkspaceBytes, r.WorkspacePeakBytes)
	}
	if r := recs[2]; r.WorkspaceBytes != 0 || !r.WorkspaceMeasured.IsZero() {
		t.Errorf("s3, not measurable: workspace %d at %v", r.WorkspaceBytes, r.WorkspaceMeasured)
	}
	var sum usage.Figures
	for _, r := range recs {
		sum.Sum(r.Figures)
	}
	if sum.WorkspaceBytes != 28<<20 || sum.WorkspacePeakBytes != 40<<20 || !sum.WorkspaceMeasured.Equal(clk.now()) {
		t.Errorf("tenant sum: workspace %d, peak %d, measured %v", sum.WorkspaceBytes, sum.WorkspacePeakBytes, sum.WorkspaceMeasured)
	}
}

// TestWorkspaceMeasuredEarlier: a source's own measurement time (the
// kubelet's, on Kubernetes) is kept as WorkspaceMeasured, and a
// measurement that fails afterwards (no figure yet, the summary not read)
// keeps the last value and its time: it never counts as 0.
func TestWorkspaceMeasuredEarlier(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0.Add(10 * time.Minute)}
	m := usage.NewMeter(&usage.Memory{}, clk.now)
	src := &workspaceSource{fakeSource: &fakeSource{counters: map[string]usage.Counters{}},
		bytes: map[string]int64{"s1": 64 << 20}, measured: map[string]time.Time{"s1": clk.now().Add(-90 * time.Second)}}
	src.list = []usage.Sandbox{{Tenant: "acme", Session: "s1", ID: "a"}}
	src.set("a", usage.Counters{})
	s := usage.NewSampler(m, src, 10*time.Second, nil)
	s.Sample(ctx)
	delete(src.bytes, "s1")
	clk.advance(10 * time.Second)
	s.Sample(ctx)

	recs, err := m.Query(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour)})
	if err != nil || len(recs) != 1 {
		t.Fatalf("%v %+v", err, recs)
	}
	if r := recs[0]; r.WorkspaceBytes != 64<<20 || r.WorkspacePeakBytes != 64<<20 || !r.WorkspaceMeasured.Equal(t0.Add(10*time.Minute-90*time.Second)) {
		t.Errorf("workspace %d, peak %d, measured %v; want %d at %v", r.WorkspaceBytes, r.WorkspacePeakBytes, r.WorkspaceMeasured, 64<<20, t0.Add(10*time.Minute-90*time.Second))
	}
}

// TestSpillAndEgressCounted: spill and egress counts add up per session,
// through the store, and in the tenant's totals; CSV carries them.
func TestSpillAndEgressCounted(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0}
	m := usage.NewMeter(&usage.Memory{}, clk.now)
	m.Spill("acme", "s1", 300_000)
	m.Spill("acme", "s1", 0) // no spill: nothing
	m.Egress("acme", "s1", 1, 0, 0)
	m.Egress("acme", "s1", 0, 517, 0)
	m.Egress("acme", "s1", 0, 0, 4096)
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	m.Egress("acme", "s1", 1, 100, 200)
	m.Spill("acme", "s1", 1)

	recs, err := m.Query(ctx, usage.Filter{From: t0, To: t0.Add(2 * time.Hour)})
	if err != nil || len(recs) != 1 {
		t.Fatalf("%v %+v", err, recs)
	}
	want := usage.Figures{SpillBytes: 300_001, EgressRequests: 2, EgressSentBytes: 617, EgressReceivedBytes: 4296}
	if got := recs[0].Figures; got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := m.Totals()["acme"]; got != want {
		t.Errorf("totals %+v, want %+v", got, want)
	}

	var buf bytes.Buffer
	if err := usage.WriteCSV(&buf, recs); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(rows) != 2 {
		t.Fatalf("%v %q", err, rows)
	}
	got := map[string]string{}
	for i, h := range rows[0] {
		got[h] = rows[1][i]
	}
	for k, v := range map[string]string{"spill_bytes": "300001", "egress_requests": "2", "egress_sent_bytes": "617", "egress_received_bytes": "4296", "workspace_bytes": "0", "workspace_peak_bytes": "0"} {
		if got[k] != v {
			t.Errorf("CSV %s = %q, want %q", k, got[k], v)
		}
	}
}
