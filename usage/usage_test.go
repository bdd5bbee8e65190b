package usage_test

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/usage"
)

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeSource is a Source whose sandboxes and counters the test sets.
type fakeSource struct {
	mu       sync.Mutex
	list     []usage.Sandbox
	counters map[string]usage.Counters
	reads    int
}

func (f *fakeSource) Sandboxes(context.Context) ([]usage.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]usage.Sandbox(nil), f.list...), nil
}

func (f *fakeSource) Read(_ context.Context, id string) (usage.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	c, ok := f.counters[id]
	if !ok {
		return c, errors.New("gone")
	}
	return c, nil
}

func (f *fakeSource) set(id string, c usage.Counters) {
	f.mu.Lock()
	f.counters[id] = c
	f.mu.Unlock()
}

const gib = 1 << 30

var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestSamplerSumsGrowthPerSession(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0}
	store := &usage.Memory{}
	m := usage.NewMeter(store, clk.now)
	src := &fakeSource{counters: map[string]usage.Counters{}}
	s := usage.NewSampler(m, src, 10*time.Second, nil)

	// A sandbox created 4 s after the sampler started, read 6 s later:
	// it counts from its creation.
	src.list = []usage.Sandbox{
		{Tenant: "acme", Session: "s1", ID: "c1", Created: t0.Add(4 * time.Second)},
		{Tenant: "acme", Session: "old", ID: "c0", Created: t0.Add(-time.Hour)}, // adopted
	}
	src.set("c1", usage.Counters{CPU: 3 * time.Second, MemoryBytes: gib, MemoryPeakBytes: gib})
	src.set("c0", usage.Counters{CPU: 100 * time.Second, MemoryBytes: gib / 2, MemoryPeakBytes: gib})
	clk.advance(10 * time.Second)
	s.Sample(ctx)
	// 10 s later: c1 used 2 more CPU-seconds at 2 GiB; c0 1 more.
	clk.advance(10 * time.Second)
	src.set("c1", usage.Counters{CPU: 5 * time.Second, MemoryBytes: 2 * gib, MemoryPeakBytes: 3 * gib})
	src.set("c0", usage.Counters{CPU: 101 * time.Second, MemoryBytes: gib / 2, MemoryPeakBytes: gib})
	m.Call("acme", "s1", 1500*time.Millisecond)
	m.Call("acme", "s1", 500*time.Millisecond)
	s.Sample(ctx)
	// c1 goes away: its session's record is final.
	src.list = src.list[1:]
	clk.advance(10 * time.Second)
	s.Sample(ctx)

	recs, err := m.Query(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("records = %+v, want 2", recs)
	}
	old, s1 := recs[0], recs[1]
	if old.Session != "old" || s1.Session != "s1" {
		t.Fatalf("records = %+v", recs)
	}
	near(t, "s1 CPU-seconds", s1.CPUSeconds, 5)
	near(t, "s1 sandbox-seconds", s1.SandboxSeconds, 16)
	near(t, "s1 GiB-seconds", s1.MemoryGiBSeconds, 6*1+10*2)
	if s1.MemoryPeakBytes != 3*gib || s1.Calls != 2 || !s1.Final {
		t.Errorf("s1 = %+v, want peak 3 GiB, 2 calls, final", s1)
	}
	near(t, "s1 call seconds", s1.CallSeconds, 2)
	// The adopted sandbox counts from the first reading on only.
	near(t, "old CPU-seconds", old.CPUSeconds, 1)
	near(t, "old sandbox-seconds", old.SandboxSeconds, 20)
	if old.Final {
		t.Errorf("old is final: %+v", old)
	}
	if tot := m.Totals()["acme"]; math.Abs(tot.CPUSeconds-6) > 1e-9 || tot.Calls != 2 {
		t.Errorf("totals = %+v, want 6 CPU-seconds, 2 calls", tot)
	}
	// One read per sandbox per sample: 2 + 2 + 1.
	if src.reads != 5 {
		t.Errorf("reads = %d, want 5", src.reads)
	}
}

func TestCounterResetCountsFromZero(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0}
	m := usage.NewMeter(&usage.Memory{}, clk.now)
	src := &fakeSource{counters: map[string]usage.Counters{}, list: []usage.Sandbox{{Tenant: "a", Session: "s", ID: "c", Created: t0}}}
	s := usage.NewSampler(m, src, 0, nil)
	src.set("c", usage.Counters{CPU: 10 * time.Second})
	s.Sample(ctx)
	src.set("c", usage.Counters{CPU: 1 * time.Second})
	s.Sample(ctx)
	if got := m.Today("a").CPUSeconds; got != 11 {
		t.Errorf("CPU-seconds = %v, want 11", got)
	}
}

func TestCheckLimits(t *testing.T) {
	clk := &clock{t: t0}
	m := usage.NewMeter(&usage.Memory{}, clk.now)
	src := &fakeSource{counters: map[string]usage.Counters{}, list: []usage.Sandbox{{Tenant: "acme", Session: "s", ID: "c", Created: t0}}}
	s := usage.NewSampler(m, src, 0, nil)
	lim := usage.Limits{CPUSecondsPerDay: 2, SandboxHoursPerDay: 0.5}
	src.set("c", usage.Counters{CPU: 1900 * time.Millisecond})
	clk.advance(time.Second)
	s.Sample(context.Background())
	if err := m.Check("acme", lim); err != nil {
		t.Fatalf("under the limits: %v", err)
	}
	src.set("c", usage.Counters{CPU: 2 * time.Second})
	s.Sample(context.Background())
	err := m.Check("acme", lim)
	want := "tenant acme used its 2 CPU-seconds (limits.cpuSecondsPerDay) for today (resets at 2026-12-07 00:00 UTC)"
	if err == nil || err.Error() != want {
		t.Fatalf("Check = %v, want %q", err, want)
	}
	var le *usage.LimitError
	if !errors.As(err, &le) {
		t.Errorf("%T is not a *LimitError", err)
	}
	if err := m.Check("other", lim); err != nil {
		t.Errorf("another tenant: %v", err)
	}
	// Sandbox hours: 30 minutes of a running sandbox.
	clk.advance(30 * time.Minute)
	s.Sample(context.Background())
	err = m.Check("acme", usage.Limits{SandboxHoursPerDay: 0.5})
	want = "tenant acme used its 0.5 sandbox-hours (limits.sandboxHoursPerDay) for today (resets at 2026-12-07 00:00 UTC)"
	if err == nil || err.Error() != want {
		t.Fatalf("Check = %v, want %q", err, want)
	}
	// A new UTC day starts from nothing.
	clk.advance(14 * time.Hour)
	if err := m.Check("acme", lim); err != nil {
		t.Errorf("the next day: %v", err)
	}
}

func TestDirStore(t *testing.T) {
	ctx := context.Background()
	d := &usage.Dir{Path: t.TempDir()}
	b := func(tenant, session string, hour time.Time, cpu float64) usage.Bucket {
		return usage.Bucket{Tenant: tenant, Session: session, Hour: hour, Figures: usage.Figures{CPUSeconds: cpu, Calls: 1}}
	}
	// Two processes appending at once, across two days.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for i := range 50 {
				if err := d.Add(ctx, []usage.Bucket{b("acme", "s1", t0, 1), b("acme", "s1", t0.Add(20*time.Hour), 1), b("beta", "s2", t0, float64(i))}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	m := usage.NewMeter(d, func() time.Time { return t0 })
	recs, err := m.Query(ctx, usage.Filter{From: t0.Add(-time.Hour), To: t0.Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Tenant != "acme" || recs[0].CPUSeconds != 200 || recs[0].Calls != 200 || recs[1].CPUSeconds != 2*1225 {
		t.Fatalf("records = %+v", recs)
	}
	if !recs[0].From.Equal(t0) || !recs[0].To.Equal(t0.Add(21*time.Hour)) {
		t.Errorf("acme from %v to %v", recs[0].From, recs[0].To)
	}
	// A range, a tenant, a session.
	recs, _ = m.Query(ctx, usage.Filter{From: t0.Add(time.Hour), To: t0.Add(48 * time.Hour), Tenant: "acme", Session: "s1"})
	if len(recs) != 1 || recs[0].CPUSeconds != 100 {
		t.Errorf("acme/s1 on the second day = %+v", recs)
	}
	recs, _ = m.Query(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour), Tenant: "beta"})
	if len(recs) != 1 || recs[0].Tenant != "beta" {
		t.Errorf("beta = %+v", recs)
	}
	// A restarted process loads today's use for its limits.
	m2 := usage.NewMeter(d, func() time.Time { return t0.Add(time.Minute) })
	if err := m2.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got := m2.Today("acme").CPUSeconds; got != 100 {
		t.Errorf("loaded today = %v, want 100", got)
	}
	if err := d.Add(ctx, []usage.Bucket{b("../x", "s", t0, 1)}); err == nil {
		t.Error("a tenant named ../x was written")
	}
}

// TestRunWritesWhatItMeasuredWhenStopped: Run samples at once, and when
// its context ends it writes what is pending under a context of its own.
func TestRunWritesWhatItMeasuredWhenStopped(t *testing.T) {
	store := &usage.Memory{}
	m := usage.NewMeter(store, nil)
	src := &fakeSource{counters: map[string]usage.Counters{}}
	s := usage.NewSampler(m, src, time.Hour, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	m.Call("acme", "s1", time.Second) // pending until the final flush
	cancel()
	<-done
	var calls int64
	var bs []usage.Bucket
	err := store.Query(context.Background(), usage.Filter{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)}, func(b usage.Bucket) error {
		calls += b.Calls
		bs = append(bs, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("stored calls = %d (%+v), want the call made before Run stopped", calls, bs)
	}
}

// countingStore counts appends.
type countingStore struct {
	usage.Memory
	adds int
}

func (c *countingStore) Add(ctx context.Context, bs []usage.Bucket) error {
	c.adds++
	return c.Memory.Add(ctx, bs)
}

// TestFlushOncePerMinute: sampling every 10 s appends once a minute, and
// queries see what is not appended yet.
func TestFlushOncePerMinute(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0}
	store := &countingStore{}
	m := usage.NewMeter(store, clk.now)
	src := &fakeSource{counters: map[string]usage.Counters{}, list: []usage.Sandbox{{Tenant: "a", Session: "s", ID: "c", Created: t0}}}
	s := usage.NewSampler(m, src, 10*time.Second, nil)
	for i := range 7 { // t0 .. t0+60s
		src.set("c", usage.Counters{CPU: time.Duration(i) * time.Second})
		s.Sample(ctx)
		clk.advance(10 * time.Second)
	}
	if store.adds != 2 {
		t.Errorf("appends = %d over a minute of 10 s samples, want 2 (at the first and after a minute)", store.adds)
	}
	src.set("c", usage.Counters{CPU: 10 * time.Second})
	s.Sample(ctx) // not appended yet
	recs, err := m.Query(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour)})
	if err != nil || len(recs) != 1 || recs[0].CPUSeconds != 10 {
		t.Errorf("query = %+v, %v; want the 10 CPU-seconds, appended or not", recs, err)
	}
}

// TestSamplerReadErrorKeepsTheReading: a read that fails once neither ends
// the sandbox's record nor counts its history again at the next reading.
func TestSamplerReadErrorKeepsTheReading(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0}
	m := usage.NewMeter(&usage.Memory{}, clk.now)
	src := &fakeSource{counters: map[string]usage.Counters{}, list: []usage.Sandbox{{Tenant: "a", Session: "s", ID: "c", Created: t0.Add(time.Second)}}}
	s := usage.NewSampler(m, src, 0, nil)
	clk.advance(10 * time.Second)
	src.set("c", usage.Counters{CPU: 100 * time.Second})
	s.Sample(ctx)
	clk.advance(10 * time.Second)
	src.mu.Lock()
	delete(src.counters, "c") // this read fails
	src.mu.Unlock()
	s.Sample(ctx)
	clk.advance(10 * time.Second)
	src.set("c", usage.Counters{CPU: 101 * time.Second})
	s.Sample(ctx)
	recs, err := m.Query(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour)})
	if err != nil || len(recs) != 1 {
		t.Fatalf("records = %+v, %v", recs, err)
	}
	near(t, "CPU-seconds", recs[0].CPUSeconds, 101)
	near(t, "sandbox-seconds", recs[0].SandboxSeconds, 29)
	if recs[0].Final {
		t.Errorf("final after one failed read: %+v", recs[0])
	}
}

// TestQueryBoundsSessions: a query summing more sessions than MaxRecords
// is refused (ErrInvalid, saying how to narrow it) instead of holding
// them all; under the bound each session is one record, however many
// buckets it has.
func TestQueryBoundsSessions(t *testing.T) {
	ctx := context.Background()
	store := &usage.Memory{}
	var bs []usage.Bucket
	for i := range usage.MaxRecords + 1 {
		bs = append(bs, usage.Bucket{Tenant: "acme", Session: fmt.Sprintf("s%d", i), Hour: t0, Figures: usage.Figures{Calls: 1}})
	}
	for range 50 { // many buckets of one session
		bs = append(bs, usage.Bucket{Tenant: "acme", Session: "s0", Hour: t0, Figures: usage.Figures{Calls: 1}})
	}
	if err := store.Add(ctx, bs); err != nil {
		t.Fatal(err)
	}
	m := usage.NewMeter(store, func() time.Time { return t0 })
	if _, err := m.Query(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour)}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "narrow") {
		t.Errorf("a query of %d sessions: %v, want it refused", usage.MaxRecords+1, err)
	}
	recs, err := m.Query(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour), Session: "s0"})
	if err != nil || len(recs) != 1 || recs[0].Calls != 51 {
		t.Errorf("one session: %+v %v, want one record of 51 calls", recs, err)
	}
}

// TestSeriesPerTenantHour: a series sums a tenant's sessions per hour, the
// stored buckets and the pending ones, oldest first, and is refused past
// MaxPoints.
func TestSeriesPerTenantHour(t *testing.T) {
	ctx := context.Background()
	store := &usage.Memory{}
	err := store.Add(ctx, []usage.Bucket{
		{Tenant: "acme", Session: "s1", Hour: t0, Figures: usage.Figures{CPUSeconds: 1, SandboxSeconds: 60, MemoryPeakBytes: 100}},
		{Tenant: "acme", Session: "s2", Hour: t0, Figures: usage.Figures{CPUSeconds: 2, SandboxSeconds: 30, MemoryPeakBytes: 300}},
		{Tenant: "acme", Session: "s1", Hour: t0.Add(time.Hour), Figures: usage.Figures{CPUSeconds: 4}},
		{Tenant: "beta", Session: "s1", Hour: t0, Figures: usage.Figures{CPUSeconds: 8}},
		{Tenant: "beta", Session: "s1", Hour: t0.Add(-2 * time.Hour), Figures: usage.Figures{CPUSeconds: 16}},
	})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: t0.Add(90 * time.Minute)}
	m := usage.NewMeter(store, clk.now)
	m.Call("acme", "s3", 2*time.Second) // pending, in the second hour
	pts, err := m.Series(ctx, usage.Filter{From: t0.Add(-time.Hour), To: t0.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	type p struct {
		tenant string
		hour   time.Time
		cpu    float64
		calls  int64
	}
	want := []p{{"acme", t0, 3, 0}, {"beta", t0, 8, 0}, {"acme", t0.Add(time.Hour), 4, 1}}
	if len(pts) != len(want) {
		t.Fatalf("series = %+v", pts)
	}
	for i, w := range want {
		g := pts[i]
		if g.Tenant != w.tenant || !g.Hour.Equal(w.hour) || g.CPUSeconds != w.cpu || g.Calls != w.calls {
			t.Errorf("point %d = %+v, want %+v", i, g, w)
		}
	}
	if pts[0].SandboxSeconds != 90 || pts[0].MemoryPeakBytes != 300 {
		t.Errorf("acme's first hour = %+v, want 90 sandbox-seconds, the larger peak", pts[0])
	}
	pts, _ = m.Series(ctx, usage.Filter{From: t0.Add(-3 * time.Hour), To: t0.Add(2 * time.Hour), Tenant: "beta"})
	if len(pts) != 2 || pts[0].CPUSeconds != 16 || pts[1].CPUSeconds != 8 {
		t.Errorf("beta's series = %+v", pts)
	}

	var many []usage.Bucket
	for i := range usage.MaxPoints + 1 {
		many = append(many, usage.Bucket{Tenant: fmt.Sprintf("t%d", i), Session: "s", Hour: t0, Figures: usage.Figures{Calls: 1}})
	}
	big := &usage.Memory{}
	if err := big.Add(ctx, many); err != nil {
		t.Fatal(err)
	}
	if _, err := usage.NewMeter(big, clk.now).Series(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour)}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a series of %d points: %v, want it refused", usage.MaxPoints+1, err)
	}
}

// TestSandboxOfTheStartSecondIsNew: Docker lists Created to the second,
// so a sandbox made 0.3 s after the Sampler started is listed as made
// 0.7 s before it. It is new, and counts from its creation: the CPU it
// used before the first reading is not lost (a console test lost 0.12 of
// 2 CPU-seconds to it).
func TestSandboxOfTheStartSecondIsNew(t *testing.T) {
	start := t0.Add(700 * time.Millisecond)
	clk := &clock{t: start}
	m := usage.NewMeter(&usage.Memory{}, clk.now)
	src := &fakeSource{counters: map[string]usage.Counters{}}
	s := usage.NewSampler(m, src, time.Second, nil)
	src.list = []usage.Sandbox{
		{Tenant: "acme", Session: "new", ID: "c1", Created: t0},
		{Tenant: "acme", Session: "old", ID: "c0", Created: t0.Add(-time.Second)},
	}
	src.set("c1", usage.Counters{CPU: 2 * time.Second})
	src.set("c0", usage.Counters{CPU: 50 * time.Second})
	clk.advance(time.Second)
	s.Sample(context.Background())
	recs, err := m.Query(context.Background(), usage.Filter{From: t0, To: t0.Add(time.Hour)})
	if err != nil || len(recs) != 2 {
		t.Fatalf("records = %+v, %v", recs, err)
	}
	near(t, "the new sandbox's CPU-seconds", recs[0].CPUSeconds, 2)
	near(t, "the adopted sandbox's CPU-seconds", recs[1].CPUSeconds, 0)
}

// TestRefreshReadsTheFleetsDay: a replica that does not sample refreshes
// today's totals from the store the leader writes, replacing (not adding
// to) what it held, its own pending calls included once.
func TestRefreshReadsTheFleetsDay(t *testing.T) {
	ctx := context.Background()
	store := &usage.Memory{}
	clk := &clock{t: t0}
	leader, replica := usage.NewMeter(store, clk.now), usage.NewMeter(store, clk.now)
	src := &fakeSource{counters: map[string]usage.Counters{"c": {CPU: 3 * time.Second}}}
	src.list = []usage.Sandbox{{Tenant: "acme", Session: "s", ID: "c", Created: t0}}
	usage.NewSampler(leader, src, time.Second, nil).Sample(ctx) // flushes: the first sample
	replica.Call("acme", "s", time.Second)
	for range 2 {
		if err := replica.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := replica.Today("acme"); got.CPUSeconds != 3 || got.Calls != 1 {
		t.Errorf("the replica's today = %+v, want the leader's 3 CPU-seconds and its own call, once", got)
	}
	if err := replica.Check("acme", usage.Limits{CPUSecondsPerDay: 2}); err == nil {
		t.Error("the replica does not hold acme to its limit")
	}
	// Its call reaches the store with a flush; a refresh after it counts
	// it once still.
	if err := replica.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := replica.Refresh(ctx); err != nil || replica.Today("acme").Calls != 1 {
		t.Errorf("after the flush: %+v, %v", replica.Today("acme"), err)
	}
}

// suspendingSource is a fakeSource that lists suspended sessions too.
type suspendingSource struct {
	*fakeSource
	suspended []usage.Sandbox
}

func (s *suspendingSource) Suspended(context.Context) ([]usage.Sandbox, error) {
	return s.suspended, nil
}

// TestSuspendedTime: a suspended session counts suspended seconds, no
// sandbox-seconds, from its suspension when that was after the Sampler
// started, from the first pass otherwise; a resumed one (listed no more)
// stops counting.
func TestSuspendedTime(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0}
	m := usage.NewMeter(&usage.Memory{}, clk.now)
	src := &suspendingSource{fakeSource: &fakeSource{counters: map[string]usage.Counters{}}}
	s := usage.NewSampler(m, src, 10*time.Second, nil)
	src.suspended = []usage.Sandbox{
		{Tenant: "acme", Session: "new", Created: t0.Add(4 * time.Second)},
		{Tenant: "acme", Session: "old", Created: t0.Add(-time.Hour)},
	}
	clk.advance(10 * time.Second)
	s.Sample(ctx)
	clk.advance(10 * time.Second)
	s.Sample(ctx)
	src.suspended = src.suspended[1:] // "new" resumed
	clk.advance(10 * time.Second)
	s.Sample(ctx)
	recs, err := m.Query(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour)})
	if err != nil || len(recs) != 2 {
		t.Fatalf("records = %+v, %v", recs, err)
	}
	near(t, "new's suspended seconds", recs[0].SuspendedSeconds, 16)
	near(t, "old's suspended seconds", recs[1].SuspendedSeconds, 20)
	if recs[0].SandboxSeconds != 0 || recs[1].SandboxSeconds != 0 || recs[0].Final {
		t.Errorf("records = %+v, want no sandbox-seconds, not final", recs)
	}
	var out strings.Builder
	if err := usage.WriteCSV(&out, recs); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out.String())).ReadAll()
	if err != nil || len(rows) != 3 {
		t.Fatalf("CSV %q: %v", out.String(), err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	if got := rows[1][col["final"]] + " " + rows[1][col["suspended_seconds"]]; got != "false 16.000" {
		t.Errorf("CSV row of new: final and suspended_seconds %q, want %q", got, "false 16.000")
	}
}

// slowStore is a Memory store whose Add waits for release.
type slowStore struct {
	usage.Memory
	started chan struct{}
	release chan struct{}
}

func (s *slowStore) Add(ctx context.Context, bs []usage.Bucket) error {
	close(s.started)
	<-s.release
	return s.Memory.Add(ctx, bs)
}

// TestFlushWaitsForAnotherFlush: a Flush that finds nothing pending
// because another Flush took it returns only once that one has written
// it (a server's last flush at stop, racing Sync's, lost the day's
// figures before).
func TestFlushWaitsForAnotherFlush(t *testing.T) {
	ctx := context.Background()
	store := &slowStore{started: make(chan struct{}), release: make(chan struct{})}
	m := usage.NewMeter(store, func() time.Time { return t0 })
	m.Call("acme", "s", time.Second)
	first := make(chan error, 1)
	go func() { first <- m.Flush(ctx) }()
	<-store.started
	second := make(chan error, 1)
	go func() { second <- m.Flush(ctx) }()
	select {
	case err := <-second:
		t.Fatalf("the second Flush returned (%v) before the first wrote", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(store.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	n := 0
	store.Memory.Query(ctx, usage.Filter{From: t0, To: t0.Add(time.Hour)}, func(usage.Bucket) error { n++; return nil })
	if n != 1 {
		t.Errorf("buckets written: %d, want 1", n)
	}
}
