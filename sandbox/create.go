package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is the lifecycle's creation of a session's sandbox: take over
// the one the runtime has, claim a pooled one (warmPools.claim), or start
// one cold under admission.

// complete fills the Manager's part of spec and validates it.
func (l *lifecycle) complete(spec Spec) (Spec, error) {
	spec = spec.Clone()
	if err := checkSession(spec.Tenant, spec.Session); err != nil {
		return Spec{}, err
	}
	spec.Owner = l.cfg.Owner
	if err := spec.Validate(); err != nil {
		return Spec{}, err
	}
	return spec, nil
}

// create runs one creation for e, detached from the caller's cancellation:
// its queue's wait for a creation slot (CreateQueueWait at most) and the
// creation from its slot (CreateTimeout, createCold) are bounded apart, so
// a creation admitted late still has its whole CreateTimeout; the sum
// bounds the rest (a take-over, a claim, another process's creation).
func (l *lifecycle) create(parent context.Context, k key, e *entry, spec Spec) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), l.cfg.CreateQueueWait+l.cfg.CreateTimeout)
	defer cancel()
	sb, err := l.createOrTakeOver(ctx, spec)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		delete(l.entries, k)
		e.err = err
	} else {
		sb.LastUsed = l.cfg.Now()
		e.sb = sb
		l.sessions[k] = sb.LastUsed
	}
	close(e.busy)
	e.busy = nil
}

// errOtherCreating says that another process is creating the session's
// sandbox (Kubernetes replicas serving its first calls at once): wait for
// that one. It never leaves createOrTakeOver.
var errOtherCreating = errors.New("sandbox: being created by another process")

// errColdElsewhere is errOtherCreating for a session whose claim lock
// names a cold start (ColdStarts) that has no running sandbox yet.
var errColdElsewhere = fmt.Errorf("%w: its claim lock names a cold start under way", errOtherCreating)

// otherCreatingPoll is how soon createOrTakeOver looks again for a
// sandbox another process is creating; each look doubles it, up to
// otherCreatingPollMax (each look is several API requests on Kubernetes).
const (
	otherCreatingPoll    = 250 * time.Millisecond
	otherCreatingPollMax = 2 * time.Second
)

// createOrTakeOver returns the session's sandbox: the running one the
// runtime has, a claimed pooled one, or a new one. While another process
// is creating it (with ColdStarts: a pending sandbox younger than
// CreateTimeout, or a cold start that Claim or Cold reports), it waits for
// that one, looking again after otherCreatingPoll and less often after
// that, until ctx ends: the session must not get a second sandbox, and the
// other's must not be removed as dead.
func (l *lifecycle) createOrTakeOver(ctx context.Context, spec Spec) (Sandbox, error) {
	for wait := otherCreatingPoll; ; wait = min(2*wait, otherCreatingPollMax) {
		sb, err := l.createOnce(ctx, spec)
		if !errors.Is(err, errOtherCreating) {
			return sb, err
		}
		select {
		case <-ctx.Done():
			// What this process last saw of the other's creation is
			// all it knows of why it is not done (its own error is in
			// that server's log).
			return Sandbox{}, fmt.Errorf("%w: the sandbox of %s/%s is being created by another server, and was not ready when this creation's time ran out (last look: %v): %w",
				ErrUnavailable, spec.Tenant, spec.Session, err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// createOnce is one look of createOrTakeOver: the sandbox the runtime has
// for the session if it is running, else a claimed pooled one, else a
// cold start.
func (l *lifecycle) createOnce(ctx context.Context, spec Spec) (Sandbox, error) {
	if sb, ok, err := l.takeOver(ctx, spec); err != nil || ok {
		if err == nil && l.cfg.Resume != nil {
			// Kept on failure: a sandbox that ran may hold the
			// session's only copy of its files.
			err = l.cfg.Resume(ctx, sb)
		}
		return sb, err
	}
	sb, ok, err := l.pools.claim(ctx, spec)
	if err != nil {
		return Sandbox{}, err
	}
	if !ok {
		if sb, err = l.createCold(ctx, spec); err != nil {
			return Sandbox{}, err
		}
	}
	if l.cfg.Resume != nil {
		if err := l.cfg.Resume(ctx, sb); err != nil {
			return Sandbox{}, l.discard(ctx, sb, err)
		}
	}
	return sb, nil
}

// takeOver returns the session's running sandbox the runtime has, if it is
// this owner's and ready (ok). One that is not running is removed (ok
// false: the session needs a new one) unless another process may be
// creating it (errOtherCreating).
func (l *lifecycle) takeOver(ctx context.Context, spec Spec) (_ Sandbox, ok bool, _ error) {
	old, err := Sandbox{}, ErrNotFound // as Inspect found it a moment ago
	if !l.tookAbsent(key{spec.Tenant, spec.Session}) {
		old, err = l.get(ctx, spec.Tenant, spec.Session)
	}
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return Sandbox{}, false, err
	case old.Owner != l.cfg.Owner:
		return Sandbox{}, false, fmt.Errorf("%w: sandbox %s/%s belongs to owner %q", ErrConflict, spec.Tenant, spec.Session, old.Owner)
	case old.State == StateRunning:
		if err := l.ready(ctx, old); err != nil {
			return Sandbox{}, false, l.discard(ctx, old, err)
		}
		l.cfg.Logger.Info("sandbox adopted", "tenant", spec.Tenant, "session", spec.Session, "id", old.ID)
		return old, true, nil
	case l.beingCreated(old) && l.shared():
		return Sandbox{}, false, fmt.Errorf("%w: sandbox %s is %s, made %s ago", errOtherCreating, old.ID, old.State, l.cfg.Now().Sub(old.Created).Round(time.Second))
	default:
		if err := l.destroy(ctx, key{spec.Tenant, spec.Session}, old); err != nil {
			return Sandbox{}, false, err
		}
		l.cfg.Logger.Info("sandbox removed", "reason", "replacing: "+string(old.State), "tenant", spec.Tenant, "session", spec.Session, "id", old.ID)
	}
	return Sandbox{}, false, nil
}

// createCold creates the session's sandbox, once admitted (a creation
// slot), and, with ColdStarts, with the session's cold start reserved:
// from a saved image if Config.Restore makes one, else by Create.
func (l *lifecycle) createCold(ctx context.Context, spec Spec) (Sandbox, error) {
	release, err := l.adm.acquire(ctx)
	if err != nil {
		return Sandbox{}, err
	}
	defer release()
	// CreateTimeout from the slot, not from the queue: a creation that
	// waited its turn is not left seconds to make its sandbox.
	ctx, cancel := context.WithTimeout(ctx, l.cfg.CreateTimeout)
	defer cancel()
	var settle func() error // the cold start's reservation, until settled
	if cs, ok := l.cfg.Claims.(ColdStarts); ok {
		// Reserved once admitted: the reservation lasts what Create
		// takes, not a queue's wait too.
		held, done, err := cs.Cold(ctx, spec.Tenant, spec.Session)
		switch {
		case err != nil:
			return Sandbox{}, err
		case held == spec.Session:
			return Sandbox{}, errColdElsewhere
		case held != "":
			return l.claimedElsewhere(ctx, spec, held)
		}
		settle = done
		defer func() {
			if settle != nil {
				_ = settle() // failed: no sandbox, the reservation goes
			}
		}()
	}
	made := "sandbox created"
	sb, restored := Sandbox{}, false
	if l.cfg.Restore != nil {
		sb, restored = l.cfg.Restore(ctx, spec)
	}
	if restored {
		made = "sandbox restored"
	} else {
		var err error
		if sb, err = l.cfg.Runtime.Create(ctx, spec); err != nil {
			return Sandbox{}, err
		}
	}
	if err := l.ready(ctx, sb); err != nil {
		return Sandbox{}, l.discard(ctx, sb, err)
	}
	if settle != nil {
		done := settle
		settle = nil
		if err := l.settleCold(ctx, spec, sb, done); err != nil {
			return Sandbox{}, err
		}
	}
	l.cfg.Logger.Info(made, "tenant", spec.Tenant, "session", spec.Session, "id", sb.ID, "runtime", sb.Runtime)
	return sb, nil
}

// settleCold settles the cold start's reservation of sb, made and ready:
// an error if the session claimed a pooled sandbox meanwhile (sb is then
// removed).
func (l *lifecycle) settleCold(ctx context.Context, spec Spec, sb Sandbox, done func() error) error {
	switch err := done(); {
	case errors.Is(err, ErrAlreadyExists):
		// The reservation was judged dead and taken over: the session
		// claimed a pooled sandbox meanwhile, which is its sandbox.
		l.cfg.Logger.Warn("sandbox removed", "reason", "created cold while the session claimed a pooled sandbox elsewhere", "tenant", spec.Tenant, "session", spec.Session, "id", sb.ID, "err", err)
		return l.discard(ctx, sb, fmt.Errorf("%w: the session claimed a pooled sandbox elsewhere while this server started it cold", errOtherCreating))
	case err != nil:
		// Unsettled, still standing while the sandbox exists.
		l.cfg.Logger.Warn("settling a cold start's reservation", "tenant", spec.Tenant, "session", spec.Session, "id", sb.ID, "err", err)
	}
	return nil
}

// claimedElsewhere returns the pooled sandbox held that another process
// claimed for spec's session while this one was about to start it cold.
func (l *lifecycle) claimedElsewhere(ctx context.Context, spec Spec, held string) (Sandbox, error) {
	sb, err := l.pools.heldSandbox(ctx, spec, held)
	if errors.Is(err, ErrNotFound) {
		// Gone since: the claim is stale, which the next look clears.
		return Sandbox{}, fmt.Errorf("%w: the pooled sandbox %s claimed for it is gone", errOtherCreating, held)
	}
	if err != nil {
		return Sandbox{}, err
	}
	if err := l.ready(ctx, sb); err != nil {
		// Another process handed it to the session: not ours to replace.
		return Sandbox{}, err
	}
	l.cfg.Logger.Info("session claimed a pooled sandbox elsewhere", "tenant", spec.Tenant, "session", spec.Session, "name", held, "id", sb.ID)
	return sb, nil
}
