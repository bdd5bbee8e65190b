package usage

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"
)

// MaxPending bounds the buckets a Meter holds between flushes.
const MaxPending = 100_000

// Meter sums what sessions use, per (tenant, session, UTC hour), until a
// Flush appends it to its Store; it keeps per tenant the totals since it
// started (for Prometheus) and of the current UTC day (for limits).
// Methods are safe for concurrent use and never wait for the Store but
// Flush, Load and Query.
type Meter struct {
	store Store
	now   func() time.Time
	// flushing serialises Flush: a Flush returns once what was pending
	// when it began is written, even if another Flush took it (the
	// Sampler's last flush at a server's stop waits for Sync's).
	flushing sync.Mutex

	mu      sync.Mutex
	pending map[bkey]*Bucket
	totals  map[string]Figures // since start
	day     time.Time          // the UTC day today holds
	today   map[string]Figures
	dropped int64
}

type bkey struct {
	tenant, session string
	hour            time.Time
}

// NewMeter returns a Meter over store; now defaults to time.Now.
func NewMeter(store Store, now func() time.Time) *Meter {
	if now == nil {
		now = time.Now
	}
	return &Meter{store: store, now: now, pending: map[bkey]*Bucket{}, totals: map[string]Figures{}, today: map[string]Figures{}}
}

// Load reads today's use from the Store into the day's totals, for a
// process that starts while earlier ones have written today's files.
func (m *Meter) Load(ctx context.Context) error {
	day := m.now().UTC().Truncate(24 * time.Hour)
	sums := map[string]Figures{}
	err := m.store.Query(ctx, Filter{From: day, To: day.Add(24 * time.Hour)}, func(b Bucket) error {
		f := sums[b.Tenant]
		f.add(b.Figures)
		sums[b.Tenant] = f
		return nil
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollLocked(day)
	for t, f := range sums {
		today := m.today[t]
		today.add(f)
		m.today[t] = today
	}
	return nil
}

// Refresh sets the day's totals to what the Store and the pending buckets
// hold of today: for a process that does not sample (on Kubernetes, the
// replicas but the leader), the fleet's use, which its limits hold
// tenants to.
func (m *Meter) Refresh(ctx context.Context) error {
	day := m.now().UTC().Truncate(24 * time.Hour)
	sums := map[string]Figures{}
	err := m.each(ctx, Filter{From: day, To: day.Add(24 * time.Hour)}, func(b Bucket) error {
		f := sums[b.Tenant]
		f.add(b.Figures)
		sums[b.Tenant] = f
		return nil
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollLocked(day)
	if m.day.Equal(day) {
		m.today = sums
	}
	return nil
}

// Sync flushes the Meter to its Store and refreshes the day's totals
// (Refresh) every interval until ctx ends, then flushes once more under a
// short context of its own. Every server process runs it: one that does
// not sample (on Kubernetes, the replicas but the leader) writes the
// calls it counted, and holds the tenants' limits to what the fleet used
// (up to an interval late); for the one that samples, its Sampler's
// flushes make most of Sync's empty.
func (m *Meter) Sync(ctx context.Context, interval time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := m.Flush(fctx); err != nil {
				log.Warn("writing usage", "err", err)
			}
			return
		case <-t.C:
		}
		if err := m.Flush(ctx); err != nil {
			log.Warn("writing usage", "err", err)
		}
		if err := m.Refresh(ctx); err != nil {
			log.Warn("reading today's usage", "err", err)
		}
	}
}

// Call counts one tool call of a session and its duration.
func (m *Meter) Call(tenant, session string, d time.Duration) {
	m.add(tenant, session, m.now(), Figures{Calls: 1, CallSeconds: d.Seconds()}, false)
}

// Spill counts bytes a foreground call or a background task of a session
// wrote to its spill file.
func (m *Meter) Spill(tenant, session string, bytes int64) {
	if bytes > 0 {
		m.add(tenant, session, m.now(), Figures{SpillBytes: bytes}, false)
	}
}

// Egress counts a session's egress through the relay: requests
// connections opened, sent and received bytes. The relay calls it as the
// bytes go (sandbox/egress RelayConfig.Traffic), so a long tunnel's bytes
// fall in the hours they went in.
func (m *Meter) Egress(tenant, session string, requests, sent, received int64) {
	if requests > 0 || sent > 0 || received > 0 {
		m.add(tenant, session, m.now(), Figures{EgressRequests: requests, EgressSentBytes: sent, EgressReceivedBytes: received}, false)
	}
}

// add counts f for a session at time at.
func (m *Meter) add(tenant, session string, at time.Time, f Figures, final bool) {
	at = at.UTC()
	k := bkey{tenant, session, at.Truncate(time.Hour)}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.pending[k]
	switch {
	case b != nil:
	case len(m.pending) < MaxPending:
		b = &Bucket{Tenant: tenant, Session: session, Hour: k.hour}
		m.pending[k] = b
	default:
		m.dropped++
	}
	if b != nil {
		b.Figures.add(f)
		b.Final = b.Final || final
	}
	t := m.totals[tenant]
	t.add(f)
	m.totals[tenant] = t
	m.rollLocked(at.Truncate(24 * time.Hour))
	if !at.Before(m.day) {
		d := m.today[tenant]
		d.add(f)
		m.today[tenant] = d
	}
}

// rollLocked starts a new day's totals when day is after the one held.
func (m *Meter) rollLocked(day time.Time) {
	if day.After(m.day) {
		m.day = day
		clear(m.today)
	}
}

// Flush appends the pending buckets to the Store. On failure they stay
// pending (bounded by MaxPending) for the next Flush.
func (m *Meter) Flush(ctx context.Context) error {
	m.flushing.Lock()
	defer m.flushing.Unlock()
	m.mu.Lock()
	if len(m.pending) == 0 {
		m.mu.Unlock()
		return nil
	}
	bs := make([]Bucket, 0, len(m.pending))
	for _, b := range m.pending {
		bs = append(bs, *b)
	}
	m.pending = map[bkey]*Bucket{}
	m.mu.Unlock()
	if err := m.store.Add(ctx, bs); err != nil {
		m.mu.Lock()
		for _, b := range bs {
			k := bkey{b.Tenant, b.Session, b.Hour}
			if p := m.pending[k]; p != nil {
				p.Figures.add(b.Figures)
				p.Final = p.Final || b.Final
			} else if len(m.pending) < MaxPending {
				m.pending[k] = &b
			} else {
				m.dropped++
			}
		}
		m.mu.Unlock()
		return err
	}
	return nil
}

// Totals returns each tenant's figures since the Meter started.
func (m *Meter) Totals() map[string]Figures {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.totals)
}

// Today returns a tenant's figures of the current UTC day.
func (m *Meter) Today(tenant string) Figures {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollLocked(m.now().UTC().Truncate(24 * time.Hour))
	return m.today[tenant]
}

// Dropped counts the buckets not kept per session because MaxPending were
// held (their figures are in the tenants' totals).
func (m *Meter) Dropped() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropped
}

// Query returns the records of the sessions f selects: what the Store
// holds and what is pending, summed per session.
func (m *Meter) Query(ctx context.Context, f Filter) ([]Record, error) {
	var sum summary
	if err := m.each(ctx, f, sum.add); err != nil {
		return nil, err
	}
	return sum.records(), nil
}

// Series returns what the tenants f selects used, per tenant and UTC
// hour, oldest first: what the Store holds and what is pending. At most
// MaxPoints points (ErrInvalid past them).
func (m *Meter) Series(ctx context.Context, f Filter) ([]Point, error) {
	var s series
	if err := m.each(ctx, f, s.add); err != nil {
		return nil, err
	}
	return s.points(), nil
}

// each calls fn with every bucket f selects, the Store's, then the
// pending ones.
func (m *Meter) each(ctx context.Context, f Filter, fn func(Bucket) error) error {
	if err := m.store.Query(ctx, f, fn); err != nil {
		return err
	}
	m.mu.Lock()
	var pending []Bucket
	for _, b := range m.pending {
		if f.match(*b) {
			pending = append(pending, *b)
		}
	}
	m.mu.Unlock()
	for _, b := range pending {
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

// Limits are a tenant's daily limits; zero is none.
type Limits struct {
	CPUSecondsPerDay   float64
	SandboxHoursPerDay float64
}

// LimitError is the refusal of a call past a daily limit.
type LimitError struct {
	Tenant string
	// Limit says which, with its value ("2 CPU-seconds
	// (limits.cpuSecondsPerDay)").
	Limit  string
	Resets time.Time
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("tenant %s used its %s for today (resets at %s UTC)", e.Tenant, e.Limit, e.Resets.UTC().Format("2006-01-02 15:04"))
}

// Check returns a *LimitError when the tenant's use today reaches one of
// lim, else nil.
func (m *Meter) Check(tenant string, lim Limits) error {
	if lim == (Limits{}) {
		return nil
	}
	now := m.now().UTC()
	used := m.Today(tenant)
	resets := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if lim.CPUSecondsPerDay > 0 && used.CPUSeconds >= lim.CPUSecondsPerDay {
		return &LimitError{Tenant: tenant, Resets: resets,
			Limit: fmt.Sprintf("%s CPU-seconds (limits.cpuSecondsPerDay)", num(lim.CPUSecondsPerDay))}
	}
	if lim.SandboxHoursPerDay > 0 && used.SandboxSeconds >= lim.SandboxHoursPerDay*3600 {
		return &LimitError{Tenant: tenant, Resets: resets,
			Limit: fmt.Sprintf("%s sandbox-hours (limits.sandboxHoursPerDay)", num(lim.SandboxHoursPerDay))}
	}
	return nil
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
