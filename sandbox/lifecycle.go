package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// lifecycle owns the sandbox of each session: it creates it on first use
// (create.go), hands it out and records its uses, removes it on request,
// and remembers the sessions it serves. It is the Manager's Ensure, Touch,
// Sandboxes, Remove, RemoveSandbox and Inspect.
//
// mu guards entries, sessions and absent, and every entry's fields. It is
// never held across a runtime or claims call. The one time it is held
// with another lock, warmPools.mu is taken inside it (adopt: lock order
// lifecycle.mu, then warmPools.mu); nothing takes them the other way.
type lifecycle struct {
	*engine
	adm     *admission
	pools   *warmPools
	records *useRecords // nil: the runtime keeps no uses

	mu      sync.Mutex
	entries map[key]*entry
	// sessions are the live sessions, with their last use: every session
	// with an entry, and those whose sandbox was removed (RemoveSandbox,
	// a failed replacement, a dead one at Adopt) while the session goes on.
	sessions map[key]time.Time
	// absent holds, for sessions Inspect found without a sandbox, when it
	// looked (see noteAbsent).
	absent map[key]time.Time
}

type key struct{ tenant, session string }

func (k key) String() string { return k.tenant + "/" + k.session }

// entry is a session's sandbox as the Manager knows it. While an operation
// (creation or removal) runs, busy is open and sb not valid; callers wait on
// busy and look again. A finished creation stores err before closing busy.
type entry struct {
	sb       Sandbox
	busy     chan struct{}
	creating bool
	err      error
	// recorded is when this process last had the sandbox's use recorded
	// (UseRecorder).
	recorded time.Time
}

func newLifecycle(g *engine, adm *admission, pools *warmPools) *lifecycle {
	return &lifecycle{engine: g, adm: adm, pools: pools, records: newUseRecords(g.cfg),
		entries: map[key]*entry{}, sessions: map[key]time.Time{}, absent: map[key]time.Time{}}
}

// used marks e's sandbox used now; l.mu is held. With a UseRecorder the
// use is recorded with the sandbox when the last record is
// UseRecordEvery old, in the background: a warm call never waits for it.
func (l *lifecycle) used(k key, e *entry) {
	now := l.cfg.Now()
	e.sb.LastUsed = now
	l.sessions[k] = now
	if l.records != nil {
		l.records.note(e, now)
	}
}

// ensure is Manager.Ensure.
func (l *lifecycle) ensure(ctx context.Context, spec Spec) (Sandbox, error) {
	spec, err := l.complete(spec)
	if err != nil {
		return Sandbox{}, err
	}
	k := key{spec.Tenant, spec.Session}
	start := l.cfg.Now()
	for {
		l.mu.Lock()
		e := l.entries[k]
		if e == nil {
			e = &entry{busy: make(chan struct{}), creating: true}
			l.entries[k] = e
			go l.create(ctx, k, e, spec)
		}
		if e.busy == nil {
			l.used(k, e)
			sb := e.sb
			l.mu.Unlock()
			return sb, nil
		}
		busy, creating := e.busy, e.creating
		l.mu.Unlock()

		select {
		case <-busy:
		case <-ctx.Done():
			if creating {
				// The creation goes on (detached, under CreateTimeout):
				// a later call of the session finds the sandbox.
				return Sandbox{}, fmt.Errorf("%w: the sandbox of %s/%s is still being created after %s, when this call's own deadline ended; a later call finds it once it is ready: %w",
					ErrUnavailable, spec.Tenant, spec.Session, l.cfg.Now().Sub(start).Round(time.Millisecond), ctx.Err())
			}
			return Sandbox{}, fmt.Errorf("%w: waiting for the sandbox of %s/%s (being removed): %w", ErrUnavailable, spec.Tenant, spec.Session, ctx.Err())
		}
		// The outcome of the creation this call waited for is its answer,
		// even if a Remove got the sandbox right after: a failure is
		// reported rather than retried (a persistent one would loop), a
		// success returned. A removal that ended sends us round to create
		// afresh.
		if creating {
			if e.err != nil {
				return Sandbox{}, e.err
			}
			l.mu.Lock()
			sb := e.sb
			l.mu.Unlock()
			return sb, nil
		}
	}
}

// touch is Manager.Touch.
func (l *lifecycle) touch(tenant, session string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := key{tenant, session}
	e := l.entries[k]
	if e == nil || e.busy != nil {
		return false
	}
	l.used(k, e)
	return true
}

// sandboxes is Manager.Sandboxes.
func (l *lifecycle) sandboxes() []Sandbox {
	l.mu.Lock()
	var out []Sandbox
	for _, e := range l.entries {
		if e.busy == nil {
			out = append(out, e.sb)
		}
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return key{out[i].Tenant, out[i].Session}.String() < key{out[j].Tenant, out[j].Session}.String()
	})
	return out
}

// remove is Manager.Remove (end) and Manager.RemoveSandbox (only: the
// sandbox to remove; zero: whichever the session has).
func (l *lifecycle) remove(ctx context.Context, tenant, session string, only Sandbox, end bool) error {
	if err := checkSession(tenant, session); err != nil {
		return err
	}
	k := key{tenant, session}
	e, r, err := l.hold(ctx, k)
	if err != nil {
		return err
	}
	var sb Sandbox
	if e != nil {
		sb = e.sb
	}
	return detached(ctx, func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, l.cfg.RemoveTimeout)
		defer cancel()
		if only.ID != "" {
			if err := l.isCurrent(rctx, k, &sb, only); err != nil {
				l.unhold(k, r, e)
				return err
			}
		}
		r.err = l.destroy(rctx, k, sb)
		if end {
			r.err = l.endSession(rctx, k, r.err)
		}
		l.release(k, r, end && r.err == nil)
		return r.err
	})
}

// isCurrent checks, under k's removal entry, that only is k's sandbox:
// *sb as the Manager knows it, or as the runtime has it when the Manager
// knows none (then *sb is set to it). A removal racing a replacement
// must not take the replacement.
func (l *lifecycle) isCurrent(ctx context.Context, k key, sb *Sandbox, only Sandbox) error {
	if sb.ID == "" {
		got, err := l.get(ctx, k.tenant, k.session)
		switch {
		case err != nil && !errors.Is(err, ErrNotFound):
			return err
		case err == nil && got.Owner != l.cfg.Owner:
			return fmt.Errorf("%w: sandbox %s belongs to owner %q", ErrConflict, k, got.Owner)
		}
		*sb = got
	}
	if sb.ID != only.ID || !sb.Created.Equal(only.Created) {
		return fmt.Errorf("%w: sandbox %s of %s (replaced already)", ErrNotFound, only.ID, k)
	}
	return nil
}

// unhold ends r, k's removal entry, that removed nothing: prev, the entry
// it replaced (nil: none), is k's entry again.
func (l *lifecycle) unhold(k key, r, prev *entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries[k] == r {
		if prev != nil {
			l.entries[k] = prev
		} else {
			delete(l.entries, k)
		}
	}
	close(r.busy)
}

// hold waits for the operation in progress on k's sandbox, if any, then
// puts a removal entry in place, which holds k's calls until released. It
// returns the entry it replaced (nil: none) and the removal entry.
func (l *lifecycle) hold(ctx context.Context, k key) (prev, r *entry, _ error) {
	for {
		l.mu.Lock()
		e := l.entries[k]
		if e == nil || e.busy == nil {
			r := l.claimLocked(k)
			l.mu.Unlock()
			return e, r, nil
		}
		busy := e.busy
		l.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// detached runs op to its end whatever ctx does (a removal half done
// helps nobody), under ctx's values; it returns op's error, or ctx's if
// the caller stops waiting first.
func detached(ctx context.Context, op func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- op(context.WithoutCancel(ctx)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// suspend is Manager.Suspend: remove's removal entry holds the session's
// calls while Config.Suspend saves the sandbox; then the sandbox and the
// session's state go, or, if the save failed, the session goes on.
func (l *lifecycle) suspend(ctx context.Context, tenant, session string) error {
	if l.cfg.Suspend == nil {
		return fmt.Errorf("%w: this manager suspends no sessions (no Config.Suspend)", ErrInvalid)
	}
	if err := checkSession(tenant, session); err != nil {
		return err
	}
	k := key{tenant, session}
	e, r, err := l.hold(ctx, k)
	if err != nil {
		return err
	}
	v := victim{k: k, prev: e, r: r}
	if e != nil {
		v.sb = e.sb
	}
	return detached(ctx, func(ctx context.Context) error { return l.suspendOne(ctx, v) })
}

// suspendOne saves and removes v's sandbox, and ends v's removal entry.
func (l *lifecycle) suspendOne(ctx context.Context, v victim) error {
	if v.sb.ID == "" {
		gctx, cancel := context.WithTimeout(ctx, l.cfg.RemoveTimeout)
		sb, err := l.get(gctx, v.k.tenant, v.k.session)
		cancel()
		switch {
		case err == nil && sb.Owner != l.cfg.Owner:
			err = fmt.Errorf("%w: sandbox %s belongs to owner %q", ErrConflict, v.k, sb.Owner)
		case err == nil && sb.State != StateRunning:
			err = fmt.Errorf("%w: the sandbox of %s is %s, not running: there is no agent to save its workspace through", ErrUnavailable, v.k, sb.State)
		}
		if err != nil {
			v.r.err = err
			l.release(v.k, v.r, false)
			return err
		}
		v.sb = sb
	}
	if err := l.save(ctx, v); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, l.cfg.RemoveTimeout)
	defer cancel()
	if err := l.end(rctx, v); !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// end removes v's sandbox and the session's state, and ends v's removal
// entry: the session is gone unless that failed.
func (l *lifecycle) end(ctx context.Context, v victim) error {
	err := l.destroy(ctx, v.k, v.sb)
	err = l.endSession(ctx, v.k, err)
	v.r.err = err
	l.release(v.k, v.r, err == nil || errors.Is(err, ErrNotFound))
	return err
}

// save calls Config.Suspend for v, held by its removal entry, under
// SuspendTimeout; if it fails, v is kept (its entry back, used now).
func (l *lifecycle) save(ctx context.Context, v victim) error {
	sctx, cancel := context.WithTimeout(ctx, l.cfg.SuspendTimeout)
	err := l.cfg.Suspend(sctx, v.sb)
	cancel()
	if err != nil {
		l.keep(v)
		return err
	}
	l.cfg.Logger.Info("session suspended", "tenant", v.k.tenant, "session", v.k.session, "id", v.sb.ID)
	return nil
}

// endSession removes the runtime's state of session k after destroy
// returned err, and returns the outcome: not found only if there was
// neither a sandbox nor state. A session whose sandbox could not be
// removed keeps its state.
func (l *lifecycle) endSession(ctx context.Context, k key, err error) error {
	ss, ok := l.cfg.Runtime.(SessionState)
	if !ok || (err != nil && !errors.Is(err, ErrNotFound)) {
		return err
	}
	had, serr := ss.RemoveSession(ctx, k.tenant, k.session)
	switch {
	case serr != nil:
		return serr
	case had:
		l.cfg.Logger.Info("session state removed", "tenant", k.tenant, "session", k.session)
		return nil
	}
	return err
}

// inspect is Manager.Inspect.
func (l *lifecycle) inspect(ctx context.Context, tenant, session string) (Sandbox, error) {
	if err := checkSession(tenant, session); err != nil {
		return Sandbox{}, err
	}
	sb, err := l.get(ctx, tenant, session)
	if errors.Is(err, ErrNotFound) {
		l.noteAbsent(key{tenant, session})
	}
	return sb, err
}

// absentFresh is how long Inspect's "no sandbox" spares the creation that
// follows it its own look; maxAbsent bounds how many sessions are noted.
const (
	absentFresh = time.Second
	maxAbsent   = 1024
)

// noteAbsent notes that k had no sandbox a moment ago. A new session's
// first call reads its settings (Inspect) and then creates its sandbox
// (Ensure): on Kubernetes each look is a claims lookup and a pod read, so
// the creation takes Inspect's answer instead of asking again (tookAbsent).
// Only where the Claims keep cold starts (ColdStarts: Kubernetes, shared
// by replicas) is that safe: another process that created the sandbox in
// between is met at the session's claim lock, by a claim or a cold start,
// and waited for. On one host another process (`shellbox cp` or `call`
// beside `serve`, a restart's overlap) may create it too, with nothing
// to meet there; the engine's lookup there is a local call anyway.
func (l *lifecycle) noteAbsent(k key) {
	if !l.shared() {
		return
	}
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries[k] != nil {
		return // being created or removed here: Ensure learns it from the entry
	}
	if len(l.absent) >= maxAbsent {
		for ak, t := range l.absent {
			if now.Sub(t) >= absentFresh {
				delete(l.absent, ak)
			}
		}
		if len(l.absent) >= maxAbsent {
			return
		}
	}
	l.absent[k] = now
}

// tookAbsent reports, once, whether Inspect found k without a sandbox
// within absentFresh.
func (l *lifecycle) tookAbsent(k key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.absent[k]
	delete(l.absent, k)
	return ok && l.cfg.Now().Sub(t) < absentFresh
}

// destroy removes a session's sandbox (sb, or whatever the runtime has for
// the session when sb.ID is empty), and its claim if it came from a pool.
func (l *lifecycle) destroy(ctx context.Context, k key, sb Sandbox) error {
	if sb.ID == "" {
		got, err := l.get(ctx, k.tenant, k.session)
		switch {
		case errors.Is(err, ErrNotFound):
			return fmt.Errorf("%w: %s", ErrNotFound, k)
		case err != nil:
			return err
		case got.Owner != l.cfg.Owner:
			return fmt.Errorf("%w: sandbox %s belongs to owner %q", ErrConflict, k, got.Owner)
		}
		sb = got
	}
	// A pooled sandbox's runtime state goes with it, claimed or not
	// (engine.removeSandbox).
	pooled := sb.PoolName
	if pooled == "" && IsPooled(k.session) {
		pooled = k.session
	}
	if err := l.removeSandbox(ctx, sb, pooled); err != nil {
		return err
	}
	if sb.PoolName != "" {
		// The claim goes after the sandbox: a crash in between leaves a
		// claim without a sandbox, which Adopt drops.
		if err := l.cfg.Claims.Release(ctx, k.tenant, sb.PoolName); err != nil {
			l.cfg.Logger.Warn("releasing a claim", "tenant", k.tenant, "session", k.session, "name", sb.PoolName, "err", err)
		}
		l.pools.forget(key{k.tenant, sb.PoolName})
	}
	l.cfg.Logger.Info("sandbox removed", "tenant", k.tenant, "session", k.session, "id", sb.ID)
	return nil
}

// claimLocked puts a removal entry for k in place and returns it. l.mu held.
func (l *lifecycle) claimLocked(k key) *entry {
	r := &entry{busy: make(chan struct{})}
	l.entries[k] = r
	return r
}

// keep ends the removal entry of v, a victim found busy: its sandbox stays
// as it was (its ready entry back, if it had one) and is used now, its use
// recorded where a UseRecorder keeps them, so that its idle time starts
// again.
func (l *lifecycle) keep(v victim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	if l.entries[v.k] == v.r {
		if v.prev != nil {
			l.entries[v.k] = v.prev
			l.used(v.k, v.prev)
		} else {
			delete(l.entries, v.k)
			if _, ok := l.sessions[v.k]; ok {
				l.sessions[v.k] = now
			}
			if l.records != nil {
				// Another process's sandbox: its record says it was used.
				l.records.note(&entry{sb: v.sb}, now)
			}
		}
	}
	close(v.r.busy)
}

// restore ends the removal entry of v, a victim not reaped after all (the
// reaping process stopped leading): its sandbox stays as it was, its ready
// entry back if it had one, its idle time running on.
func (l *lifecycle) restore(v victim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries[v.k] == v.r {
		if v.prev != nil {
			l.entries[v.k] = v.prev
		} else {
			delete(l.entries, v.k)
		}
	}
	close(v.r.busy)
}

// release ends the removal r of k: the session has no sandbox any more,
// and, if ended, is no session either.
func (l *lifecycle) release(k key, r *entry, ended bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries[k] == r {
		delete(l.entries, k)
	}
	if ended {
		delete(l.sessions, k)
	}
	close(r.busy)
}

// adopt makes sb, found at Adopt under its session k (runtime name rk),
// k's sandbox if it is running (kept, returned with LastUsed now), unless
// Ensure got there first (known: the entry is authoritative). A claimed
// pooled sandbox's name is marked in warmPools under l.mu, so that a
// removal, which finds the sandbox through its entry, always finds its
// name marked too and forgets it after (destroy).
func (l *lifecycle) adopt(k, rk key, sb Sandbox) (_ Sandbox, known, kept bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries[k] != nil {
		return sb, true, false
	}
	if sb.State != StateRunning {
		return sb, false, false
	}
	sb.LastUsed = l.cfg.Now()
	l.entries[k] = &entry{sb: sb}
	l.sessions[k] = sb.LastUsed
	if sb.PoolName != "" {
		l.pools.markNamed(rk) // lock order: lifecycle.mu, then warmPools.mu
	}
	return sb, false, true
}

// victim is a session the reaper ends: its sandbox (none: ID empty), how
// long it was idle, and the removal entry that holds the session meanwhile.
type victim struct {
	k    key
	sb   Sandbox
	idle time.Duration
	r    *entry
	// prev is the session's ready entry the removal entry replaced (nil:
	// the sandbox is not this process's), put back if it is kept.
	prev *entry
}

// idle returns the sessions idle for their tenant's TTL at now, each held
// by a removal entry from then on: ready sandboxes, sessions whose sandbox
// is gone, and sandboxes only other processes serve (recorded).
func (l *lifecycle) idle(now time.Time, idleTTL func(tenant string) time.Duration, recorded map[key]Sandbox) []victim {
	var victims []victim
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, e := range l.entries {
		used := lastUse(recorded, k, e.sb.LastUsed)
		if ttl := idleTTL(k.tenant); ttl > 0 && e.busy == nil && now.Sub(used) >= ttl {
			victims = append(victims, victim{k: k, sb: e.sb, idle: now.Sub(used), prev: e})
		}
	}
	// Sessions whose sandbox is gone (died and not replaced yet) end the
	// same way, with their state.
	for k, used := range l.sessions {
		if _, ok := l.entries[k]; ok {
			continue
		}
		used = lastUse(recorded, k, used)
		if ttl := idleTTL(k.tenant); ttl > 0 && now.Sub(used) >= ttl {
			// A sandbox another process made for it meanwhile is judged
			// by its recorded uses (without a recorder it is not ours to
			// judge: see reapOne).
			victims = append(victims, victim{k: k, sb: recorded[k], idle: now.Sub(used)})
		}
	}
	// Sandboxes only other processes serve, by their recorded uses.
	for k, sb := range recorded {
		if _, ok := l.entries[k]; ok {
			continue
		}
		if _, ok := l.sessions[k]; ok {
			continue
		}
		used := lastUse(recorded, k, time.Time{})
		if ttl := idleTTL(k.tenant); ttl > 0 && now.Sub(used) >= ttl {
			victims = append(victims, victim{k: k, sb: sb, idle: now.Sub(used)})
		}
	}
	for i := range victims {
		victims[i].r = l.claimLocked(victims[i].k)
	}
	return victims
}

// keepSession keeps k a live session (now used) if it is not one: its
// sandbox was removed at Adopt, its state stays for the next.
func (l *lifecycle) keepSession(k key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, known := l.sessions[k]; !known {
		l.sessions[k] = l.cfg.Now()
	}
}

// knows reports whether k is a session this Manager serves or handles.
func (l *lifecycle) knows(k key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, known := l.entries[k]
	_, serving := l.sessions[k]
	return known || serving
}
