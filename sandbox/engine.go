package sandbox

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// engine is the runtime and the claims store as every owner of the
// Manager (lifecycle, warmPools, reaper) calls them. It holds only the
// Manager's completed Config, never changed after NewManager, so it needs
// no lock; the owners embed one shared engine.
type engine struct {
	cfg Config
}

// list is Manager.List.
func (g *engine) list(ctx context.Context) ([]Sandbox, error) {
	list, claimed, err := g.listClaimedAtOnce(ctx)
	if err != nil {
		return nil, err
	}
	out := list[:0]
	for _, sb := range list {
		if IsPooled(sb.Session) {
			s, ok := claimed[key{sb.Tenant, sb.Session}]
			if !ok || s == "" { // unclaimed, or retired
				continue
			}
			sb.PoolName, sb.Session = sb.Session, s
		}
		out = append(out, sb)
	}
	return out, nil
}

// listClaimedAtOnce is listClaimed with the two lists read at the same
// time, for List: a count or a listing for a caller, where a sandbox
// claimed between the two reads may show up unclaimed (and be left out),
// not for Adopt or a pool's sync, which act on what they read.
func (g *engine) listClaimedAtOnce(ctx context.Context) ([]Sandbox, map[key]string, error) {
	if g.cfg.Claims == nil {
		return g.listClaimed(ctx)
	}
	var list []Sandbox
	var cs []Claim
	eg, gctx := errgroup.WithContext(ctx)
	eg.Go(func() (err error) { list, err = g.cfg.Runtime.List(gctx, g.cfg.Owner); return err })
	eg.Go(func() (err error) { cs, err = g.cfg.Claims.List(gctx); return err })
	if err := eg.Wait(); err != nil {
		return nil, nil, err
	}
	return list, claimedBy(cs), nil
}

// claimedBy maps claims' runtime names (tenant, pooled) to their sessions.
func claimedBy(cs []Claim) map[key]string {
	claimed := map[key]string{}
	for _, c := range cs {
		claimed[key{c.Tenant, c.Pooled}] = c.Session
	}
	return claimed
}

// listClaimed lists this owner's sandboxes on the runtime, then the claims:
// the runtime names (tenant, pooled) of claimed sandboxes mapped to their
// sessions, "" for a retired one (none without Claims). List, Adopt and
// syncPooled (each Fill pass) all start from it.
func (g *engine) listClaimed(ctx context.Context) ([]Sandbox, map[key]string, error) {
	list, err := g.cfg.Runtime.List(ctx, g.cfg.Owner)
	if err != nil {
		return nil, nil, err
	}
	if g.cfg.Claims == nil {
		return list, map[key]string{}, nil
	}
	cs, err := g.cfg.Claims.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	return list, claimedBy(cs), nil
}

// get is Runtime.Get of a session, which may be a claimed pooled sandbox.
// With Claims, the session's own sandbox is read while the claims are
// looked up, not after: a new session's first call needs both answers
// (neither has it), and on Kubernetes each is an API round trip.
func (g *engine) get(ctx context.Context, tenant, session string) (Sandbox, error) {
	if g.cfg.Claims == nil {
		return g.cfg.Runtime.Get(ctx, tenant, session)
	}
	type got struct {
		sb  Sandbox
		err error
	}
	own := make(chan got, 1) // buffered: never blocks the reader if not waited for
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		sb, err := g.cfg.Runtime.Get(octx, tenant, session)
		own <- got{sb, err}
	}()
	pooled, err := g.cfg.Claims.Lookup(ctx, tenant, session)
	switch {
	case err == nil:
		cancel() // the session is the pooled sandbox: its own is not read
		sb, err := g.cfg.Runtime.Get(ctx, tenant, pooled)
		if err != nil {
			return Sandbox{}, err
		}
		sb.PoolName, sb.Session = pooled, session
		return sb, nil
	case !errors.Is(err, ErrNotFound):
		return Sandbox{}, err
	}
	r := <-own
	return r.sb, r.err
}

// checkSession checks a tenant and a session named by a caller: pooled
// names are the Manager's.
func checkSession(tenant, session string) error {
	if err := CheckID("tenant", tenant); err != nil {
		return err
	}
	if err := CheckID("session", session); err != nil {
		return err
	}
	if IsPooled(session) {
		return fmt.Errorf("%w: session %q: names starting with %q are reserved for warm pools", ErrInvalid, session, PoolPrefix)
	}
	return nil
}

// beingCreated reports whether sb, not running, may still be being created
// (perhaps by another process sharing the runtime): pending, and younger
// than a creation may take.
func (g *engine) beingCreated(sb Sandbox) bool {
	return sb.State == StateCreated && !sb.Created.IsZero() && g.cfg.Now().Sub(sb.Created) < g.cfg.CreateTimeout
}

// shared reports whether other processes may serve this Manager's
// sessions' calls at the same time (Kubernetes replicas: the Claims have
// ColdStarts). Only then is a pending sandbox of a session this Manager
// is not creating another's creation under way; on one host it is what a
// crash left, replaced at once.
func (g *engine) shared() bool {
	_, ok := g.cfg.Claims.(ColdStarts)
	return ok
}

func (g *engine) ready(ctx context.Context, sb Sandbox) error {
	if g.cfg.Ready == nil {
		return nil
	}
	if err := g.cfg.Ready(ctx, sb); err != nil {
		return fmt.Errorf("%w: sandbox %s/%s not ready: %w", ErrUnavailable, sb.Tenant, sb.Session, err)
	}
	return nil
}

// discard removes a sandbox that failed after creation and returns cause.
func (g *engine) discard(ctx context.Context, sb Sandbox, cause error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.RemoveTimeout)
	defer cancel()
	if err := g.removeSandbox(rctx, sb, pooledName(sb)); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// removeSandbox is the one way every owner removes a sandbox from the runtime:
// Runtime.Remove, then, for a pooled sandbox (pooled: its pooled name,
// claimed or not), what the runtime keeps under that name
// (SessionState: on docker and containerd the host tmpfs of its
// workspace). No later sandbox takes a pooled name, so that state is the
// sandbox's alone, and would otherwise stay (host memory held) until a
// server start's sweep. A session that claimed one therefore starts its
// next sandbox with an empty workspace. The state's removal failing is
// logged, not returned: the sandbox is gone, and the sweep of the next
// Adopt retries (the name is no longer known).
func (g *engine) removeSandbox(ctx context.Context, sb Sandbox, pooled string) error {
	rt := g.cfg.Runtime
	if err := rt.Remove(ctx, sb.ID); err != nil {
		return err
	}
	if ss, ok := rt.(SessionState); ok && pooled != "" {
		if _, err := ss.RemoveSession(ctx, sb.Tenant, pooled); err != nil {
			g.cfg.Logger.Warn("removing a pooled sandbox's state", "tenant", sb.Tenant, "name", pooled, "err", err)
		}
	}
	return nil
}

// pooledName is sb's pooled name: PoolName once claimed, else its session
// if that is one; "" for a session's own sandbox.
func pooledName(sb Sandbox) string {
	if sb.PoolName != "" || !IsPooled(sb.Session) {
		return sb.PoolName
	}
	return sb.Session
}
