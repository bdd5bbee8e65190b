package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
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
	// (default 2 minutes).
	CreateTimeout time.Duration
	// RemoveTimeout bounds removing one (default 1 minute).
	RemoveTimeout time.Duration
	// Logger receives one line per sandbox created, adopted or removed
	// (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now); tests replace it.
	Now func() time.Time

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

// DefaultUseRecordEvery is Config.UseRecordEvery's default.
const DefaultUseRecordEvery = 30 * time.Second

// UseRecorder is a Runtime that keeps each sandbox's last use with the
// sandbox (Kubernetes: a pod annotation), so that every server process
// sharing the sandboxes (a release's replicas) judges idleness by the uses
// of all of them: the reaper, in the one process that leads, sees sessions
// served only by the others. Its Get and List fill Sandbox.LastUsed from
// the record (zero: never recorded).
type UseRecorder interface {
	RecordUse(ctx context.Context, sb Sandbox, at time.Time) error
}

// Unwrapper is a Runtime that wraps another (to observe it) and passes
// its optional abilities through: AsUseRecorder looks behind it.
type Unwrapper interface {
	Unwrap() Runtime
}

// AsUseRecorder returns rt, or the runtime rt wraps (Unwrapper, at any
// depth), as a UseRecorder.
func AsUseRecorder(rt Runtime) (UseRecorder, bool) {
	for rt != nil {
		if r, ok := rt.(UseRecorder); ok {
			return r, true
		}
		u, ok := rt.(Unwrapper)
		if !ok {
			return nil, false
		}
		rt = u.Unwrap()
	}
	return nil, false
}

// maxRecording bounds the use records being written at once; a use that
// finds no slot is recorded with the session's next one.
const maxRecording = 8

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
	cfg Config

	adm  *admission
	kick chan struct{} // a claim, once it ends, wakes FillEvery
	// lastSync is when syncPooled last listed the runtime (Manager.mu).
	lastSync time.Time
	// syncing is closed when the latest syncPooled pass under way ends;
	// nil when none runs (Manager.mu). A claim that finds its pool empty
	// while a pass lists waits for that pass rather than start cold.
	syncing chan struct{}

	mu      sync.Mutex
	entries map[key]*entry
	// sessions are the live sessions, with their last use: every session
	// with an entry, and those whose sandbox was removed (RemoveSandbox,
	// a failed replacement, a dead one at Adopt) while the session goes on.
	sessions map[key]time.Time
	// pools are the warm pools by poolKey; named are the runtime names
	// (tenant, pooled session) of every pooled sandbox this Manager has or
	// is creating, claimed ones included, so Adopt's sweep keeps their
	// state.
	pools map[string]*pool
	named map[key]bool
	// syncs are the syncPooled passes under way (poolSync).
	syncs map[*poolSync]struct{}
	// absent holds, for sessions Inspect found without a sandbox, when it
	// looked (see noteAbsent).
	absent map[key]time.Time

	// recorder is the runtime as a UseRecorder (nil: none); recording
	// holds a slot per use record being written.
	recorder  UseRecorder
	recording chan struct{}
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
	m := &Manager{cfg: cfg, entries: map[key]*entry{}, sessions: map[key]time.Time{}, pools: map[string]*pool{}, named: map[key]bool{}, syncs: map[*poolSync]struct{}{}, absent: map[key]time.Time{},
		adm: newAdmission(cfg.MaxCreating, cfg.CreateQueue, cfg.CreateQueueWait), kick: make(chan struct{}, 1)}
	if r, ok := AsUseRecorder(cfg.Runtime); ok {
		m.recorder, m.recording = r, make(chan struct{}, maxRecording)
	}
	return m, nil
}

// used marks e's sandbox used now; m.mu is held. With a UseRecorder the
// use is recorded with the sandbox when the last record is
// UseRecordEvery old, in the background: a warm call never waits for it.
func (m *Manager) used(k key, e *entry) {
	now := m.cfg.Now()
	e.sb.LastUsed = now
	m.sessions[k] = now
	if m.recorder == nil || now.Sub(e.recorded) < m.cfg.UseRecordEvery {
		return
	}
	select {
	case m.recording <- struct{}{}:
	default:
		return // every slot busy: the next use records
	}
	e.recorded = now
	sb := e.sb
	go func() {
		defer func() { <-m.recording }()
		// Its own bounded lifetime: the call that used the sandbox may
		// end before the record is written.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.recorder.RecordUse(ctx, sb, now); err != nil && !errors.Is(err, ErrNotFound) {
			m.cfg.Logger.Warn("recording a sandbox's use", "tenant", sb.Tenant, "session", sb.Session, "id", sb.ID, "err", err)
		}
	}()
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
	spec, err := m.complete(spec)
	if err != nil {
		return Sandbox{}, err
	}
	k := key{spec.Tenant, spec.Session}
	start := m.cfg.Now()
	for {
		m.mu.Lock()
		e := m.entries[k]
		if e == nil {
			e = &entry{busy: make(chan struct{}), creating: true}
			m.entries[k] = e
			go m.create(ctx, k, e, spec)
		}
		if e.busy == nil {
			m.used(k, e)
			sb := e.sb
			m.mu.Unlock()
			return sb, nil
		}
		busy, creating := e.busy, e.creating
		m.mu.Unlock()

		select {
		case <-busy:
		case <-ctx.Done():
			if creating {
				// The creation goes on (detached, under CreateTimeout):
				// a later call of the session finds the sandbox.
				return Sandbox{}, fmt.Errorf("%w: the sandbox of %s/%s is still being created after %s, when this call's own deadline ended; a later call finds it once it is ready: %w",
					ErrUnavailable, spec.Tenant, spec.Session, m.cfg.Now().Sub(start).Round(time.Millisecond), ctx.Err())
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
			m.mu.Lock()
			sb := e.sb
			m.mu.Unlock()
			return sb, nil
		}
	}
}

// Touch marks a session's sandbox used now, e.g. while a background task
// runs in it with nobody calling Ensure. It reports whether the Manager knows
// a ready sandbox for the session.
func (m *Manager) Touch(tenant, session string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key{tenant, session}
	e := m.entries[k]
	if e == nil || e.busy != nil {
		return false
	}
	m.used(k, e)
	return true
}

// Sandboxes returns the ready sandboxes the Manager knows, by tenant and
// session.
func (m *Manager) Sandboxes() []Sandbox {
	m.mu.Lock()
	var out []Sandbox
	for _, e := range m.entries {
		if e.busy == nil {
			out = append(out, e.sb)
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return key{out[i].Tenant, out[i].Session}.String() < key{out[j].Tenant, out[j].Session}.String()
	})
	return out
}

// Remove ends a session: it deletes the session's sandbox and everything
// its runtime keeps for it (spill files, and the workspace of a runtime
// with SessionState). It waits for a creation in progress to finish first.
// When there was neither a sandbox nor session state it returns
// ErrNotFound; a sandbox of another owner is ErrConflict and is left alone,
// with the session's state.
func (m *Manager) Remove(ctx context.Context, tenant, session string) error {
	return m.remove(ctx, tenant, session, true)
}

// RemoveSandbox deletes the session's sandbox but not the session: what the
// runtime keeps per session (SessionState: the workspace) stays for the
// sandbox the next Ensure creates. It is how a dead sandbox is replaced.
// ErrNotFound: there was no sandbox.
func (m *Manager) RemoveSandbox(ctx context.Context, tenant, session string) error {
	return m.remove(ctx, tenant, session, false)
}

func (m *Manager) remove(ctx context.Context, tenant, session string, end bool) error {
	if err := checkSession(tenant, session); err != nil {
		return err
	}
	k := key{tenant, session}
	for {
		m.mu.Lock()
		e := m.entries[k]
		if e != nil && e.busy != nil {
			busy := e.busy
			m.mu.Unlock()
			select {
			case <-busy:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var sb Sandbox
		if e != nil {
			sb = e.sb
		}
		r := m.claimLocked(k)
		m.mu.Unlock()

		done := make(chan struct{})
		go func() {
			defer close(done)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.RemoveTimeout)
			defer cancel()
			r.err = m.destroy(rctx, k, sb)
			if end {
				r.err = m.endSession(rctx, k, r.err)
			}
			m.release(k, r, end && r.err == nil)
		}()
		select {
		case <-done:
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// endSession removes the runtime's state of session k after destroy
// returned err, and returns the outcome: not found only if there was
// neither a sandbox nor state. A session whose sandbox could not be
// removed keeps its state.
func (m *Manager) endSession(ctx context.Context, k key, err error) error {
	ss, ok := m.cfg.Runtime.(SessionState)
	if !ok || (err != nil && !errors.Is(err, ErrNotFound)) {
		return err
	}
	had, serr := ss.RemoveSession(ctx, k.tenant, k.session)
	switch {
	case serr != nil:
		return serr
	case had:
		m.cfg.Logger.Info("session state removed", "tenant", k.tenant, "session", k.session)
		return nil
	}
	return err
}

// Inspect returns the session's sandbox as the runtime sees it now (its
// state, whether it was OOM-killed), whether or not this Manager knows it;
// ErrNotFound when there is none.
func (m *Manager) Inspect(ctx context.Context, tenant, session string) (Sandbox, error) {
	if err := checkSession(tenant, session); err != nil {
		return Sandbox{}, err
	}
	sb, err := m.get(ctx, tenant, session)
	if errors.Is(err, ErrNotFound) {
		m.noteAbsent(key{tenant, session})
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
func (m *Manager) noteAbsent(k key) {
	if !m.shared() {
		return
	}
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries[k] != nil {
		return // being created or removed here: Ensure learns it from the entry
	}
	if len(m.absent) >= maxAbsent {
		for ak, t := range m.absent {
			if now.Sub(t) >= absentFresh {
				delete(m.absent, ak)
			}
		}
		if len(m.absent) >= maxAbsent {
			return
		}
	}
	m.absent[k] = now
}

// tookAbsent reports, once, whether Inspect found k without a sandbox
// within absentFresh.
func (m *Manager) tookAbsent(k key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.absent[k]
	delete(m.absent, k)
	return ok && m.cfg.Now().Sub(t) < absentFresh
}

// List returns this owner's sandboxes on the engine, in any state, as
// sessions see them: a claimed pooled sandbox under its session (PoolName
// set), unclaimed pooled ones not at all.
func (m *Manager) List(ctx context.Context) ([]Sandbox, error) {
	list, claimed, err := m.listClaimedAtOnce(ctx)
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
func (m *Manager) listClaimedAtOnce(ctx context.Context) ([]Sandbox, map[key]string, error) {
	if m.cfg.Claims == nil {
		return m.listClaimed(ctx)
	}
	var list []Sandbox
	var cs []Claim
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { list, err = m.cfg.Runtime.List(gctx, m.cfg.Owner); return err })
	g.Go(func() (err error) { cs, err = m.cfg.Claims.List(gctx); return err })
	if err := g.Wait(); err != nil {
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
func (m *Manager) listClaimed(ctx context.Context) ([]Sandbox, map[key]string, error) {
	list, err := m.cfg.Runtime.List(ctx, m.cfg.Owner)
	if err != nil {
		return nil, nil, err
	}
	if m.cfg.Claims == nil {
		return list, map[key]string{}, nil
	}
	cs, err := m.cfg.Claims.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	return list, claimedBy(cs), nil
}

// get is Runtime.Get of a session, which may be a claimed pooled sandbox.
// With Claims, the session's own sandbox is read while the claims are
// looked up, not after: a new session's first call needs both answers
// (neither has it), and on Kubernetes each is an API round trip.
func (m *Manager) get(ctx context.Context, tenant, session string) (Sandbox, error) {
	if m.cfg.Claims == nil {
		return m.cfg.Runtime.Get(ctx, tenant, session)
	}
	type got struct {
		sb  Sandbox
		err error
	}
	own := make(chan got, 1) // buffered: never blocks the reader if not waited for
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		sb, err := m.cfg.Runtime.Get(octx, tenant, session)
		own <- got{sb, err}
	}()
	pooled, err := m.cfg.Claims.Lookup(ctx, tenant, session)
	switch {
	case err == nil:
		cancel() // the session is the pooled sandbox: its own is not read
		sb, err := m.cfg.Runtime.Get(ctx, tenant, pooled)
		if err != nil {
			return Sandbox{}, err
		}
		sb.PoolName, sb.Session = pooled, session
		return sb, nil
	case !errors.Is(err, ErrNotFound):
		return Sandbox{}, err
	}
	g := <-own
	return g.sb, g.err
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
// zero or less keeps the tenant's sandboxes.
func (m *Manager) ReapBy(ctx context.Context, idleTTL func(tenant string) time.Duration) ([]Sandbox, error) {
	// The uses other processes recorded; a reaper that cannot read them
	// reaps nothing this time rather than judge by its own uses alone.
	var recorded map[key]Sandbox
	if m.recorder != nil {
		list, err := m.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("reap: reading the sandboxes' recorded uses: %w", err)
		}
		recorded = make(map[key]Sandbox, len(list))
		for _, sb := range list {
			recorded[key{sb.Tenant, sb.Session}] = sb
		}
	}
	// lastUse is the latest of this process's use, the recorded one and
	// the sandbox's creation (a sandbox another process just made has no
	// use recorded yet).
	lastUse := func(k key, local time.Time) time.Time {
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
	now := m.cfg.Now()
	type victim struct {
		k    key
		sb   Sandbox
		idle time.Duration
		r    *entry
	}
	var victims []victim
	m.mu.Lock()
	for k, e := range m.entries {
		used := lastUse(k, e.sb.LastUsed)
		if ttl := idleTTL(k.tenant); ttl > 0 && e.busy == nil && now.Sub(used) >= ttl {
			victims = append(victims, victim{k: k, sb: e.sb, idle: now.Sub(used)})
		}
	}
	// Sessions whose sandbox is gone (died and not replaced yet) end the
	// same way, with their state.
	for k, used := range m.sessions {
		if _, ok := m.entries[k]; ok {
			continue
		}
		used = lastUse(k, used)
		if ttl := idleTTL(k.tenant); ttl > 0 && now.Sub(used) >= ttl {
			// A sandbox another process made for it meanwhile is judged
			// by its recorded uses (without a recorder it is not ours to
			// judge: see below).
			victims = append(victims, victim{k: k, sb: recorded[k], idle: now.Sub(used)})
		}
	}
	// Sandboxes only other processes serve, by their recorded uses.
	for k, sb := range recorded {
		if _, ok := m.entries[k]; ok {
			continue
		}
		if _, ok := m.sessions[k]; ok {
			continue
		}
		used := lastUse(k, time.Time{})
		if ttl := idleTTL(k.tenant); ttl > 0 && now.Sub(used) >= ttl {
			victims = append(victims, victim{k: k, sb: sb, idle: now.Sub(used)})
		}
	}
	for i := range victims {
		victims[i].r = m.claimLocked(victims[i].k)
	}
	m.mu.Unlock()

	var reaped []Sandbox
	var errs []error
	rctx := context.WithoutCancel(ctx)
	for _, v := range victims {
		c, cancel := context.WithTimeout(rctx, m.cfg.RemoveTimeout)
		if v.sb.ID == "" {
			// A session this Manager knows without a sandbox: if one is
			// on the engine now, another process made it; not ours to
			// judge idle. The next Ensure takes it over.
			if _, err := m.cfg.Runtime.Get(c, v.k.tenant, v.k.session); !errors.Is(err, ErrNotFound) {
				cancel()
				m.release(v.k, v.r, false)
				continue
			}
		}
		err := m.destroy(c, v.k, v.sb)
		err = m.endSession(c, v.k, err)
		cancel()
		v.r.err = err
		m.release(v.k, v.r, err == nil || errors.Is(err, ErrNotFound))
		if err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		if v.sb.ID == "" {
			continue
		}
		m.cfg.Logger.Info("sandbox reaped", "tenant", v.k.tenant, "session", v.k.session, "id", v.sb.ID,
			"idle", v.idle.Round(time.Second))
		reaped = append(reaped, v.sb)
	}
	return reaped, errors.Join(errs...)
}

// ReapEvery calls ReapBy every interval until ctx ends, logging failures.
func (m *Manager) ReapEvery(ctx context.Context, idleTTL func(tenant string) time.Duration, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := m.ReapBy(ctx, idleTTL); err != nil {
				m.cfg.Logger.Warn("sandbox reap", "err", err)
			}
		}
	}
}

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

// Adopt reconciles the engine with the Manager, typically once at server
// start: it lists this owner's sandboxes, keeps the running ones, removes
// the others (their sessions go on, reaped when idle), and has the runtime
// sweep state of sessions neither on the engine nor live here (if it is a
// Sweeper): a workspace whose session has no sandbox at all ends then.
// Sessions the Manager is already handling are left as they are. Errors
// are collected; Adopt does as much as it can.
func (m *Manager) Adopt(ctx context.Context) (AdoptReport, error) {
	var rep AdoptReport
	list, claimed, err := m.listClaimed(ctx)
	if err != nil {
		return rep, err
	}
	var errs []error
	// live holds runtime names (a pooled sandbox's is its pooled name).
	live := map[key]bool{}
	for _, sb := range list {
		rk := key{sb.Tenant, sb.Session}
		if m.beingCreated(sb) {
			// Being created, perhaps by another process sharing the
			// runtime (a replica, or the leader filling a pool): not dead
			// yet. A later Adopt, or the reaper, judges it.
			live[rk] = true
			continue
		}
		if IsPooled(sb.Session) {
			s, ok := claimed[rk]
			retired := ok && s == ""
			if retired {
				// Retired, and its removal cut short: finish it.
				delete(claimed, rk)
			}
			if !ok || retired {
				if !retired && m.adoptPooled(sb) {
					live[rk] = true
					rep.Pooled = append(rep.Pooled, sb)
					continue
				}
				// Retired first (removePooled): another process may have
				// claimed it since the list.
				err := m.removePooled(ctx, sb, "adopt: "+string(sb.State))
				if errors.Is(err, ErrAlreadyExists) {
					live[rk] = true
					continue
				}
				if err != nil {
					errs = append(errs, err)
					live[rk] = true
					continue
				}
				rep.Removed = append(rep.Removed, sb)
				continue
			}
			// Claimed (perhaps just before a crash): the session's.
			// Claiming it again for the session restores an index the
			// crash may have cut short.
			delete(claimed, rk)
			if held, err := m.cfg.Claims.Claim(ctx, sb.Tenant, sb.Session, s); err != nil {
				errs = append(errs, err)
			} else if held == s {
				// The session's claim lock names a cold start (ColdStarts):
				// a claim that lost its lock to it left this pod claimed.
				m.cfg.Logger.Warn("session started cold also has a pooled sandbox claimed for it", "tenant", sb.Tenant, "session", s, "name", sb.Session)
			} else if held != sb.Session {
				// Only claims made before claims were exclusive per
				// session can leave a session two.
				m.cfg.Logger.Warn("session holds two pooled sandboxes", "tenant", sb.Tenant, "session", s, "name", sb.Session, "held", held)
			}
			sb.PoolName, sb.Session = sb.Session, s
		}
		k := key{sb.Tenant, sb.Session}
		valid := CheckID("tenant", k.tenant) == nil && CheckID("session", k.session) == nil
		m.mu.Lock()
		e := m.entries[k]
		if valid && e != nil {
			// Ensure got there first; the entry is authoritative.
			m.mu.Unlock()
			live[rk] = true
			continue
		}
		if valid && sb.State == StateRunning {
			sb.LastUsed = m.cfg.Now()
			m.entries[k] = &entry{sb: sb}
			m.sessions[k] = sb.LastUsed
			if sb.PoolName != "" {
				m.named[rk] = true
				m.pooledChanged(rk)
			}
			m.mu.Unlock()
			live[rk] = true
			rep.Kept = append(rep.Kept, sb)
			m.cfg.Logger.Info("sandbox adopted", "tenant", k.tenant, "session", k.session, "id", sb.ID)
			continue
		}
		m.mu.Unlock()
		if err := m.destroy(ctx, k, sb); err != nil {
			errs = append(errs, err)
			live[rk] = true // keep its directory until the container is gone
			continue
		}
		rep.Removed = append(rep.Removed, sb)
		m.cfg.Logger.Info("sandbox removed", "reason", "adopt: "+string(sb.State), "tenant", k.tenant, "session", k.session, "id", sb.ID)
		if _, ok := m.cfg.Runtime.(SessionState); ok && valid {
			m.mu.Lock()
			if _, known := m.sessions[k]; !known {
				m.sessions[k] = m.cfg.Now()
			}
			m.mu.Unlock()
			live[k] = true
		}
	}

	if sw, ok := m.cfg.Runtime.(Sweeper); ok {
		swept, err := sw.Sweep(ctx, m.cfg.Owner, func(tenant, session string) bool {
			k := key{tenant, session}
			if live[k] {
				return true
			}
			m.mu.Lock()
			_, known := m.entries[k]
			_, serving := m.sessions[k]
			known = known || m.named[k]
			m.mu.Unlock()
			return known || serving
		})
		if err != nil {
			errs = append(errs, err)
		}
		for _, p := range swept {
			m.cfg.Logger.Info("sandbox state removed", "reason", "adopt: no sandbox", "path", p)
		}
		rep.Swept = swept
	}

	// Claims left are of sandboxes that are gone (removed between their
	// removal and their claim's, or by hand).
	for rk, s := range claimed {
		if err := m.cfg.Claims.Release(ctx, rk.tenant, rk.session); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Released = append(rep.Released, Claim{Tenant: rk.tenant, Pooled: rk.session, Session: s})
	}
	return rep, errors.Join(errs...)
}

// adoptPooled puts a running, unclaimed pooled sandbox found at Adopt in
// its template's pool (of size 0 until Fill says what it wants), and
// reports whether it did.
func (m *Manager) adoptPooled(sb Sandbox) bool {
	h := poolHash(sb.Session)
	if sb.State != StateRunning || h == "" || m.cfg.Claims == nil || CheckID("tenant", sb.Tenant) != nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := poolKey(sb.Tenant, h)
	p := m.pools[k]
	if p == nil {
		p = &pool{tenant: sb.Tenant, hash: h}
		m.pools[k] = p
	}
	for _, r := range p.ready {
		if r.ID == sb.ID {
			return true
		}
	}
	p.ready = append(p.ready, sb)
	m.named[key{sb.Tenant, sb.Session}] = true
	m.pooledChanged(key{sb.Tenant, sb.Session})
	return true
}

// complete fills the Manager's part of spec and validates it.
func (m *Manager) complete(spec Spec) (Spec, error) {
	spec = spec.Clone()
	if err := checkSession(spec.Tenant, spec.Session); err != nil {
		return Spec{}, err
	}
	spec.Owner = m.cfg.Owner
	if err := spec.Validate(); err != nil {
		return Spec{}, err
	}
	return spec, nil
}

// create runs one creation for e, detached from the caller's cancellation.
func (m *Manager) create(parent context.Context, k key, e *entry, spec Spec) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), m.cfg.CreateTimeout)
	defer cancel()
	sb, err := m.createOrTakeOver(ctx, spec)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		delete(m.entries, k)
		e.err = err
	} else {
		sb.LastUsed = m.cfg.Now()
		e.sb = sb
		m.sessions[k] = sb.LastUsed
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
func (m *Manager) createOrTakeOver(ctx context.Context, spec Spec) (Sandbox, error) {
	for wait := otherCreatingPoll; ; wait = min(2*wait, otherCreatingPollMax) {
		sb, err := m.createOnce(ctx, spec)
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

// beingCreated reports whether sb, not running, may still be being created
// (perhaps by another process sharing the runtime): pending, and younger
// than a creation may take.
func (m *Manager) beingCreated(sb Sandbox) bool {
	return sb.State == StateCreated && !sb.Created.IsZero() && m.cfg.Now().Sub(sb.Created) < m.cfg.CreateTimeout
}

// shared reports whether other processes may serve this Manager's
// sessions' calls at the same time (Kubernetes replicas: the Claims have
// ColdStarts). Only then is a pending sandbox of a session this Manager
// is not creating another's creation under way; on one host it is what a
// crash left, replaced at once.
func (m *Manager) shared() bool {
	_, ok := m.cfg.Claims.(ColdStarts)
	return ok
}

func (m *Manager) createOnce(ctx context.Context, spec Spec) (Sandbox, error) {
	rt := m.cfg.Runtime
	old, err := Sandbox{}, ErrNotFound // as Inspect found it a moment ago
	if !m.tookAbsent(key{spec.Tenant, spec.Session}) {
		old, err = m.get(ctx, spec.Tenant, spec.Session)
	}
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return Sandbox{}, err
	case old.Owner != m.cfg.Owner:
		return Sandbox{}, fmt.Errorf("%w: sandbox %s/%s belongs to owner %q", ErrConflict, spec.Tenant, spec.Session, old.Owner)
	case old.State == StateRunning:
		if err := m.ready(ctx, old); err != nil {
			return Sandbox{}, m.discard(ctx, old, err)
		}
		m.cfg.Logger.Info("sandbox adopted", "tenant", spec.Tenant, "session", spec.Session, "id", old.ID)
		return old, nil
	case m.beingCreated(old) && m.shared():
		return Sandbox{}, fmt.Errorf("%w: sandbox %s is %s, made %s ago", errOtherCreating, old.ID, old.State, m.cfg.Now().Sub(old.Created).Round(time.Second))
	default:
		if err := m.destroy(ctx, key{spec.Tenant, spec.Session}, old); err != nil {
			return Sandbox{}, err
		}
		m.cfg.Logger.Info("sandbox removed", "reason", "replacing: "+string(old.State), "tenant", spec.Tenant, "session", spec.Session, "id", old.ID)
	}

	if sb, ok, err := m.claim(ctx, spec); err != nil {
		return Sandbox{}, err
	} else if ok {
		return sb, nil
	}
	release, err := m.adm.acquire(ctx)
	if err != nil {
		return Sandbox{}, err
	}
	defer release()
	var settle func() error // the cold start's reservation, until settled
	if cs, ok := m.cfg.Claims.(ColdStarts); ok {
		// Reserved once admitted: the reservation lasts what Create
		// takes, not a queue's wait too.
		held, done, err := cs.Cold(ctx, spec.Tenant, spec.Session)
		switch {
		case err != nil:
			return Sandbox{}, err
		case held == spec.Session:
			return Sandbox{}, errColdElsewhere
		case held != "":
			return m.claimedElsewhere(ctx, spec, held)
		}
		settle = done
		defer func() {
			if settle != nil {
				_ = settle() // failed: no sandbox, the reservation goes
			}
		}()
	}
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		return Sandbox{}, err
	}
	if err := m.ready(ctx, sb); err != nil {
		return Sandbox{}, m.discard(ctx, sb, err)
	}
	if settle != nil {
		done := settle
		settle = nil
		switch err := done(); {
		case errors.Is(err, ErrAlreadyExists):
			// The reservation was judged dead and taken over: the session
			// claimed a pooled sandbox meanwhile, which is its sandbox.
			m.cfg.Logger.Warn("sandbox removed", "reason", "created cold while the session claimed a pooled sandbox elsewhere", "tenant", spec.Tenant, "session", spec.Session, "id", sb.ID, "err", err)
			return Sandbox{}, m.discard(ctx, sb, fmt.Errorf("%w: the session claimed a pooled sandbox elsewhere while this server started it cold", errOtherCreating))
		case err != nil:
			// Unsettled, still standing while the sandbox exists.
			m.cfg.Logger.Warn("settling a cold start's reservation", "tenant", spec.Tenant, "session", spec.Session, "id", sb.ID, "err", err)
		}
	}
	m.cfg.Logger.Info("sandbox created", "tenant", spec.Tenant, "session", spec.Session, "id", sb.ID, "runtime", sb.Runtime)
	return sb, nil
}

// claimedElsewhere returns the pooled sandbox held that another process
// claimed for spec's session while this one was about to start it cold.
func (m *Manager) claimedElsewhere(ctx context.Context, spec Spec, held string) (Sandbox, error) {
	sb, err := m.heldSandbox(ctx, spec, held)
	if errors.Is(err, ErrNotFound) {
		// Gone since: the claim is stale, which the next look clears.
		return Sandbox{}, fmt.Errorf("%w: the pooled sandbox %s claimed for it is gone", errOtherCreating, held)
	}
	if err != nil {
		return Sandbox{}, err
	}
	if err := m.ready(ctx, sb); err != nil {
		// Another process handed it to the session: not ours to replace.
		return Sandbox{}, err
	}
	m.cfg.Logger.Info("session claimed a pooled sandbox elsewhere", "tenant", spec.Tenant, "session", spec.Session, "name", held, "id", sb.ID)
	return sb, nil
}

// heldSandbox returns the pooled sandbox held, which another process
// claimed for spec's session, as the session's, and marks it known by name
// (in no ready list). ErrNotFound (wrapped) if it is gone.
func (m *Manager) heldSandbox(ctx context.Context, spec Spec, held string) (Sandbox, error) {
	sb, err := m.cfg.Runtime.Get(ctx, spec.Tenant, held)
	if err != nil {
		return Sandbox{}, fmt.Errorf("session %s/%s holds pooled sandbox %s: %w", spec.Tenant, spec.Session, held, err)
	}
	m.mu.Lock()
	m.named[key{spec.Tenant, held}] = true
	m.pooledChanged(key{spec.Tenant, held})
	m.mu.Unlock()
	sb.PoolName, sb.Session = held, spec.Session
	return sb, nil
}

func (m *Manager) ready(ctx context.Context, sb Sandbox) error {
	if m.cfg.Ready == nil {
		return nil
	}
	if err := m.cfg.Ready(ctx, sb); err != nil {
		return fmt.Errorf("%w: sandbox %s/%s not ready: %w", ErrUnavailable, sb.Tenant, sb.Session, err)
	}
	return nil
}

// discard removes a sandbox that failed after creation and returns cause.
func (m *Manager) discard(ctx context.Context, sb Sandbox, cause error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.RemoveTimeout)
	defer cancel()
	if err := m.cfg.Runtime.Remove(rctx, sb.ID); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// destroy removes a session's sandbox (sb, or whatever the runtime has for
// the session when sb.ID is empty), and its claim if it came from a pool.
func (m *Manager) destroy(ctx context.Context, k key, sb Sandbox) error {
	rt := m.cfg.Runtime
	if sb.ID == "" {
		got, err := m.get(ctx, k.tenant, k.session)
		switch {
		case errors.Is(err, ErrNotFound):
			return fmt.Errorf("%w: %s", ErrNotFound, k)
		case err != nil:
			return err
		case got.Owner != m.cfg.Owner:
			return fmt.Errorf("%w: sandbox %s belongs to owner %q", ErrConflict, k, got.Owner)
		}
		sb = got
	}
	if err := rt.Remove(ctx, sb.ID); err != nil {
		return err
	}
	// A pooled sandbox's runtime state (SessionState: its workspace) is
	// kept under its pooled name, which no later sandbox takes: it goes
	// with the sandbox, claimed or not. (So a session that claimed one
	// starts its next sandbox with an empty workspace.)
	pooled := sb.PoolName
	if pooled == "" && IsPooled(k.session) {
		pooled = k.session
	}
	if ss, ok := rt.(SessionState); ok && pooled != "" {
		if _, err := ss.RemoveSession(ctx, k.tenant, pooled); err != nil {
			m.cfg.Logger.Warn("removing a pooled sandbox's state", "tenant", k.tenant, "name", pooled, "err", err)
		}
	}
	if sb.PoolName != "" {
		// The claim goes after the sandbox: a crash in between leaves a
		// claim without a sandbox, which Adopt drops.
		if err := m.cfg.Claims.Release(ctx, k.tenant, sb.PoolName); err != nil {
			m.cfg.Logger.Warn("releasing a claim", "tenant", k.tenant, "session", k.session, "name", sb.PoolName, "err", err)
		}
		m.mu.Lock()
		delete(m.named, key{k.tenant, sb.PoolName})
		m.pooledChanged(key{k.tenant, sb.PoolName})
		m.mu.Unlock()
	}
	m.cfg.Logger.Info("sandbox removed", "tenant", k.tenant, "session", k.session, "id", sb.ID)
	return nil
}

// claimLocked puts a removal entry for k in place and returns it. m.mu held.
func (m *Manager) claimLocked(k key) *entry {
	r := &entry{busy: make(chan struct{})}
	m.entries[k] = r
	return r
}

// release ends the removal r of k: the session has no sandbox any more,
// and, if ended, is no session either.
func (m *Manager) release(k key, r *entry, ended bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries[k] == r {
		delete(m.entries, k)
	}
	if ended {
		delete(m.sessions, k)
	}
	close(r.busy)
}
