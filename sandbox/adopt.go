package sandbox

import (
	"context"
	"errors"
)

// AdoptReport says what Adopt did.
type AdoptReport struct {
	// Kept: running sandboxes of this owner, now managed (LastUsed = now).
	Kept []Sandbox
	// Removed: sandboxes of this owner that were not running. Their
	// sessions go on (with the runtime's SessionState, their workspaces
	// are kept for their next sandbox) until removed or reaped.
	Removed []Sandbox
	// Swept: per-sandbox state with no sandbox (host directories), as the
	// runtime's Sweeper names it.
	Swept []string
	// Pooled: running, unclaimed pooled sandboxes, kept for the warm pools
	// (the next Fill keeps those of the templates it is given and removes
	// the others).
	Pooled []Sandbox
	// Released: claims whose sandbox is gone, dropped.
	Released []Claim
}

// adoptPass is one Adopt under way: what it found and what it did.
type adoptPass struct {
	rep  AdoptReport
	errs []error
	// claimed are the claims listed (claimedBy) not yet matched with a
	// sandbox; live holds runtime names (a pooled sandbox's is its pooled
	// name) whose state the sweep keeps.
	claimed map[key]string
	live    map[key]bool
}

// adopt is Manager.Adopt: each listed sandbox is adopted or removed, then
// the runtime sweeps state no sandbox uses, then the claims of gone
// sandboxes are dropped.
func (r *reaper) adopt(ctx context.Context) (AdoptReport, error) {
	list, claimed, err := r.listClaimed(ctx)
	if err != nil {
		return AdoptReport{}, err
	}
	a := &adoptPass{claimed: claimed, live: map[key]bool{}}
	for _, sb := range list {
		r.adoptListed(ctx, a, sb)
	}
	r.sweep(ctx, a)
	// Claims left are of sandboxes that are gone (removed between their
	// removal and their claim's, or by hand).
	for rk, s := range a.claimed {
		if err := r.cfg.Claims.Release(ctx, rk.tenant, rk.session); err != nil {
			a.errs = append(a.errs, err)
			continue
		}
		a.rep.Released = append(a.rep.Released, Claim{Tenant: rk.tenant, Pooled: rk.session, Session: s})
	}
	return a.rep, errors.Join(a.errs...)
}

// adoptListed adopts or removes one sandbox Adopt listed.
func (r *reaper) adoptListed(ctx context.Context, a *adoptPass, sb Sandbox) {
	rk := key{sb.Tenant, sb.Session}
	if r.beingCreated(sb) {
		// Being created, perhaps by another process sharing the
		// runtime (a replica, or the leader filling a pool): not dead
		// yet. A later Adopt, or the reaper, judges it.
		a.live[rk] = true
		return
	}
	if IsPooled(sb.Session) {
		s, ok := a.claimed[rk]
		if !ok || s == "" {
			r.adoptUnclaimed(ctx, a, sb, ok)
			return
		}
		sb = r.reclaim(ctx, a, sb, s)
	}
	r.adoptSession(ctx, a, sb, rk)
}

// adoptUnclaimed keeps an unclaimed pooled sandbox for its pool, or
// removes it: it is not running, or retired, its removal cut short.
func (r *reaper) adoptUnclaimed(ctx context.Context, a *adoptPass, sb Sandbox, retired bool) {
	rk := key{sb.Tenant, sb.Session}
	if retired {
		// Retired, and its removal cut short: finish it.
		delete(a.claimed, rk)
	}
	if !retired && r.pools.adopt(sb) {
		a.live[rk] = true
		a.rep.Pooled = append(a.rep.Pooled, sb)
		return
	}
	// Retired first (removePooled): another process may have
	// claimed it since the list.
	err := r.pools.removePooled(ctx, sb, "adopt: "+string(sb.State))
	if errors.Is(err, ErrAlreadyExists) {
		a.live[rk] = true
		return
	}
	if err != nil {
		a.errs = append(a.errs, err)
		a.live[rk] = true
		return
	}
	a.rep.Removed = append(a.rep.Removed, sb)
}

// reclaim returns a claimed pooled sandbox as its session s's, claiming it
// again for s: that restores an index a crash may have cut short (it was
// claimed perhaps just before one).
func (r *reaper) reclaim(ctx context.Context, a *adoptPass, sb Sandbox, s string) Sandbox {
	delete(a.claimed, key{sb.Tenant, sb.Session})
	if held, err := r.cfg.Claims.Claim(ctx, sb.Tenant, sb.Session, s); err != nil {
		a.errs = append(a.errs, err)
	} else if held == s {
		// The session's claim lock names a cold start (ColdStarts):
		// a claim that lost its lock to it left this pod claimed.
		r.cfg.Logger.Warn("session started cold also has a pooled sandbox claimed for it", "tenant", sb.Tenant, "session", s, "name", sb.Session)
	} else if held != sb.Session {
		// Only claims made before claims were exclusive per
		// session can leave a session two.
		r.cfg.Logger.Warn("session holds two pooled sandboxes", "tenant", sb.Tenant, "session", s, "name", sb.Session, "held", held)
	}
	sb.PoolName, sb.Session = sb.Session, s
	return sb
}

// adoptSession makes sb, of runtime name rk, its session's sandbox if it
// runs, and removes it otherwise; the session of a removed one goes on
// (with SessionState, its state is kept for its next sandbox).
func (r *reaper) adoptSession(ctx context.Context, a *adoptPass, sb Sandbox, rk key) {
	k := key{sb.Tenant, sb.Session}
	valid := CheckID("tenant", k.tenant) == nil && CheckID("session", k.session) == nil
	if valid {
		got, known, kept := r.life.adopt(k, rk, sb)
		if known || kept {
			a.live[rk] = true
		}
		if known {
			return
		}
		if kept {
			a.rep.Kept = append(a.rep.Kept, got)
			r.cfg.Logger.Info("sandbox adopted", "tenant", k.tenant, "session", k.session, "id", sb.ID)
			return
		}
	}
	if err := r.life.destroy(ctx, k, sb); err != nil {
		a.errs = append(a.errs, err)
		a.live[rk] = true // keep its directory until the container is gone
		return
	}
	a.rep.Removed = append(a.rep.Removed, sb)
	r.cfg.Logger.Info("sandbox removed", "reason", "adopt: "+string(sb.State), "tenant", k.tenant, "session", k.session, "id", sb.ID)
	if _, ok := r.cfg.Runtime.(SessionState); ok && valid {
		r.life.keepSession(k)
		a.live[k] = true
	}
}

// sweep has the runtime, if it is a Sweeper, remove per-sandbox state of
// runtime names neither live at this Adopt nor known to the Manager.
//
// A name is asked of one owner or the other, each under its own lock:
// session names are the lifecycle's, pooled names warmPools' (a claimed
// pooled sandbox's state is under its pooled name, in named until the
// sandbox is removed), so no answer needs both at once.
func (r *reaper) sweep(ctx context.Context, a *adoptPass) {
	sw, ok := r.cfg.Runtime.(Sweeper)
	if !ok {
		return
	}
	swept, err := sw.Sweep(ctx, r.cfg.Owner, func(tenant, session string) bool {
		k := key{tenant, session}
		return a.live[k] || r.life.knows(k) || r.pools.knowsName(k)
	})
	if err != nil {
		a.errs = append(a.errs, err)
	}
	for _, p := range swept {
		r.cfg.Logger.Info("sandbox state removed", "reason", "adopt: no sandbox", "path", p)
	}
	a.rep.Swept = swept
}
