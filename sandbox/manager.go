package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Config configures a Manager.
type Config struct {
	// Runtime is the backend. Required.
	Runtime Runtime
	// Owner labels every sandbox this Manager creates; Adopt and Reap touch
	// only sandboxes of this owner, so servers sharing an engine never remove
	// each other's. Required; stable across restarts of the same server.
	Owner string
	// Ready, if set, is called after a sandbox is created (and when a running
	// one is adopted by Ensure) and must return once the agent accepts
	// connections, e.g. by dialling Sandbox.Agent with retries. A sandbox
	// that does not become ready is removed and Ensure fails.
	Ready func(ctx context.Context, sb Sandbox) error
	// CreateTimeout bounds creating a sandbox and waiting for Ready
	// (default 2 minutes), from the moment the creation has its slot
	// (Admission): a wait in the queue is CreateQueueWait's.
	CreateTimeout time.Duration
	// RemoveTimeout bounds removing one (default 1 minute).
	RemoveTimeout time.Duration
	// Logger receives one line per sandbox created, adopted or removed
	// (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now); tests replace it.
	Now func() time.Time

	// Busy, if set, is asked by the idle reaper about a sandbox whose
	// session is idle for its TTL, before removing it: a reason ("1
	// command running") keeps the sandbox, and the session counts as used
	// at that moment, so its idle time starts when its work ends, not at
	// its last call. A background task, a call longer than the TTL or an
	// open egress connection keeps a session alive whichever process
	// started it. An error (the agent does not answer) reaps it as idle.
	// It is bounded by BusyTimeout (default DefaultBusyTimeout).
	Busy        func(ctx context.Context, sb Sandbox) (string, error)
	BusyTimeout time.Duration

	// Suspend, if set, makes an idle session suspended rather than ended:
	// the reaper calls it with the sandbox of a session idle for its TTL
	// and not busy, and Manager.Suspend with the sandbox it suspends, to
	// save what the session resumes from (the session layer streams the
	// workspace to a snapshot store). When it returns nil the sandbox and
	// the session's runtime state go, as when the session ends; an error
	// keeps both as they were (the session stays running, its idle time
	// starting again). It runs under SuspendTimeout (default
	// DefaultSuspendTimeout), and while it runs the session's calls wait.
	Suspend        func(ctx context.Context, sb Sandbox) error
	SuspendTimeout time.Duration
	// Resume, if set, is called with each sandbox a session is handed by
	// a creation (new, claimed from a pool, or a running one taken over),
	// once it is ready and before the first call gets it: the session
	// layer restores a suspended session's workspace there. An error
	// fails the creation: a new sandbox is removed, a taken-over one kept
	// (it may hold the session's only copy of its files).
	Resume func(ctx context.Context, sb Sandbox) error
	// Restore, if set, is asked first to make a session's sandbox when
	// one is started cold (not taken over, not claimed from a pool),
	// under the same admission: it returns one it made from a saved
	// image (ok: a memory resume, which is then the session's one
	// sandbox, ready as Create's is checked, then handed to Resume), or
	// ok false, having made nothing, and the sandbox is made by
	// Runtime.Create. It never fails a creation: what it could not do it
	// leaves to Create and Resume (the session layer says why).
	Restore func(ctx context.Context, spec Spec) (sb Sandbox, ok bool)
	// Restorable, if set, says whether Restore is to make spec's
	// session's sandbox from a saved image: such a session is not handed
	// a pooled sandbox (one already running a fresh process tree, which
	// no image goes into) but started cold, where Restore is asked. It is
	// asked only where a pool of spec's template exists, and only reads;
	// a wrong true costs a cold start, a wrong false the image (the
	// session layer says why in its event).
	Restorable func(ctx context.Context, spec Spec) bool

	// Prepare, if set, is called on a pooled sandbox once it is ready,
	// before it joins its pool, e.g. to run one command so that the first
	// call of the session claiming it finds the image's files cached. A
	// sandbox it fails for is removed.
	Prepare func(ctx context.Context, sb Sandbox) error
	// Claims records which session each claimed pooled sandbox belongs to
	// (DirClaims in the state directory on one host; on Kubernetes
	// kube.Claims, on the pods). Nil: no warm pools.
	Claims Claims
	// MaxCreating bounds the sandboxes being created at once (default
	// DefaultMaxCreating); CreateQueue bounds the creations waiting for a
	// slot (default DefaultCreateQueue; negative: none), CreateQueueWait how long each
	// waits (default DefaultCreateQueueWait). See Admission in the package
	// doc.
	MaxCreating     int
	CreateQueue     int
	CreateQueueWait time.Duration
	// UseRecordEvery, for a runtime that keeps last uses (UseRecorder),
	// is how often a sandbox in use has its use recorded (default
	// DefaultUseRecordEvery): a record is at most this stale, so idle
	// TTLs well above it are judged right by every process.
	UseRecordEvery time.Duration
}

// Manager owns the lifecycle of a server's sandboxes: one per (tenant,
// session), created on first use and reused after, removed on request, when
// idle (Reap) or, after a restart, when found dead or orphaned (Adopt).
//
// A session outlives its sandboxes: a sandbox that died is replaced
// (RemoveSandbox, then Ensure) and the new one finds what the runtime keeps
// per session (SessionState: the workspace). The session ends when it is
// removed (Remove) or reaped; only then does that state go. The Manager
// remembers the sessions it serves, with or without a sandbox at the
// moment, so that a Sweep never takes a live session's state while its
// sandbox is being replaced, and so the reaper also ends sessions whose
// sandbox is gone.
//
// It does not speak the agent's protocol: it hands out a Sandbox, whose
// Agent endpoint the caller dials.
//
// Contexts: the ctx of Ensure, Remove and Adopt bounds how long the caller
// waits, not the work. A creation or removal, once started, runs to its end
// under Config.CreateTimeout / RemoveTimeout even if its caller goes away, so
// a cancelled request can neither leave a half-created sandbox behind nor
// make concurrent callers for the same session fail.
type Manager struct {
	// The Manager is a facade over three owners, each with its own state
	// and lock: the lifecycle of each session's sandbox (Ensure, Remove,
	// Inspect), the warm pools and their claims (Fill, and the claim in a
	// session's first Ensure) and the reaper (Reap, Adopt), which keeps no
	// state and acts through the other two. Creation slots are the
	// admission's, which the lifecycle and the pools share.
	adm   *admission
	life  *lifecycle
	pools *warmPools
	reap  *reaper
}

// NewManager checks cfg and returns a Manager. It does not touch the engine:
// call Adopt before serving.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Runtime == nil {
		return nil, fmt.Errorf("%w: manager: no runtime", ErrInvalid)
	}
	if cfg.Owner == "" {
		return nil, fmt.Errorf("%w: manager: empty owner", ErrInvalid)
	}
	if cfg.CreateTimeout <= 0 {
		cfg.CreateTimeout = 2 * time.Minute
	}
	if cfg.RemoveTimeout <= 0 {
		cfg.RemoveTimeout = time.Minute
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = DefaultBusyTimeout
	}
	if cfg.SuspendTimeout <= 0 {
		cfg.SuspendTimeout = DefaultSuspendTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxCreating < 0 || cfg.CreateQueueWait < 0 {
		return nil, fmt.Errorf("%w: manager: negative admission settings (maxCreating %d, createQueueWait %s)",
			ErrInvalid, cfg.MaxCreating, cfg.CreateQueueWait)
	}
	if cfg.MaxCreating == 0 {
		cfg.MaxCreating = DefaultMaxCreating
	}
	switch {
	case cfg.CreateQueue == 0:
		cfg.CreateQueue = DefaultCreateQueue
	case cfg.CreateQueue < 0:
		cfg.CreateQueue = 0 // no queue: a creation without a free slot fails at once
	}
	if cfg.CreateQueueWait == 0 {
		cfg.CreateQueueWait = DefaultCreateQueueWait
	}
	if cfg.UseRecordEvery < 0 {
		return nil, fmt.Errorf("%w: manager: negative useRecordEvery %s", ErrInvalid, cfg.UseRecordEvery)
	}
	if cfg.UseRecordEvery == 0 {
		cfg.UseRecordEvery = DefaultUseRecordEvery
	}
	g := &engine{cfg: cfg}
	adm := newAdmission(cfg.MaxCreating, cfg.CreateQueue, cfg.CreateQueueWait)
	pools := newWarmPools(g, adm)
	life := newLifecycle(g, adm, pools)
	pools.destroy = life.destroy
	return &Manager{adm: adm, life: life, pools: pools,
		reap: &reaper{engine: g, life: life, pools: pools}}, nil
}

// Ensure returns the running sandbox of spec's tenant and session, creating
// it on first use, and marks it used. Concurrent calls for one session share
// one creation. The Manager completes spec: Owner is the Manager's.
//
// A sandbox that exists is reused as it is, even if spec has changed since
// it was created (a policy reload applies to new sandboxes). One found on the
// engine but not known to the Manager (created before a restart and not
// adopted yet) is taken over if it is this owner's and running, replaced if
// it is dead, and refused with ErrConflict if it is another owner's.
//
// Ensure trusts its record of a sandbox it created: if the sandbox died
// underneath (its agent cannot be dialled), Remove it and Ensure again.
func (m *Manager) Ensure(ctx context.Context, spec Spec) (Sandbox, error) {
	return m.life.ensure(ctx, spec)
}

// Touch marks a session's sandbox used now, e.g. while a background task
// runs in it with nobody calling Ensure. It reports whether the Manager knows
// a ready sandbox for the session.
func (m *Manager) Touch(tenant, session string) bool {
	return m.life.touch(tenant, session)
}

// Sandboxes returns the ready sandboxes the Manager knows, by tenant and
// session.
func (m *Manager) Sandboxes() []Sandbox {
	return m.life.sandboxes()
}

// Remove ends a session: it deletes the session's sandbox and everything
// its runtime keeps for it (spill files, and the workspace of a runtime
// with SessionState). It waits for a creation in progress to finish first.
// When there was neither a sandbox nor session state it returns
// ErrNotFound; a sandbox of another owner is ErrConflict and is left alone,
// with the session's state.
func (m *Manager) Remove(ctx context.Context, tenant, session string) error {
	return m.life.remove(ctx, tenant, session, Sandbox{}, true)
}

// Suspend suspends a session (Config.Suspend, which must be set): it waits
// for a creation in progress, holds the session's calls, calls
// Config.Suspend with the session's sandbox and, if that saved it, removes
// the sandbox and the session's runtime state as Remove does. The
// session's next Ensure creates a new sandbox, which Config.Resume
// restores. ErrNotFound: the session has no sandbox to suspend. An error
// of Config.Suspend is returned as it is, and the session goes on as it
// was.
func (m *Manager) Suspend(ctx context.Context, tenant, session string) error {
	return m.life.suspend(ctx, tenant, session)
}

// RemoveSandbox deletes sb, the sandbox of its session, but not the
// session: what the runtime keeps per session (SessionState: the
// workspace) stays for the sandbox the next Ensure creates. It is how a
// dead sandbox is replaced. It removes sb only (by ID and Created, since
// a runtime may give a session's sandboxes one ID): if the session's
// sandbox is another one by then — a concurrent call replaced sb already
// — that one stays, and the error is ErrNotFound, as when the session
// has no sandbox at all.
func (m *Manager) RemoveSandbox(ctx context.Context, sb Sandbox) error {
	if sb.ID == "" {
		return fmt.Errorf("%w: RemoveSandbox of %s/%s names no sandbox", ErrInvalid, sb.Tenant, sb.Session)
	}
	return m.life.remove(ctx, sb.Tenant, sb.Session, sb, false)
}

// Inspect returns the session's sandbox as the runtime sees it now (its
// state, whether it was OOM-killed), whether or not this Manager knows it;
// ErrNotFound when there is none.
func (m *Manager) Inspect(ctx context.Context, tenant, session string) (Sandbox, error) {
	return m.life.inspect(ctx, tenant, session)
}

// List returns this owner's sandboxes on the engine, in any state, as
// sessions see them: a claimed pooled sandbox under its session (PoolName
// set), unclaimed pooled ones not at all.
func (m *Manager) List(ctx context.Context) ([]Sandbox, error) {
	return m.life.list(ctx)
}

// Reap removes the sandboxes not used for idleTTL or longer and returns
// them. Without a UseRecorder only sandboxes the Manager knows (created or
// adopted by it) are considered; with one, every sandbox of the owner, each
// by the latest of this process's uses and the recorded ones (those of
// other processes sharing the sandboxes), or by its creation. Removal runs
// under Config.RemoveTimeout each, even if ctx ends.
func (m *Manager) Reap(ctx context.Context, idleTTL time.Duration) ([]Sandbox, error) {
	return m.ReapBy(ctx, func(string) time.Duration { return idleTTL })
}

// ReapBy is Reap with an idle TTL per tenant (a per-tenant policy); a TTL of
// zero or less keeps the tenant's sandboxes. Once ctx has ended no further
// session is reaped (a removal begun goes on): a replica that stopped
// leading leaves the rest to the new leader.
func (m *Manager) ReapBy(ctx context.Context, idleTTL func(tenant string) time.Duration) ([]Sandbox, error) {
	return m.reap.reapBy(ctx, idleTTL)
}

// ReapEvery calls ReapBy every interval until ctx ends, logging failures.
func (m *Manager) ReapEvery(ctx context.Context, idleTTL func(tenant string) time.Duration, interval time.Duration) {
	m.reap.reapEvery(ctx, idleTTL, interval)
}

// Adopt reconciles the engine with the Manager, typically once at server
// start: it lists this owner's sandboxes, keeps the running ones, removes
// the others (their sessions go on, reaped when idle), and has the runtime
// sweep state of sessions neither on the engine nor live here (if it is a
// Sweeper): a workspace whose session has no sandbox at all ends then.
// Sessions the Manager is already handling are left as they are. Errors
// are collected; Adopt does as much as it can.
func (m *Manager) Adopt(ctx context.Context) (AdoptReport, error) {
	return m.reap.adopt(ctx)
}

// Pools reports the warm pools the Manager keeps.
func (m *Manager) Pools() []PoolStatus {
	return m.pools.status()
}

// Admission reports the sandboxes being created now and the creations
// waiting for a slot.
func (m *Manager) Admission() (creating, queued int) {
	return m.adm.load()
}

// Fill makes the pools match targets, once: it removes the ready sandboxes
// of templates no target names any more (a template change rolls its pool)
// and of pools larger than wanted, and creates missing ones, as many at a
// time as creation slots are free while no session waits for one. It
// returns when its creations have ended. Creations and removals run under
// Config.CreateTimeout / RemoveTimeout whatever ctx does, but no creation starts
// once ctx has ended (a replica that stopped leading). Without Claims
// (Config.Claims) pools cannot be claimed, so Fill refuses non-empty
// targets.
func (m *Manager) Fill(ctx context.Context, targets []PoolTarget) (FillReport, error) {
	return m.pools.fill(ctx, targets)
}

// FillEvery runs Fill with targets() at once, then every interval, at once
// again after a claim (a session took a ready sandbox) and while a pass
// made progress but left some missing, until ctx ends. It logs failures.
// On Kubernetes, only the elected replica is to run it.
func (m *Manager) FillEvery(ctx context.Context, targets func() []PoolTarget, interval time.Duration) {
	m.pools.fillEvery(ctx, targets, interval)
}
