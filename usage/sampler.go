package usage

import (
	"context"
	"log/slog"
	"time"
)

// Sandbox names one running sandbox a Source lists.
type Sandbox struct {
	Tenant, Session string
	// ID is the engine's id: a session's new sandbox (after a resume or a
	// replacement) starts its counters again.
	ID string
	// Created is when the engine created it.
	Created time.Time
}

// Source is what a Sampler reads: the running sandboxes, and the counters
// of one. Implementations are safe for concurrent use.
type Source interface {
	Sandboxes(ctx context.Context) ([]Sandbox, error)
	// Read returns a sandbox's counters; an error for a sandbox that went
	// away meanwhile is expected and skipped.
	Read(ctx context.Context, id string) (Counters, error)
}

// SuspendedLister is an optional ability of a Source: the sessions
// suspended now (their workspaces in the snapshot store, no sandbox), each
// as a Sandbox whose Created is when it was suspended (ID unused).
type SuspendedLister interface {
	Suspended(ctx context.Context) ([]Sandbox, error)
}

// WorkspaceSource is an optional ability of a Source: the bytes the
// workspace of a running sandbox's session holds, and when they were
// measured (the zero time: now; Kubernetes: when the kubelet last
// measured it). It is asked once per reading of each running sandbox, so
// an implementation must answer at a small, bounded cost (a statfs of the
// workspace's own file system, or a figure read with the counters, never
// a walk of its files); an error (no workspace of its own here, no
// measurement yet) skips the measurement, and the session keeps its last
// value.
type WorkspaceSource interface {
	Workspace(ctx context.Context, sb Sandbox) (int64, time.Time, error)
}

// MaxSandboxes bounds the sandboxes a Sampler keeps a last reading of,
// and the suspended sessions it keeps a last count of.
const MaxSandboxes = 10_000

// DefaultInterval is how often a Sampler reads each sandbox by default.
const DefaultInterval = 10 * time.Second

// FlushInterval is how often, at most, a Sampler appends the Meter's
// buckets to the Store: each append is a line per active session, so
// appending each interval would write a tenant-day file of 8,640 lines
// per session at the default interval, for figures the Meter already
// answers from memory (queries and limits read its pending buckets).
const FlushInterval = time.Minute

// Sampler reads every running sandbox's counters once per interval and
// adds what they grew by to a Meter, flushing the Meter to its Store once
// per FlushInterval and when it stops.
type Sampler struct {
	meter    *Meter
	src      Source
	interval time.Duration
	log      *slog.Logger
	started  time.Time
	flushed  time.Time // when Sample last flushed

	last map[string]reading // by sandbox id; only Sample's goroutine uses it
	// suspended holds when each suspended session was last counted, by
	// tenant and session; only Sample's goroutine uses it.
	suspended map[[2]string]time.Time
}

type reading struct {
	tenant, session string
	at              time.Time
	c               Counters
}

// NewSampler returns a Sampler; interval <= 0 is DefaultInterval, log nil
// discards.
func NewSampler(m *Meter, src Source, interval time.Duration, log *slog.Logger) *Sampler {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sampler{meter: m, src: src, interval: interval, log: log, started: m.now(), last: map[string]reading{},
		suspended: map[[2]string]time.Time{}}
}

// Run samples every interval until ctx ends, then flushes once more under
// a short context of its own (so what was measured is written even though
// the caller is gone).
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.Sample(ctx)
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.meter.Flush(fctx); err != nil {
				s.log.Warn("writing usage", "err", err)
			}
			return
		case <-t.C:
		}
	}
}

// Sample reads every running sandbox once, adds each one's growth since
// its previous reading to the Meter, closes (Final) the sessions of the
// sandboxes no longer listed, and flushes when FlushInterval has passed
// since it last did. Not safe for concurrent use: one goroutine samples.
func (s *Sampler) Sample(ctx context.Context) {
	list, err := s.src.Sandboxes(ctx)
	if err != nil {
		s.log.Warn("listing sandboxes for usage", "err", err)
		return
	}
	seen := make(map[string]bool, len(list))
	for _, sb := range list {
		if ctx.Err() != nil {
			return
		}
		// Listed is seen, read or not: a sandbox is final only when it is
		// no longer listed. A read that fails (a stats timeout, a cgroup
		// read racing) keeps the reading before it, and the next one
		// counts the growth since; forgetting it would count the
		// sandbox's whole history again at its next reading.
		seen[sb.ID] = true
		c, err := s.src.Read(ctx, sb.ID)
		if err != nil {
			s.log.Debug("reading a sandbox's usage", "tenant", sb.Tenant, "session", sb.Session, "err", err)
			continue
		}
		if ws, ok := s.src.(WorkspaceSource); ok {
			// Measured with the counters, whatever the reading below
			// counts: a gauge, its last value and peak.
			// A failed measurement adds nothing: the session keeps its
			// last value (never a 0 it did not measure).
			if n, measured, err := ws.Workspace(ctx, sb); err == nil {
				at := s.meter.now()
				if measured.IsZero() || measured.After(at) {
					measured = at
				}
				s.meter.add(sb.Tenant, sb.Session, at, Figures{WorkspaceBytes: n, WorkspacePeakBytes: n, WorkspaceMeasured: measured.UTC()}, false)
			} else {
				s.log.Debug("measuring a workspace", "tenant", sb.Tenant, "session", sb.Session, "err", err)
			}
		}
		now := s.meter.now()
		prev, ok := s.last[sb.ID]
		if !ok && len(s.last) >= MaxSandboxes {
			continue
		}
		s.last[sb.ID] = reading{tenant: sb.Tenant, session: sb.Session, at: now, c: c}
		if !ok {
			// The first reading of a sandbox. One created since the
			// Sampler started counts from its creation (its counters
			// start at zero); one that was there before (adopted after
			// a restart) counts from this reading on, since the
			// process before counted it up to its own last reading.
			// Engines' lists give Created to the second (Docker's), so
			// the start is compared to the second too: a sandbox made
			// in the second the Sampler started is new.
			if !sb.Created.Before(s.started.Truncate(time.Second)) {
				s.meter.add(sb.Tenant, sb.Session, now, grown(reading{at: sb.Created}, c, now), false)
			} else {
				s.meter.add(sb.Tenant, sb.Session, now, Figures{MemoryPeakBytes: c.MemoryPeakBytes}, false)
			}
			continue
		}
		s.meter.add(sb.Tenant, sb.Session, now, grown(prev, c, now), false)
	}
	for id, r := range s.last {
		if !seen[id] && ctx.Err() == nil {
			delete(s.last, id)
			s.meter.add(r.tenant, r.session, r.at, Figures{}, true)
		}
	}
	if sl, ok := s.src.(SuspendedLister); ok && ctx.Err() == nil {
		s.sampleSuspended(ctx, sl)
	}
	if now := s.meter.now(); now.Sub(s.flushed) >= FlushInterval {
		s.flushed = now
		if err := s.meter.Flush(ctx); err != nil {
			s.log.Warn("writing usage", "err", err)
		}
	}
}

// sampleSuspended counts each suspended session's time since it was last
// counted: one suspended since the Sampler started from its suspension,
// one suspended before from this pass on (the process before counted it
// up to its own last pass).
func (s *Sampler) sampleSuspended(ctx context.Context, sl SuspendedLister) {
	list, err := sl.Suspended(ctx)
	if err != nil {
		s.log.Warn("listing suspended sessions for usage", "err", err)
		return
	}
	now := s.meter.now()
	seen := make(map[[2]string]bool, len(list))
	for _, su := range list {
		k := [2]string{su.Tenant, su.Session}
		seen[k] = true
		last, ok := s.suspended[k]
		if !ok {
			if len(s.suspended) >= MaxSandboxes {
				continue
			}
			last = now
			if !su.Created.IsZero() && !su.Created.Before(s.started.Truncate(time.Second)) && su.Created.Before(now) {
				last = su.Created
			}
		}
		s.suspended[k] = now
		s.meter.add(su.Tenant, su.Session, now, Figures{SuspendedSeconds: max(0, now.Sub(last).Seconds())}, false)
	}
	for k := range s.suspended {
		if !seen[k] {
			delete(s.suspended, k)
		}
	}
}

// grown is what a sandbox used between two readings.
func grown(prev reading, c Counters, now time.Time) Figures {
	dt := now.Sub(prev.at).Seconds()
	if dt < 0 {
		dt = 0
	}
	cpu := (c.CPU - prev.c.CPU).Seconds()
	if cpu < 0 { // a counter that went back: the cgroup was recreated
		cpu = c.CPU.Seconds()
	}
	return Figures{
		SandboxSeconds:   dt,
		CPUSeconds:       cpu,
		MemoryGiBSeconds: float64(c.MemoryBytes) / (1 << 30) * dt,
		MemoryPeakBytes:  c.MemoryPeakBytes,
	}
}
