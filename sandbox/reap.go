package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultBusyTimeout is Config.BusyTimeout's default: an agent that takes
// longer to say whether it is busy is taken for idle.
const DefaultBusyTimeout = 10 * time.Second

// DefaultSuspendTimeout is Config.SuspendTimeout's default: a workspace
// of a few GiB streams to a store well within it.
const DefaultSuspendTimeout = 10 * time.Minute

// reaper ends what nobody uses: idle sessions and their sandboxes (Reap),
// and, at a restart, dead sandboxes, claims of gone ones and state no
// sandbox uses (Adopt, adopt.go). It keeps no state and has no lock of its
// own: it decides from the runtime's lists and acts through the lifecycle
// and warmPools, under their locks (see lifecycle for the one order in
// which both are held).
type reaper struct {
	*engine
	life  *lifecycle
	pools *warmPools
}

// reapBy is Manager.ReapBy.
func (r *reaper) reapBy(ctx context.Context, idleTTL func(tenant string) time.Duration) ([]Sandbox, error) {
	recorded, err := r.recordedUses(ctx)
	if err != nil {
		return nil, err
	}
	victims := r.life.idle(r.cfg.Now(), idleTTL, recorded)
	var reaped []Sandbox
	var errs []error
	rctx := context.WithoutCancel(ctx)
	for i, v := range victims {
		if ctx.Err() != nil {
			// The caller stopped leading (its lead ended): another
			// process reaps now. A removal begun goes on (rctx); none
			// starts.
			for _, v := range victims[i:] {
				r.life.restore(v)
			}
			break
		}
		gone, err := r.reapOne(rctx, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if gone {
			r.cfg.Logger.Info("sandbox reaped", "tenant", v.k.tenant, "session", v.k.session, "id", v.sb.ID,
				"idle", v.idle.Round(time.Second))
			reaped = append(reaped, v.sb)
		}
	}
	return reaped, errors.Join(errs...)
}

// recordedUses returns the sandboxes of the owner by session, with the
// uses other processes recorded (nil without a UseRecorder). A reaper
// that cannot read them reaps nothing this time rather than judge by its
// own uses alone.
func (r *reaper) recordedUses(ctx context.Context) (map[key]Sandbox, error) {
	if r.life.records == nil {
		return nil, nil
	}
	list, err := r.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("reap: reading the sandboxes' recorded uses: %w", err)
	}
	recorded := make(map[key]Sandbox, len(list))
	for _, sb := range list {
		recorded[key{sb.Tenant, sb.Session}] = sb
	}
	return recorded, nil
}

// lastUse is the latest of this process's use (local), the recorded one
// and the sandbox's creation (a sandbox another process just made has no
// use recorded yet).
func lastUse(recorded map[key]Sandbox, k key, local time.Time) time.Time {
	sb, ok := recorded[k]
	if !ok {
		return local
	}
	for _, t := range []time.Time{sb.LastUsed, sb.Created} {
		if t.After(local) {
			local = t
		}
	}
	return local
}

// reapOne ends the session of v, under Config.RemoveTimeout, and releases
// its removal entry. gone: it had a sandbox, removed now.
func (r *reaper) reapOne(ctx context.Context, v victim) (gone bool, _ error) {
	c, cancel := context.WithTimeout(ctx, r.cfg.RemoveTimeout)
	defer cancel()
	if v.sb.ID == "" {
		// A session this Manager knows without a sandbox: if one is
		// on the engine now, another process made it; not ours to
		// judge idle. The next Ensure takes it over.
		if _, err := r.cfg.Runtime.Get(c, v.k.tenant, v.k.session); !errors.Is(err, ErrNotFound) {
			r.life.release(v.k, v.r, false)
			return false, nil
		}
	}
	if v.sb.ID != "" && r.beingCreated(v.sb) {
		// Not started and younger than a creation may take: another
		// process's (a replica's cold start, which under load can
		// outlast a short idle TTL counted from the sandbox's making),
		// with no agent yet to ask whether it is busy. Judged once it
		// runs, or once it is older than a creation may take.
		r.cfg.Logger.Info("idle session kept: its sandbox is being created", "tenant", v.k.tenant, "session", v.k.session,
			"id", v.sb.ID, "age", r.cfg.Now().Sub(v.sb.Created).Round(time.Second))
		r.life.restore(v)
		return false, nil
	}
	if v.sb.ID != "" && r.cfg.Busy != nil {
		bctx, cancel := context.WithTimeout(c, r.cfg.BusyTimeout)
		why, err := r.cfg.Busy(bctx, v.sb)
		cancel()
		switch {
		case err != nil:
			r.cfg.Logger.Warn("sandbox reaped without knowing whether it is busy", "tenant", v.k.tenant, "session", v.k.session,
				"id", v.sb.ID, "err", err)
		case why != "":
			r.cfg.Logger.Info("idle session kept: its sandbox is busy", "tenant", v.k.tenant, "session", v.k.session,
				"id", v.sb.ID, "busy", why, "since_call", v.idle.Round(time.Second))
			r.life.keep(v)
			return false, nil
		}
	}
	if v.sb.ID != "" && r.cfg.Suspend != nil {
		if err := r.life.save(ctx, v); err != nil {
			r.cfg.Logger.Warn("idle session kept running: its suspend failed", "tenant", v.k.tenant, "session", v.k.session,
				"id", v.sb.ID, "err", err)
			return false, err
		}
	}
	err := r.life.end(c, v)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return false, err
	}
	return v.sb.ID != "", nil
}

// reapEvery is Manager.ReapEvery.
func (r *reaper) reapEvery(ctx context.Context, idleTTL func(tenant string) time.Duration, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := r.reapBy(ctx, idleTTL); err != nil {
				r.cfg.Logger.Warn("sandbox reap", "err", err)
			}
		}
	}
}
