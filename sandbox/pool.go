package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// PoolPrefix starts the session name of every pooled sandbox (PoolPrefix,
// the template's hash, "-", a random suffix). Sessions may not use it.
const PoolPrefix = "pool@"

// IsPooled reports whether name is a pooled sandbox's session name.
func IsPooled(name string) bool { return strings.HasPrefix(name, PoolPrefix) }

// PoolTarget is one wanted warm pool: Size ready sandboxes of Template.
type PoolTarget struct {
	// Template is the Spec of the pool's sandboxes; its Session and Owner
	// are ignored (the Manager names pooled sandboxes and owns them).
	Template Spec
	// Size is how many unclaimed sandboxes to keep ready.
	Size int
}

// TemplateHash identifies what a sandbox of spec is, whichever session it
// serves: a hash of everything in spec but Session and Owner. A session
// claims a pooled sandbox only of its own Spec's hash.
func TemplateHash(spec Spec) string {
	spec = spec.Clone()
	// Settings are a session's record, not a setting: a session whose
	// options make the template's spec claims from its pool (the pooled
	// sandbox keeps the template's empty record; what the session asked
	// for is what the template has).
	spec.Session, spec.Owner, spec.Settings = "", "", ""
	// Empty and nil are the same setting.
	if len(spec.Env) == 0 {
		spec.Env = nil
	}
	if len(spec.Labels) == 0 {
		spec.Labels = nil
	}
	if len(spec.AgentArgs) == 0 {
		spec.AgentArgs = nil
	}
	if len(spec.Mounts) == 0 {
		spec.Mounts = nil
	}
	// %#v prints every field, and maps in key order.
	sum := sha256.Sum256([]byte(fmt.Sprintf("%#v", spec)))
	return hex.EncodeToString(sum[:8])
}

// poolName returns a fresh pooled session name of template hash h.
func poolName(h string) string {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails (Go 1.24)
	return PoolPrefix + h + "-" + hex.EncodeToString(rnd[:])
}

// poolHash is the template hash in a pooled session name ("" if none).
func poolHash(name string) string {
	rest, ok := strings.CutPrefix(name, PoolPrefix)
	if !ok {
		return ""
	}
	h, _, ok := strings.Cut(rest, "-")
	if !ok {
		return ""
	}
	return h
}

// pool is one warm pool as the Manager keeps it. Guarded by Manager.mu.
type pool struct {
	tenant, hash string
	template     Spec
	// size is the wanted number of ready sandboxes; 0 for a pool no target
	// names (adopted sandboxes before the first Fill), which Fill drains.
	size int
	// ready are claimable sandboxes, oldest first; creating counts
	// creations under way.
	ready    []Sandbox
	creating int
	// filled: a Fill of this Manager named the pool (it keeps the pool's
	// size). A pool only found (Adopt, syncPooled) is another process's
	// to fill and drain: a sandbox put back is kept.
	filled bool
}

// syncEvery bounds how often a claim that finds no ready sandbox looks for
// pooled sandboxes another process made. A claim that finds none while a
// look is under way waits for its outcome: in a burst of new sessions on a
// process that does not fill the pools (a replica that is not the elected
// one) all but the first claim would otherwise start cold while the first
// one lists what the filler made.
const syncEvery = time.Second

func poolKey(tenant, hash string) string { return tenant + "/" + hash }

// PoolStatus is one pool's state (Pools).
type PoolStatus struct {
	Tenant, Hash    string
	Size            int
	Ready, Creating int
}

// Pools reports the warm pools the Manager keeps.
func (m *Manager) Pools() []PoolStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []PoolStatus
	for _, p := range m.pools {
		out = append(out, PoolStatus{Tenant: p.tenant, Hash: p.hash, Size: p.size, Ready: len(p.ready), Creating: p.creating})
	}
	return out
}

// Admission reports the sandboxes being created now and the creations
// waiting for a slot.
func (m *Manager) Admission() (creating, queued int) {
	m.adm.mu.Lock()
	defer m.adm.mu.Unlock()
	return len(m.adm.slots), m.adm.queued
}

// FillReport says what one Fill did.
type FillReport struct {
	// Created and Removed are pooled sandboxes made ready and removed
	// (drained: their template is no longer wanted, or the pool shrank).
	Created, Removed int
	// Claimed are sandboxes Fill would have removed but found claimed by
	// a session meanwhile (by another process), and left to it.
	Claimed int
	// Missing is how many ready sandboxes the pools still lack (no
	// creation slot was free, or creations failed).
	Missing int
}

// Fill makes the pools match targets, once: it removes the ready sandboxes
// of templates no target names any more (a template change rolls its pool)
// and of pools larger than wanted, and creates missing ones, as many at a
// time as creation slots are free while no session waits for one. It
// returns when its creations have ended. Creations and removals run under
// Config.CreateTimeout / RemoveTimeout whatever ctx does. Without Claims
// (Config.Claims) pools cannot be claimed, so Fill refuses non-empty
// targets.
func (m *Manager) Fill(ctx context.Context, targets []PoolTarget) (FillReport, error) {
	var rep FillReport
	want := map[string]PoolTarget{}
	for _, t := range targets {
		if t.Size <= 0 {
			continue
		}
		if m.cfg.Claims == nil {
			return rep, fmt.Errorf("%w: warm pools need a claims store (Config.Claims)", ErrInvalid)
		}
		spec := t.Template.Clone()
		spec.Session, spec.Owner = PoolPrefix+"template", m.cfg.Owner
		if err := spec.Validate(); err != nil {
			return rep, fmt.Errorf("pool of tenant %s: %w", spec.Tenant, err)
		}
		t.Template = spec
		want[poolKey(spec.Tenant, TemplateHash(spec))] = t
	}

	if len(want) > 0 || len(m.Pools()) > 0 {
		// Claims by other processes since the last pass leave the pools,
		// so they are counted short and refilled.
		if err := m.syncPooled(ctx); err != nil {
			m.cfg.Logger.Warn("listing pooled sandboxes", "err", err)
		}
	}
	var victims []Sandbox
	type job struct {
		p    *pool
		spec Spec
	}
	var jobs []job
	m.mu.Lock()
	for k, p := range m.pools {
		t, ok := want[k]
		size := 0
		if ok {
			size = t.Size
		}
		p.size, p.filled = size, true
		if n := len(p.ready) - size; n > 0 {
			// The newest go first: the oldest have waited longest to be
			// used, and are the same template.
			for _, sb := range p.ready[len(p.ready)-n:] {
				victims = append(victims, sb)
				m.pooledChanged(key{sb.Tenant, sb.Session})
			}
			p.ready = p.ready[:len(p.ready)-n]
		}
		if !ok && p.creating == 0 {
			delete(m.pools, k)
		}
	}
	for k, t := range want {
		p := m.pools[k]
		if p == nil {
			p = &pool{tenant: t.Template.Tenant, hash: TemplateHash(t.Template), size: t.Size, filled: true}
			m.pools[k] = p
		}
		p.template = t.Template // adopted pools have none yet
		// Counted as creating at once, so a concurrent Fill does not
		// plan the same sandboxes.
		for range p.size - len(p.ready) - p.creating {
			jobs = append(jobs, job{p, p.template})
			p.creating++
		}
	}
	m.mu.Unlock()

	for _, sb := range victims {
		err := m.removePooled(ctx, sb, "pool drained")
		switch {
		case errors.Is(err, ErrAlreadyExists):
			// Claimed by another process since it was listed ready: a
			// session's now, left alone (removePooled logged it).
			rep.Claimed++
		case err != nil:
			m.cfg.Logger.Warn("removing pooled sandbox", "tenant", sb.Tenant, "name", sb.Session, "err", err)
		default:
			rep.Removed++
		}
	}

	var errs []error
	done := make(chan error)
	started := 0
	for i, j := range jobs {
		release, ok := m.adm.tryAcquire()
		if !ok {
			m.mu.Lock()
			for _, j := range jobs[i:] {
				j.p.creating--
			}
			m.mu.Unlock()
			break
		}
		spec := j.spec.Clone()
		spec.Session = poolName(j.p.hash)
		m.mu.Lock()
		m.named[key{spec.Tenant, spec.Session}] = true
		m.pooledChanged(key{spec.Tenant, spec.Session})
		m.mu.Unlock()
		started++
		go func() {
			err := m.createPooled(ctx, j.p, spec)
			release() // before Fill returns: its slot is free then
			done <- err
		}()
	}
	for range started {
		if err := <-done; err != nil {
			errs = append(errs, err)
		} else {
			rep.Created++
		}
	}

	m.mu.Lock()
	for _, p := range m.pools {
		rep.Missing += max(p.size-len(p.ready)-p.creating, 0)
	}
	m.mu.Unlock()
	return rep, errors.Join(errs...)
}

// FillEvery runs Fill with targets() at once, then every interval, at once
// again after a claim (a session took a ready sandbox) and while a pass
// made progress but left some missing, until ctx ends. It logs failures.
// On Kubernetes, only the elected replica is to run it.
func (m *Manager) FillEvery(ctx context.Context, targets func() []PoolTarget, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rep, err := m.Fill(ctx, targets())
		if err != nil {
			m.cfg.Logger.Warn("filling warm pools", "err", err)
		}
		if rep.Missing > 0 && rep.Created > 0 && ctx.Err() == nil {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
}

// createPooled creates one sandbox of p, whose name spec.Session is in
// m.named already, and makes it ready to claim (or removes it if p no
// longer wants it).
func (m *Manager) createPooled(parent context.Context, p *pool, spec Spec) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), m.cfg.CreateTimeout)
	defer cancel()
	sb, err := m.cfg.Runtime.Create(ctx, spec)
	if err == nil {
		err = m.ready(ctx, sb)
		if err == nil && m.cfg.Prepare != nil {
			err = m.cfg.Prepare(ctx, sb)
		}
		if err != nil {
			err = m.discard(ctx, sb, err)
		}
	}
	m.mu.Lock()
	p.creating--
	m.pooledChanged(key{spec.Tenant, spec.Session})
	if err != nil {
		delete(m.named, key{spec.Tenant, spec.Session})
		m.mu.Unlock()
		return fmt.Errorf("pooled sandbox of tenant %s: %w", spec.Tenant, err)
	}
	keep := m.pools[poolKey(p.tenant, p.hash)] == p && len(p.ready) < p.size
	if keep {
		p.ready = append(p.ready, sb)
	}
	if m.pools[poolKey(p.tenant, p.hash)] == p && p.size == 0 && p.creating == 0 && len(p.ready) == 0 {
		delete(m.pools, poolKey(p.tenant, p.hash))
	}
	m.mu.Unlock()
	if !keep {
		if err := m.removePooled(ctx, sb, "pool drained"); err != nil && !errors.Is(err, ErrAlreadyExists) {
			return err
		}
		return nil
	}
	m.cfg.Logger.Info("pooled sandbox created", "tenant", sb.Tenant, "name", sb.Session, "id", sb.ID)
	return nil
}

// removePooled removes an unclaimed pooled sandbox: it retires it first
// (Claims.Retire), so that a sandbox another process claimed since this
// one listed it as ready is never removed: then Retire says
// ErrAlreadyExists and the sandbox is left to its session, not counted
// here any more.
func (m *Manager) removePooled(ctx context.Context, sb Sandbox, reason string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.RemoveTimeout)
	defer cancel()
	if m.cfg.Claims != nil {
		if err := m.cfg.Claims.Retire(rctx, sb.Tenant, sb.Session); err != nil {
			if errors.Is(err, ErrAlreadyExists) {
				m.cfg.Logger.Info("pooled sandbox claimed meanwhile: not removed", "reason", reason, "tenant", sb.Tenant, "name", sb.Session, "id", sb.ID)
			}
			return fmt.Errorf("removing pooled sandbox %s/%s: %w", sb.Tenant, sb.Session, err)
		}
	}
	if err := m.cfg.Runtime.Remove(rctx, sb.ID); err != nil {
		return err
	}
	if m.cfg.Claims != nil {
		// The retirement goes after the sandbox: a crash in between leaves
		// a retired sandbox, which Adopt removes.
		if err := m.cfg.Claims.Release(rctx, sb.Tenant, sb.Session); err != nil {
			m.cfg.Logger.Warn("releasing a retired pooled sandbox", "tenant", sb.Tenant, "name", sb.Session, "err", err)
		}
	}
	m.mu.Lock()
	delete(m.named, key{sb.Tenant, sb.Session})
	m.pooledChanged(key{sb.Tenant, sb.Session})
	m.mu.Unlock()
	m.cfg.Logger.Info("pooled sandbox removed", "reason", reason, "tenant", sb.Tenant, "name", sb.Session, "id", sb.ID)
	return nil
}

// claim gives spec's session a ready pooled sandbox of its template, if
// there is one: the claim is recorded (Claims) before the sandbox is
// handed out, and its agent checked. If the session holds another pooled
// sandbox already (another process claimed it for the session's first
// call at the same moment: Claims.Claim says which), that one is the
// session's and the one picked here goes back to its pool. false: none,
// the session gets a cold start. An error: the session holds a claimed
// sandbox this Manager cannot get, and must not get a second one.
func (m *Manager) claim(ctx context.Context, spec Spec) (Sandbox, bool, error) {
	if m.cfg.Claims == nil {
		return Sandbox{}, false, nil
	}
	k := poolKey(spec.Tenant, TemplateHash(spec))
	// putBack returns an unclaimed sandbox to p if p still wants it, and
	// removes it otherwise.
	putBack := func(p *pool, sb Sandbox) {
		m.mu.Lock()
		back := m.pools[k] == p && (!p.filled || len(p.ready) < p.size)
		if back {
			p.ready = append([]Sandbox{sb}, p.ready...)
			m.pooledChanged(key{sb.Tenant, sb.Session})
		}
		m.mu.Unlock()
		if !back {
			if err := m.removePooled(ctx, sb, "pool drained"); err != nil && !errors.Is(err, ErrAlreadyExists) {
				m.cfg.Logger.Warn("removing pooled sandbox", "tenant", sb.Tenant, "name", sb.Session, "err", err)
			}
		}
	}
	stale := 0
	synced := false
	took := false // a ready sandbox was taken: the pool is refilled once the claim ends
	for {
		m.mu.Lock()
		p := m.pools[k]
		if (p == nil || len(p.ready) == 0) && !synced {
			// Another process (the elected filler) may have made some
			// since this one last looked: wait for a look under way
			// (another claim's, a Fill pass's), or look now unless the
			// last look began within syncEvery.
			wait := m.syncing
			if wait != nil || time.Since(m.lastSync) >= syncEvery {
				m.mu.Unlock()
				synced = true
				if wait != nil {
					select {
					case <-wait:
					case <-ctx.Done():
						return Sandbox{}, false, fmt.Errorf("%w: %s/%s: waiting for the list of pooled sandboxes: %w", ErrUnavailable, spec.Tenant, spec.Session, ctx.Err())
					}
				} else if err := m.syncPooled(ctx); err != nil {
					m.cfg.Logger.Warn("listing pooled sandboxes", "err", err)
				}
				continue
			}
		}
		if p == nil || len(p.ready) == 0 {
			m.mu.Unlock()
			return Sandbox{}, false, nil
		}
		sb := p.ready[0]
		p.ready = p.ready[1:]
		m.pooledChanged(key{sb.Tenant, sb.Session})
		m.mu.Unlock()
		if !took {
			took = true
			defer m.kickFill()
		}

		pooled := sb.Session
		held, err := m.cfg.Claims.Claim(ctx, spec.Tenant, pooled, spec.Session)
		if errors.Is(err, ErrAlreadyExists) || errors.Is(err, ErrNotFound) {
			// Another process claimed it (it is that session's now), or
			// retired or removed it: not ours to hand out, nor to know.
			m.cfg.Logger.Info("pooled sandbox claimed or removed elsewhere", "tenant", spec.Tenant, "name", pooled, "err", err)
			m.mu.Lock()
			delete(m.named, key{spec.Tenant, pooled})
			m.pooledChanged(key{spec.Tenant, pooled})
			m.mu.Unlock()
			continue
		}
		if err != nil {
			// Unclaimed still: back to its pool if the pool still wants
			// it, and a cold start.
			m.cfg.Logger.Warn("claiming a pooled sandbox", "tenant", spec.Tenant, "session", spec.Session, "err", err)
			putBack(p, sb)
			return Sandbox{}, false, nil
		}
		if held == spec.Session {
			// Another process is starting (or started) the session cold
			// (ColdStarts): that sandbox is the session's.
			m.cfg.Logger.Info("session started cold elsewhere", "tenant", spec.Tenant, "session", spec.Session, "unused", pooled)
			putBack(p, sb)
			return Sandbox{}, false, errColdElsewhere
		}
		if held != pooled {
			// The session's first calls reached another process too, which
			// claimed held for it an instant before: that one is the
			// session's, and sb was left unclaimed.
			m.cfg.Logger.Info("session claimed another pooled sandbox elsewhere", "tenant", spec.Tenant, "session", spec.Session, "name", held, "unused", pooled)
			putBack(p, sb)
			got, err := m.heldSandbox(ctx, spec, held)
			if errors.Is(err, ErrNotFound) && stale < 3 {
				// Its sandbox is gone and the claim left (a crash between
				// the two): drop it and claim again.
				stale++
				if err := m.cfg.Claims.Release(ctx, spec.Tenant, held); err != nil {
					return Sandbox{}, false, err
				}
				continue
			}
			if err != nil {
				return Sandbox{}, false, err
			}
			sb = got
		}
		sb.PoolName, sb.Session = held, spec.Session
		if err := m.ready(ctx, sb); err != nil && held != pooled {
			// Another process handed it to the session: not ours to
			// replace.
			return Sandbox{}, false, err
		} else if err != nil {
			m.cfg.Logger.Warn("claimed pooled sandbox not ready", "tenant", spec.Tenant, "session", spec.Session, "name", held, "err", err)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.RemoveTimeout)
			if err := m.destroy(rctx, key{spec.Tenant, spec.Session}, sb); err != nil {
				m.cfg.Logger.Warn("removing pooled sandbox", "tenant", spec.Tenant, "name", held, "err", err)
			}
			cancel()
			continue
		}
		m.cfg.Logger.Info("sandbox claimed from pool", "tenant", spec.Tenant, "session", spec.Session, "name", held, "id", sb.ID)
		return sb, true, nil
	}
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
func (m *Manager) syncPooled(ctx context.Context) error {
	if m.cfg.Claims == nil {
		return nil
	}
	s := &poolSync{changed: map[key]bool{}}
	done := make(chan struct{})
	m.mu.Lock()
	m.lastSync = time.Now()
	m.syncs[s] = struct{}{}
	m.syncing = done
	m.mu.Unlock()
	list, claimed, err := m.listClaimed(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	// Those waiting see the ready lists this pass leaves (m.mu is released
	// after the lists are updated).
	defer close(done)
	if m.syncing == done {
		m.syncing = nil
	}
	delete(m.syncs, s)
	if err != nil {
		return err
	}
	free := map[key]Sandbox{}
	for _, sb := range list {
		k := key{sb.Tenant, sb.Session}
		// A claim names it when it is claimed or retired.
		if _, taken := claimed[k]; !taken && IsPooled(sb.Session) && poolHash(sb.Session) != "" && sb.State == StateRunning && CheckID("tenant", sb.Tenant) == nil {
			free[k] = sb
		}
	}
	listed := map[key]bool{}
	for _, p := range m.pools {
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
				delete(m.named, k) // another's now, or gone
				m.pooledChanged(k)
			}
		}
		clear(p.ready[len(kept):])
		p.ready = kept
	}
	for k, sb := range free {
		if listed[k] || m.named[k] || s.changed[k] {
			continue
		}
		pk := poolKey(sb.Tenant, poolHash(sb.Session))
		p := m.pools[pk]
		if p == nil {
			p = &pool{tenant: sb.Tenant, hash: poolHash(sb.Session)}
			m.pools[pk] = p
		}
		p.ready = append(p.ready, sb)
		m.named[k] = true
		m.pooledChanged(k)
	}
	return nil
}

// poolSync is one syncPooled pass under way (Manager.syncs). changed are
// the pooled sandboxes (tenant, runtime name) whose ready or named state
// this Manager changed since the pass registered, before it listed: the
// pass's list may predate those changes, so it leaves them be. A pass
// notes at most every pooled sandbox once.
type poolSync struct{ changed map[key]bool }

// pooledChanged notes, for every syncPooled pass under way, that this
// Manager changed k's ready or named state (see syncPooled); m.mu is held.
// Every change of a ready list or of named goes through it.
func (m *Manager) pooledChanged(k key) {
	for s := range m.syncs {
		s.changed[k] = true
	}
}

// kickFill wakes FillEvery, without waiting.
func (m *Manager) kickFill() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}
