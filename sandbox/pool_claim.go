package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is warmPools' side of a session's first sandbox (claim) and
// its view of the pooled sandboxes other processes make and claim
// (syncPooled).

// claim gives spec's session a ready pooled sandbox of its template, if
// there is one: the claim is recorded (Claims) before the sandbox is
// handed out, and its agent checked. If the session holds another pooled
// sandbox already (another process claimed it for the session's first
// call at the same moment: Claims.Claim says which), that one is the
// session's and the one picked here goes back to its pool. false: none,
// the session gets a cold start. An error: the session holds a claimed
// sandbox this Manager cannot get, and must not get a second one. A
// session to be restored from a saved image (Config.Restorable) gets none:
// its sandbox is the image's, made in its cold start.
func (w *warmPools) claim(ctx context.Context, spec Spec) (Sandbox, bool, error) {
	if w.cfg.Claims == nil {
		return Sandbox{}, false, nil
	}
	c := &claimPass{spec: spec, k: poolKey(spec.Tenant, TemplateHash(spec))}
	w.mu.Lock()
	_, pooled := w.pools[c.k]
	w.mu.Unlock()
	if pooled && w.cfg.Restorable != nil && w.cfg.Restorable(ctx, spec) {
		w.cfg.Logger.Info("warm pool passed over: the session resumes from a saved image", "tenant", spec.Tenant, "session", spec.Session)
		return Sandbox{}, false, nil
	}
	took := false // a ready sandbox was taken: the pool is refilled once the claim ends
	for {
		p, sb, err := w.takeReady(ctx, c)
		if err != nil || p == nil {
			return Sandbox{}, false, err
		}
		if !took {
			took = true
			defer w.kickFill()
		}
		got, next, err := w.claimPicked(ctx, c, p, sb)
		switch {
		case err != nil:
			return Sandbox{}, false, err
		case next == pickAgain:
			continue
		}
		return got, next == pickClaimed, nil
	}
}

// claimPass is one claim under way.
type claimPass struct {
	spec Spec
	k    string // the pool's poolKey
	// synced: the claim looked for pooled sandboxes other processes made
	// (it does once); stale counts the stale claims it dropped.
	synced bool
	stale  int
}

// pickOutcome is what claimPicked made of a ready sandbox it picked.
type pickOutcome int

const (
	pickClaimed pickOutcome = iota // the session has its sandbox
	pickAgain                      // not the session's after all: pick another
	pickNone                       // no pooled sandbox for the session: it starts cold
)

// takeReady takes the oldest ready sandbox of c's pool out of it (nil
// pool: there is none). If the pool has none, it first looks, once per
// claim, for ones another process (the elected filler) may have made
// since this one last looked: it waits for a look under way (another
// claim's, a Fill pass's), or looks now unless the last look began within
// syncEvery.
func (w *warmPools) takeReady(ctx context.Context, c *claimPass) (*pool, Sandbox, error) {
	for {
		w.mu.Lock()
		p := w.pools[c.k]
		if (p == nil || len(p.ready) == 0) && !c.synced {
			wait := w.syncing
			if wait != nil || time.Since(w.lastSync) >= syncEvery {
				w.mu.Unlock()
				c.synced = true
				if err := w.awaitSync(ctx, c.spec, wait); err != nil {
					return nil, Sandbox{}, err
				}
				continue
			}
		}
		if p == nil || len(p.ready) == 0 {
			w.mu.Unlock()
			return nil, Sandbox{}, nil
		}
		sb := p.ready[0]
		p.ready = p.ready[1:]
		w.pooledChanged(key{sb.Tenant, sb.Session})
		w.mu.Unlock()
		return p, sb, nil
	}
}

// awaitSync waits for the syncPooled pass under way (wait), or runs one
// if there is none.
func (w *warmPools) awaitSync(ctx context.Context, spec Spec, wait chan struct{}) error {
	if wait == nil {
		if err := w.syncPooled(ctx); err != nil {
			w.cfg.Logger.Warn("listing pooled sandboxes", "err", err)
		}
		return nil
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %s/%s: waiting for the list of pooled sandboxes: %w", ErrUnavailable, spec.Tenant, spec.Session, ctx.Err())
	}
}

// claimPicked claims sb, taken from p, for c's session and hands out the
// session's sandbox: sb, or the one the session holds already.
func (w *warmPools) claimPicked(ctx context.Context, c *claimPass, p *pool, sb Sandbox) (Sandbox, pickOutcome, error) {
	spec := c.spec
	pooled := sb.Session
	held, err := w.cfg.Claims.Claim(ctx, spec.Tenant, pooled, spec.Session)
	if errors.Is(err, ErrAlreadyExists) || errors.Is(err, ErrNotFound) {
		// Another process claimed it (it is that session's now), or
		// retired or removed it: not ours to hand out, nor to know.
		w.cfg.Logger.Info("pooled sandbox claimed or removed elsewhere", "tenant", spec.Tenant, "name", pooled, "err", err)
		w.forget(key{spec.Tenant, pooled})
		return Sandbox{}, pickAgain, nil
	}
	if err != nil {
		// Unclaimed still: back to its pool if the pool still wants
		// it, and a cold start.
		w.cfg.Logger.Warn("claiming a pooled sandbox", "tenant", spec.Tenant, "session", spec.Session, "err", err)
		w.putBack(ctx, c.k, p, sb)
		return Sandbox{}, pickNone, nil
	}
	if held == spec.Session {
		// Another process is starting (or started) the session cold
		// (ColdStarts): that sandbox is the session's.
		w.cfg.Logger.Info("session started cold elsewhere", "tenant", spec.Tenant, "session", spec.Session, "unused", pooled)
		w.putBack(ctx, c.k, p, sb)
		return Sandbox{}, pickNone, errColdElsewhere
	}
	if held != pooled {
		// The session's first calls reached another process too, which
		// claimed held for it an instant before: that one is the
		// session's, and sb was left unclaimed.
		w.cfg.Logger.Info("session claimed another pooled sandbox elsewhere", "tenant", spec.Tenant, "session", spec.Session, "name", held, "unused", pooled)
		w.putBack(ctx, c.k, p, sb)
		got, next, err := w.takeHeld(ctx, c, held)
		if err != nil || next == pickAgain {
			return Sandbox{}, next, err
		}
		sb = got
	}
	sb.PoolName, sb.Session = held, spec.Session
	return w.handOut(ctx, spec, sb, held != pooled)
}

// takeHeld returns the pooled sandbox held that the session holds (claimed
// by another process). Its sandbox gone and the claim left (a crash
// between the two), it drops the claim, up to three times a claim, and
// says to claim again.
func (w *warmPools) takeHeld(ctx context.Context, c *claimPass, held string) (Sandbox, pickOutcome, error) {
	got, err := w.heldSandbox(ctx, c.spec, held)
	if errors.Is(err, ErrNotFound) && c.stale < 3 {
		c.stale++
		if err := w.cfg.Claims.Release(ctx, c.spec.Tenant, held); err != nil {
			return Sandbox{}, pickNone, err
		}
		return Sandbox{}, pickAgain, nil
	}
	if err != nil {
		return Sandbox{}, pickNone, err
	}
	return got, pickClaimed, nil
}

// handOut checks the agent of sb, claimed for spec's session, and hands it
// out. One that is not ready is removed and another picked, unless another
// process handed it to the session (elsewhere): not ours to replace.
func (w *warmPools) handOut(ctx context.Context, spec Spec, sb Sandbox, elsewhere bool) (Sandbox, pickOutcome, error) {
	if err := w.ready(ctx, sb); err != nil && elsewhere {
		return Sandbox{}, pickNone, err
	} else if err != nil {
		w.cfg.Logger.Warn("claimed pooled sandbox not ready", "tenant", spec.Tenant, "session", spec.Session, "name", sb.PoolName, "err", err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RemoveTimeout)
		if err := w.destroy(rctx, key{spec.Tenant, spec.Session}, sb); err != nil {
			w.cfg.Logger.Warn("removing pooled sandbox", "tenant", spec.Tenant, "name", sb.PoolName, "err", err)
		}
		cancel()
		return Sandbox{}, pickAgain, nil
	}
	w.cfg.Logger.Info("sandbox claimed from pool", "tenant", spec.Tenant, "session", spec.Session, "name", sb.PoolName, "id", sb.ID)
	return sb, pickClaimed, nil
}

// putBack returns an unclaimed sandbox to p, the pool of poolKey k, if p
// still wants it, and removes it otherwise.
func (w *warmPools) putBack(ctx context.Context, k string, p *pool, sb Sandbox) {
	w.mu.Lock()
	back := w.pools[k] == p && (!p.filled || len(p.ready) < p.size)
	if back {
		p.ready = append([]Sandbox{sb}, p.ready...)
		w.pooledChanged(key{sb.Tenant, sb.Session})
	}
	w.mu.Unlock()
	if !back {
		if err := w.removePooled(ctx, sb, "pool drained"); err != nil && !errors.Is(err, ErrAlreadyExists) {
			w.cfg.Logger.Warn("removing pooled sandbox", "tenant", sb.Tenant, "name", sb.Session, "err", err)
		}
	}
}

// heldSandbox returns the pooled sandbox held, which another process
// claimed for spec's session, as the session's, and marks it known by name
// (in no ready list). ErrNotFound (wrapped) if it is gone.
func (w *warmPools) heldSandbox(ctx context.Context, spec Spec, held string) (Sandbox, error) {
	sb, err := w.cfg.Runtime.Get(ctx, spec.Tenant, held)
	if err != nil {
		return Sandbox{}, fmt.Errorf("session %s/%s holds pooled sandbox %s: %w", spec.Tenant, spec.Session, held, err)
	}
	w.markNamed(key{spec.Tenant, held})
	sb.PoolName, sb.Session = held, spec.Session
	return sb, nil
}

// syncPooled makes the ready lists what the runtime and the claims say:
// running pooled sandboxes of this owner that nobody claimed or retired,
// made by another process too (on Kubernetes the elected replica fills
// the pools every replica claims from), are ready here; those claimed,
// retired or removed elsewhere are dropped. Sandboxes this Manager is
// creating or claiming (known by name, in no ready list) are left alone.
//
// Its list is as old as the pass: this Manager's pools go on changing
// while it lists (a concurrent Fill's creation ends, a claim puts one
// back, a drain removes one). So the pass registers itself (poolSync)
// before it lists, every change this Manager makes to a pooled sandbox's
// ready or named state meanwhile is noted in it (pooledChanged), and the
// pass leaves those sandboxes as this Manager has them (but for one its
// list of claims shows claimed or retired, which is for good): it neither
// drops one made ready after its list was taken (the pool would then
// count one short, and a Fill overshoot its size) nor makes one ready
// that this Manager removed or saw claimed after it was listed.
func (w *warmPools) syncPooled(ctx context.Context) error {
	if w.cfg.Claims == nil {
		return nil
	}
	s := &poolSync{changed: map[key]bool{}}
	done := make(chan struct{})
	w.mu.Lock()
	w.lastSync = time.Now()
	w.syncs[s] = struct{}{}
	w.syncing = done
	w.mu.Unlock()
	list, claimed, err := w.listClaimed(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	// Those waiting see the ready lists this pass leaves (w.mu is released
	// after the lists are updated).
	defer close(done)
	if w.syncing == done {
		w.syncing = nil
	}
	delete(w.syncs, s)
	if err != nil {
		return err
	}
	w.applyList(s, freePooled(list, claimed), claimed)
	return nil
}

// freePooled returns the running pooled sandboxes of list that no claim
// names (a claim names one when it is claimed or retired).
func freePooled(list []Sandbox, claimed map[key]string) map[key]Sandbox {
	free := map[key]Sandbox{}
	for _, sb := range list {
		k := key{sb.Tenant, sb.Session}
		if _, taken := claimed[k]; !taken && IsPooled(sb.Session) && poolHash(sb.Session) != "" && sb.State == StateRunning && CheckID("tenant", sb.Tenant) == nil {
			free[k] = sb
		}
	}
	return free
}

// applyList is the end of the syncPooled pass s: the ready lists keep
// the free sandboxes and those changed since s registered, and gain the
// free ones this Manager does not know. w.mu is held.
func (w *warmPools) applyList(s *poolSync, free map[key]Sandbox, claimed map[key]string) {
	listed := map[key]bool{}
	for _, p := range w.pools {
		kept := p.ready[:0]
		for _, sb := range p.ready {
			k := key{sb.Tenant, sb.Session}
			_, ok := free[k]
			// A claim or retirement is for good (until the sandbox is
			// gone): one the list of claims shows is not ready, however
			// recently this Manager made it ready.
			if _, taken := claimed[k]; ok || (s.changed[k] && !taken) {
				kept = append(kept, sb)
				listed[k] = true
			} else {
				delete(w.named, k) // another's now, or gone
				w.pooledChanged(k)
			}
		}
		clear(p.ready[len(kept):])
		p.ready = kept
	}
	for k, sb := range free {
		if listed[k] || w.named[k] || s.changed[k] {
			continue
		}
		pk := poolKey(sb.Tenant, poolHash(sb.Session))
		p := w.pools[pk]
		if p == nil {
			p = &pool{tenant: sb.Tenant, hash: poolHash(sb.Session)}
			w.pools[pk] = p
		}
		p.ready = append(p.ready, sb)
		w.named[k] = true
		w.pooledChanged(k)
	}
}

// poolSync is one syncPooled pass under way (warmPools.syncs). changed are
// the pooled sandboxes (tenant, runtime name) whose ready or named state
// this Manager changed since the pass registered, before it listed: the
// pass's list may predate those changes, so it leaves them be. A pass
// notes at most every pooled sandbox once.
type poolSync struct{ changed map[key]bool }

// pooledChanged notes, for every syncPooled pass under way, that this
// Manager changed k's ready or named state (see syncPooled); w.mu is held.
// Every change of a ready list or of named goes through it.
func (w *warmPools) pooledChanged(k key) {
	for s := range w.syncs {
		s.changed[k] = true
	}
}
