package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/session/sandboxconn"
	"github.com/shellbox/shellbox/tools"
	"github.com/shellbox/shellbox/usage"
)

// Config configures a Service.
type Config struct {
	// Runtime runs each session's sandbox. Nil: the local backend, whose
	// commands run as host processes, unsandboxed (Local).
	Runtime sandbox.Runtime
	// Owner labels the sandboxes this Service creates: it adopts and reaps
	// only its own. Required with a Runtime.
	Owner string
	// Ready, if set, replaces the wait for a new sandbox's agent
	// (sandboxconn.WaitAgent): for runtimes whose sandboxes run no agent (an
	// in-memory one, in tests).
	Ready func(ctx context.Context, sb sandbox.Sandbox) error
	// Unavailable, if set, fails every new sandbox with it (the agent
	// binary was not found: the error says how to build it).
	Unavailable error
	// Defaults are the sandbox settings of a tenant without a policy, and
	// what a policy leaves unset (the image).
	Defaults Defaults
	// Choices are the images and runtimes a session of a tenant without a
	// policy may ask for, by tenant.
	Choices map[string]Choices
	// Local configures the local backend (Runtime nil).
	Local LocalConfig

	// Policies, if set, decide every call (the tenant's gate) and set each
	// tenant's limits and sandboxes. Nil: every call runs unchecked.
	Policies *policies.Engine
	// Limits are the executor's limits of tenants without a policy.
	Limits executor.Limits
	// Facts are DSH_* facts of every call.
	Facts map[string]string
	// DisableRunInBackground removes run_in_background from the tools.
	DisableRunInBackground bool
	// Egress bounds where relayed egress may lead from this host.
	Egress EgressConfig
	// IdleTTL reaps sandboxes of tenants without a policy idle that long
	// (0: never); a policy sets its tenant's.
	IdleTTL time.Duration
	// Claims records the claims of warm pools' sandboxes (on one host:
	// sandbox.DirClaims in the state directory). Nil: no warm pools,
	// whatever the policies' sandbox.pool.size.
	Claims sandbox.Claims
	// Admission bounds the sandboxes being created at once.
	Admission Admission
	// Snapshots keeps suspended sessions (suspend.go): their workspaces'
	// snapshots and their records (snapshot.Dir on one host, snapshot.S3
	// for a fleet). Nil: no session is suspended; an idle one ends, its
	// workspace deleted.
	Snapshots snapshot.Store
	// SuspendedTTL deletes the suspended sessions of tenants without a
	// policy (or whose policy sets none) suspended that long, with their
	// snapshots (default DefaultSuspendedTTL; a policy's
	// limits.suspendedTTL sets its tenant's).
	SuspendedTTL time.Duration
	// PoolInterval is how often the warm pools are compared with the
	// policies (a reload that changes a pool is seen then), besides after
	// each claim (default 10s).
	PoolInterval time.Duration

	// Usage, if set, measures what sessions use (usage.Sampler, while
	// this process leads, on runtimes that read it: Docker, containerd)
	// and holds the tenants' daily limits (policies'
	// limits.cpuSecondsPerDay and limits.sandboxHoursPerDay) to it.
	// UsageInterval is how often each sandbox is read (default
	// usage.DefaultInterval).
	Usage         *usage.Meter
	UsageInterval time.Duration

	// Leader, if set, decides when this process reaps idle sandboxes and
	// keeps the warm pools: only while it leads (on Kubernetes, the
	// replica holding the release's Lease). Nil: always (one host, one
	// server).
	Leader Leader

	// Notifier hears completion notices (the server's event streams); nil
	// hears nothing.
	Notifier server.Notifier
	// Metrics counts gate decisions, sandbox creations, egress and
	// leadership (the server's metrics); nil counts nothing.
	Metrics server.Metrics
	// Logger (default: discard).
	Logger *slog.Logger
}

// LocalConfig configures the local backend.
type LocalConfig struct {
	// Root is the parent of the tenants' roots (<Root>/<tenant>) in a
	// server, or the root itself in a one-shot call (Shared); default: the
	// working directory.
	Root string
	// Home is the commands' HOME (default: the root).
	Home string
	// SpillDir holds the spill files (<SpillDir>/<tenant> in a server).
	SpillDir string
	// Cgroup is local.CgroupMode ("auto", "off").
	Cgroup string
	// Shared: every tenant uses Root and SpillDir themselves (a one-shot
	// call, which serves one tenant).
	Shared bool
}

// Admission bounds sandbox creations (sandbox.Config's MaxCreating,
// CreateQueue, CreateQueueWait, with their meanings: zero values take the
// defaults, a CreateQueue of sandbox.NoCreateQueue is no queue).
type Admission struct {
	MaxCreating     int
	CreateQueue     int
	CreateQueueWait time.Duration
}

// Service is the session layer, the server.Backend a server calls: it
// holds, per tenant, an executor and a tools.Toolset, and decides each
// session's sandbox settings and the tenant's quotas.
type Service struct {
	cfg     Config
	log     *slog.Logger
	manager *sandbox.Manager // nil: local

	mu      sync.Mutex
	tenants map[string]*tenant
	// stopLead ends the reaping and pools Start started (and the
	// competition for leadership); leading is done when they have ended.
	stopLead context.CancelFunc
	// life is Start's context: tasks handed over by another replica are
	// taken over within it (nil before Start: a one-shot takes none).
	life    context.Context
	leading sync.WaitGroup
	// opts are the options sessions were created with, by tenant/session;
	// a session without any takes the tenant's defaults.
	opts map[string]server.SessionOptions
	// suspending holds the sessions an operator is suspending; resumeFrom
	// the snapshot an operator chose to resume a session from.
	suspending, resumeFrom map[string]string
	// held counts the calls this server holds per tenant/session
	// (HoldCall).
	held map[string]int
	// process names this process in resume claims; claimTTL is how long
	// one holds unrenewed (resume.go).
	process  string
	claimTTL time.Duration
	// recent holds the records of suspended sessions that settings read
	// for their next sandbox, for its Resume to claim from (resume.go).
	recent map[string]recentRecord
	// keep serialises the snapshots of running sessions, and loses says
	// the runtime's workspaces die with their sandboxes (a
	// DeletionWatcher): rescue.go.
	keep  keeper
	loses bool
	// readyConns passes a new sandbox's agent connection from the Manager's
	// readiness check to the executors' first dial (with Config.Ready
	// replacing the check it holds nothing, and their dials just dial).
	readyConns *sandboxconn.ReadyConns
	// health answers Ready (nil: a runtime that cannot be pinged).
	health *engineHealth
}

type tenant struct {
	tools *tools.Toolset
	exec  executor.BashExecutor
	close func(context.Context) error
	// forget drops a session's cached agent connection (sandboxed).
	forget func(session string)
	// unchecked counts the connected sessions whose agent checks no
	// execs, with one reason (sandboxed).
	unchecked func() (int, string)
	// seen lists the sessions used (local).
	seen *sessionSet
	// root is the tenant's root (local).
	root string
}

var (
	_ server.Backend        = (*Service)(nil)
	_ server.NoticeReceiver = (*Service)(nil)
	_ server.CallHolder     = (*Service)(nil)
	_ server.Suspender      = (*Service)(nil)
)

// New checks cfg and returns a Service. It does not touch the engine: a
// server calls Start before serving.
func New(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Limits == (executor.Limits{}) {
		cfg.Limits = executor.DefaultLimits()
	}
	if err := cfg.Egress.compile(); err != nil {
		return nil, fmt.Errorf("session: egress: %w", err)
	}
	if cfg.SuspendedTTL == 0 {
		cfg.SuspendedTTL = DefaultSuspendedTTL
	}
	l := &Service{cfg: cfg, log: cfg.Logger, tenants: map[string]*tenant{}, opts: map[string]server.SessionOptions{},
		suspending: map[string]string{}, resumeFrom: map[string]string{}, held: map[string]int{},
		process: processName(), claimTTL: DefaultClaimTTL}
	if cfg.Runtime == nil {
		return l, nil
	}
	rt := cfg.Runtime
	if p, ok := rt.(sandbox.Pinger); ok {
		l.health = newEngineHealth(p.Ping)
	}
	if cfg.Metrics != nil {
		rt = timedRuntime{Runtime: rt, observe: cfg.Metrics.ObserveSandboxCreate}
	}
	// A new sandbox's agent is dialled once: the readiness check's
	// connection is the executor's.
	l.readyConns = sandboxconn.NewReadyConns()
	ready, prepare, busy := cfg.Ready, l.readyConns.WarmUp, l.busy(sandboxconn.Busy)
	var suspend, resume func(context.Context, sandbox.Sandbox) error
	var restore func(context.Context, sandbox.Spec) (sandbox.Sandbox, bool)
	var restorable func(context.Context, sandbox.Spec) bool
	if cfg.Snapshots != nil {
		suspend, resume = l.saveSandbox, l.resumeSandbox
		if _, ok := cfg.Runtime.(sandbox.Checkpointer); ok {
			restore, restorable = l.restoreSandbox, l.restorable
		}
	}
	if _, ok := deletionWatcher(cfg.Runtime); ok && cfg.Snapshots != nil {
		l.loses = true
	}
	if ready == nil {
		ready = l.readyConns.Ready
	} else {
		prepare, busy = nil, nil // sandboxes without an agent
		suspend, resume, restore, restorable = nil, nil, nil, nil
	}
	m, err := sandbox.NewManager(sandbox.Config{
		Runtime: rt,
		Owner:   cfg.Owner,
		Ready:   ready,
		Logger:  cfg.Logger,
		Claims:  cfg.Claims,
		Prepare: prepare,
		Busy:    busy,
		Suspend: suspend,
		Resume:  resume,
		Restore: restore,

		Restorable: restorable,

		MaxCreating:     cfg.Admission.MaxCreating,
		CreateQueue:     cfg.Admission.CreateQueue,
		CreateQueueWait: cfg.Admission.CreateQueueWait,
	})
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	l.manager = m
	return l, nil
}

var _ server.Sandboxer = (*Service)(nil)

// Sandboxed implements server.Sandboxer: whether sessions run in sandboxes
// (not on the local backend, where /readyz says so).
func (l *Service) Sandboxed() bool { return l.manager != nil }

// Leader elects, among the processes sharing the sandboxes (replicas of
// one release), the one that reaps idle sandboxes and keeps the warm pools.
type Leader interface {
	// Run calls lead each time this process becomes the leader, with a
	// context that is cancelled as soon as it stops being the leader or
	// ctx ends, and waits for lead to return before it competes again (so
	// two calls of lead never overlap). It returns when ctx has ended and
	// the last lead has returned.
	Run(ctx context.Context, lead func(ctx context.Context))
}

// Start takes over what a previous process of this owner left — its
// running sandboxes are kept (dead ones and orphaned state removed) and
// their background tasks watched again, so their completion notices reach
// the event streams — and, until ctx ends, reaps idle sandboxes and keeps
// the warm pools while this process leads (Config.Leader; always without
// one). A server calls it once, before serving; a one-shot call does not
// (it must not sweep what a running server is creating).
func (l *Service) Start(ctx context.Context) {
	if l.manager == nil {
		return
	}
	rep, err := l.manager.Adopt(ctx)
	if err != nil {
		l.log.Warn("adopting sandboxes", "err", err)
	}
	l.log.Info("sandboxes adopted", "kept", len(rep.Kept), "removed", len(rep.Removed), "swept", len(rep.Swept),
		"pooled", len(rep.Pooled), "claimsReleased", len(rep.Released))
	if l.cfg.Snapshots != nil && l.cfg.Ready == nil {
		l.reconcile(ctx, rep.Kept)
	}
	go l.rewatch(ctx, rep.Kept)
	l.mu.Lock()
	l.life = ctx
	l.mu.Unlock()
	ctx, stop := context.WithCancel(ctx)
	l.mu.Lock()
	l.stopLead = stop
	l.mu.Unlock()
	if w, ok := goneWatcher(l.cfg.Runtime); ok {
		// Every replica, leader or not, lets go of sandboxes that go
		// (rescue.go).
		l.leading.Go(func() { l.watchGone(ctx, w) })
	}
	if l.cfg.Leader == nil {
		l.leading.Go(func() { l.lead(ctx) })
		return
	}
	l.leading.Go(func() { l.cfg.Leader.Run(ctx, l.lead) })
}

// lead reaps idle sandboxes and keeps the warm pools until ctx ends, and
// returns when both loops have: a replica that loses its leadership does
// nothing more of either once lead has returned.
func (l *Service) lead(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	l.log.Info("reaping idle sandboxes and keeping warm pools")
	l.observeLeader(true)
	defer l.observeLeader(false)
	var wg sync.WaitGroup
	if interval := reapInterval(l.cfg.IdleTTL, l.cfg.Policies != nil); interval > 0 {
		wg.Go(func() { l.manager.ReapEvery(ctx, l.idleTTL, interval) })
	}
	wg.Go(func() { l.KeepPools(ctx) })
	if l.cfg.Snapshots != nil && l.cfg.Ready == nil {
		wg.Go(func() { l.sweepSuspendedEvery(ctx, time.Minute) })
		if w, ok := deletionWatcher(l.cfg.Runtime); ok {
			// Workspaces die with their sandboxes: save those deleted
			// behind shellbox's back, and snapshot running sessions as
			// their policies ask (rescue.go).
			wg.Go(func() { l.watchDeletions(ctx, w) })
			wg.Go(func() { l.snapshotPeriodically(ctx) })
		}
	}
	wg.Go(func() { l.sampleUsage(ctx) })
	wg.Wait()
	<-ctx.Done() // KeepPools may return at once (no pools to keep)
	l.log.Info("stopped reaping idle sandboxes and keeping warm pools")
}

func (l *Service) observeLeader(leading bool) {
	if l.cfg.Metrics != nil {
		l.cfg.Metrics.ObserveLeader(leading)
	}
}

// KeepPools keeps the tenants' warm pools (PoolTargets) filled until ctx
// ends, and drains the pools no policy wants any more. Start runs it while
// this process leads (Config.Leader). Without policies or Claims it drains
// what Adopt found and returns.
func (l *Service) KeepPools(ctx context.Context) {
	if l.manager == nil {
		return
	}
	if l.cfg.Policies == nil || l.cfg.Claims == nil {
		if _, err := l.manager.Fill(ctx, nil); err != nil {
			l.log.Warn("draining warm pools", "err", err)
		}
		return
	}
	interval := l.cfg.PoolInterval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	l.manager.FillEvery(ctx, l.PoolTargets, interval)
}

// PoolTargets are the warm pools the policies want: for each tenant with a
// policy file of its own and a sandbox.pool.size, that many sandboxes made
// as a session of the tenant with no options gets its own (so such a
// session's Spec has the pool's template hash and claims one).
func (l *Service) PoolTargets() []sandbox.PoolTarget {
	if l.cfg.Policies == nil || l.manager == nil {
		return nil
	}
	var out []sandbox.PoolTarget
	if l.cfg.Unavailable != nil {
		return nil // no sandbox can be made
	}
	for _, tenant := range l.cfg.Policies.Tenants() {
		pol, err := l.cfg.Policies.Policy(tenant)
		if err != nil || pol.PoolSize <= 0 {
			continue
		}
		spec, err := l.policySpec(tenant, "pool-template", server.SessionOptions{}, pol)
		if err != nil {
			l.log.Warn("warm pool template", "tenant", tenant, "err", err)
			continue
		}
		out = append(out, sandbox.PoolTarget{Template: spec, Size: pol.PoolSize})
	}
	return out
}

// idleTTL is a tenant's idle TTL: its policy's, else Config.IdleTTL.
func (l *Service) idleTTL(tenant string) time.Duration {
	if l.cfg.Policies != nil {
		if p, err := l.cfg.Policies.Policy(tenant); err == nil {
			return p.IdleTTL
		}
	}
	return l.cfg.IdleTTL
}

// reapInterval is how often idle sandboxes are looked for: a quarter of the
// default idle TTL (at least a second, at most a minute), a minute when
// policies (which set per-tenant TTLs) are in force, never when neither
// sets one.
func reapInterval(ttl time.Duration, policies bool) time.Duration {
	switch {
	case ttl > 0:
		return min(max(ttl/4, time.Second), time.Minute)
	case policies:
		return time.Minute
	}
	return 0
}

// rewatch asks the agents of adopted sandboxes for their running background
// tasks and watches them as if this process had started them.
func (l *Service) rewatch(ctx context.Context, adopted []sandbox.Sandbox) {
	for _, sb := range adopted {
		tb, err := l.tenant(sb.Tenant)
		if err != nil {
			l.log.Warn("re-watching tasks", "tenant", sb.Tenant, "session", sb.Session, "err", err)
			continue
		}
		ex, ok := tb.exec.(*sandboxconn.Executor)
		if !ok {
			continue
		}
		tasks, err := ex.Running(ctx, sb.Session)
		if err != nil {
			l.log.Warn("re-watching tasks", "tenant", sb.Tenant, "session", sb.Session, "err", err)
			continue
		}
		for _, t := range tasks {
			tb.tools.Watch(sb.Session, t)
		}
		if len(tasks) > 0 {
			l.log.Info("re-watching tasks", "tenant", sb.Tenant, "session", sb.Session, "tasks", len(tasks))
		}
	}
}

// tenant returns the tenant's executor and Toolset, creating them on first
// use.
func (l *Service) tenant(name string) (*tenant, error) {
	if err := sandbox.CheckID("tenant", name); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if tb, ok := l.tenants[name]; ok {
		return tb, nil
	}
	limits := l.cfg.Limits
	if l.cfg.Policies != nil {
		pol, err := l.cfg.Policies.Policy(name)
		if err != nil {
			return nil, err
		}
		// The output bounds are fixed when the tenant's executor is made;
		// the timeouts the gate applies on every call, from the policy as
		// it is then.
		limits = pol.Limits
	}
	tb := &tenant{}
	var home string
	if l.manager == nil {
		e, root, h, err := l.localExecutor(name, limits)
		if err != nil {
			return nil, err
		}
		home, tb.root = h, root
		tb.seen = &sessionSet{m: map[string]time.Time{}}
		tb.exec, tb.close = recording{e, tb.seen}, e.Close
	} else {
		e, err := sandboxconn.New(sandboxconn.Config{
			Manager: l.manager,
			Tenant:  name,
			Spec:    func(session string) (sandbox.Spec, error) { return l.spec(context.Background(), name, session) },
			Limits:  limits,
			Egress:  l.egressRelay(),
			Dial:    l.readyConns.Dial,
		})
		if err != nil {
			return nil, err
		}
		home = sandbox.WorkspacePath
		tb.exec, tb.forget, tb.unchecked = e, e.Forget, e.Unchecked
		tb.close = func(context.Context) error { return e.Close() }
	}
	var gate tools.Gate
	if l.cfg.Policies != nil {
		gate = l.cfg.Policies
		if l.cfg.Usage != nil {
			gate = usageGate{next: gate, meter: l.cfg.Usage, policies: l.cfg.Policies}
		}
		if l.cfg.Metrics != nil {
			gate = l.cfg.Metrics.ObserveGate(name, gate)
		}
	}
	ts, err := tools.New(tb.exec, tools.Config{
		DisableRunInBackground: l.cfg.DisableRunInBackground,
		Home:                   home,
		Facts:                  l.cfg.Facts,
		Gate:                   gate,
		OnNotice: func(session string, n tools.Notice) {
			if l.cfg.Notifier != nil {
				l.cfg.Notifier.Notify(name, session, n)
			}
		},
		OnReported: func(session, id string) {
			if l.cfg.Notifier != nil {
				l.cfg.Notifier.Reported(name, session, id)
			}
		},
	})
	if err != nil {
		tb.close(context.Background())
		return nil, err
	}
	tb.tools = ts
	l.tenants[name] = tb
	return tb, nil
}

// localExecutor is the local backend's executor of a tenant, its root and
// its home.
func (l *Service) localExecutor(name string, limits executor.Limits) (*local.Executor, string, string, error) {
	lc := l.cfg.Local
	root := lc.Root
	if root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, "", "", fmt.Errorf("local backend: %w", err)
		}
		root = wd
	}
	spill := lc.SpillDir
	if !lc.Shared {
		root, spill = filepath.Join(root, name), filepath.Join(spill, name)
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, "", "", fmt.Errorf("local backend: root: %w", err)
	}
	if spill, err = filepath.Abs(spill); err != nil {
		return nil, "", "", fmt.Errorf("local backend: spillDir: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, "", "", fmt.Errorf("local backend: %w", err)
	}
	home := lc.Home
	if home == "" {
		home = root
	}
	e, err := local.New(local.Config{Root: root, Home: home, SpillDir: spill, Limits: limits, Cgroup: local.CgroupMode(lc.Cgroup)})
	if err != nil {
		return nil, "", "", fmt.Errorf("local backend: %w", err)
	}
	return e, root, home, nil
}

// Toolset implements server.Backend.
func (l *Service) Toolset(_ context.Context, tenant string) (*tools.Toolset, error) {
	tb, err := l.tenant(tenant)
	if err != nil {
		return nil, server.Errorf(server.ErrUnavailable, "tenant %s: %v", tenant, err)
	}
	return tb.tools, nil
}

// ReceiveNotice implements server.NoticeReceiver: a completion notice
// another replica watched is queued for the session's next tool result
// here (tools.Toolset.Deliver drops a copy of one this process has).
func (l *Service) ReceiveNotice(tenant, session string, n tools.Notice) {
	tb, err := l.tenant(tenant)
	if err != nil {
		return
	}
	tb.tools.Deliver(session, n)
}

// ForgetNotice implements server.NoticeReceiver: another replica reported
// the task's end to the model.
func (l *Service) ForgetNotice(tenant, session, taskID string) {
	if tb, err := l.tenant(tenant); err == nil {
		tb.tools.Forget(session, taskID)
	}
}

// WatchTasks implements server.NoticeReceiver: another replica, shutting
// down, watched the session's background tasks; this process watches
// them from now on (in the background, until it closes).
func (l *Service) WatchTasks(tenant, session string) {
	if l.manager == nil {
		return
	}
	l.mu.Lock()
	life := l.life
	l.mu.Unlock()
	if life == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(life, 30*time.Second)
		defer cancel()
		sb, err := l.manager.Inspect(ctx, tenant, session)
		if err != nil {
			if !errors.Is(err, sandbox.ErrNotFound) {
				l.log.Warn("taking over tasks", "tenant", tenant, "session", session, "err", err)
			}
			return
		}
		l.rewatch(ctx, []sandbox.Sandbox{sb})
	}()
}

// Ready implements server.Backend: the engine answers. A policy file that
// does not load is a warning (Warnings), not unreadiness: its tenant keeps
// its last good policy, and every replica reads the same files, so failing
// readiness would take the whole service down for one tenant's typo.
//
// The engine is checked in the background and a blip is not unreadiness
// (ready.go): on Kubernetes every replica's probe asks the same API
// server.
func (l *Service) Ready(ctx context.Context) error {
	if l.health == nil {
		return nil
	}
	if err := l.health.ready(ctx); err != nil {
		return fmt.Errorf("sandbox engine: %w", err)
	}
	return nil
}

// Warnings implements server.Warner: the policy files that do not load as
// they are (policies.Engine.Problems), each of its tenant.
func (l *Service) Warnings() []server.Warning {
	if l.cfg.Policies == nil {
		return nil
	}
	ps := l.cfg.Policies.Problems()
	out := make([]server.Warning, len(ps))
	for i, p := range ps {
		out[i] = server.Warning{Tenant: p.Tenant, Text: p.Text}
	}
	// Sandboxes whose agent runs no exec guard: their policy's command
	// rules hold only before a call runs. One line per tenant.
	l.mu.Lock()
	var unchecked []server.Warning
	for name, tb := range l.tenants {
		if tb.unchecked == nil {
			continue
		}
		if n, why := tb.unchecked(); n > 0 {
			unchecked = append(unchecked, server.Warning{Tenant: name, Text: fmt.Sprintf(
				"%d session(s) of tenant %s run in sandboxes that check no execs (%s): their command rules are checked only before a call runs", n, name, why)})
		}
	}
	l.mu.Unlock()
	slices.SortFunc(unchecked, func(a, b server.Warning) int { return strings.Compare(a.Tenant, b.Tenant) })
	return append(out, unchecked...)
}

// Close stops what Start started — reaping, the warm pools, and the
// leadership, which it gives up (the Kubernetes Lease is released, so
// another replica takes over at once) — and waits for that within ctx;
// then it stops the Toolsets' watchers and closes the executors:
// connections for sandboxes (sandboxes and their tasks keep running, for
// the next process), the tasks themselves for the local backend. It does
// not close the Runtime, which the caller owns.
func (l *Service) Close(ctx context.Context) error {
	var errs []error
	l.mu.Lock()
	stop := l.stopLead
	l.mu.Unlock()
	if stop != nil {
		stop()
		done := make(chan struct{})
		go func() {
			l.leading.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("session: stopping the reaper and warm pools: %w", ctx.Err()))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, tb := range l.tenants {
		// The other replicas watch what this process watched, so the
		// tasks' ends still have notices once it is gone.
		if l.cfg.Notifier != nil {
			for _, session := range tb.tools.Watched() {
				l.cfg.Notifier.HandOver(name, session)
			}
		}
		tb.tools.Close()
		errs = append(errs, tb.close(ctx))
	}
	l.tenants = map[string]*tenant{}
	return errors.Join(errs...)
}

// timedRuntime reports how long creating a sandbox takes. It passes the
// optional abilities the Manager looks for through.
type timedRuntime struct {
	sandbox.Runtime
	observe func(tenant string, d time.Duration)
}

var (
	_ sandbox.Sweeper      = timedRuntime{}
	_ sandbox.SessionState = timedRuntime{}
)

// Unwrap lets the Manager find the runtime's optional abilities
// (sandbox.AsUseRecorder).
func (t timedRuntime) Unwrap() sandbox.Runtime { return t.Runtime }

func (t timedRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	start := time.Now()
	sb, err := t.Runtime.Create(ctx, spec)
	if err == nil {
		t.observe(spec.Tenant, time.Since(start))
	}
	return sb, err
}

// RemoveSession passes the runtime's SessionState through the timing
// wrapper (a runtime without any has no session state to remove).
func (t timedRuntime) RemoveSession(ctx context.Context, tenant, session string) (bool, error) {
	if s, ok := t.Runtime.(sandbox.SessionState); ok {
		return s.RemoveSession(ctx, tenant, session)
	}
	return false, nil
}

// Sweep passes the runtime's Sweeper through the timing wrapper.
func (t timedRuntime) Sweep(ctx context.Context, owner string, live func(tenant, session string) bool) ([]string, error) {
	if s, ok := t.Runtime.(sandbox.Sweeper); ok {
		return s.Sweep(ctx, owner, live)
	}
	return nil, nil
}

// recording is a local executor that remembers the sessions it served.
type recording struct {
	*local.Executor
	seen *sessionSet
}

func (r recording) Resolve(ctx context.Context, req executor.Request) (executor.Spec, error) {
	spec, err := r.Executor.Resolve(ctx, req)
	if err == nil {
		r.seen.add(req.Session)
	}
	return spec, err
}

type sessionSet struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (s *sessionSet) add(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.m[id]; ok {
		return t
	}
	t := time.Now().UTC()
	s.m[id] = t
	return t
}

func (s *sessionSet) remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[id]
	delete(s.m, id)
	return ok
}

func (s *sessionSet) list() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.m))
	for k, v := range s.m {
		out[k] = v
	}
	return out
}
