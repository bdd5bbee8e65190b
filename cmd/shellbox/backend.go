package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/executor/sandboxed"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/tools"
)

// serveBackend is the server.Backend of `shellbox serve` and `shellbox
// mcp`: one executor and Toolset per tenant, over the docker backend (all
// tenants share one sandbox.Manager) or the local one (host processes,
// unsandboxed, for development).
type serveBackend struct {
	cfg Config
	log *slog.Logger

	// Set before the first call (they are the server's; it needs the
	// backend first).
	notify func(tenant, session string, n tools.Notice)
	gate   func(tenant string) tools.Gate
	// policies, when set, decide each tenant's limits and sandboxes.
	policies *policies.Engine
	// created reports a sandbox creation's latency to the metrics.
	created func(tenant string, d time.Duration)
	// egress counts egress connections by outcome (metrics).
	egress func(tenant, outcome string)

	// docker, containerd
	rt       sandboxRuntime
	manager  *sandbox.Manager
	agent    string
	agentErr error

	// adopted are the sandboxes a previous process left running; rewatch
	// finds their background tasks.
	adopted []sandbox.Sandbox

	mu      sync.Mutex
	tenants map[string]*tenantBackend
	// opts are the options sessions were created with (docker), by
	// tenant/session; a session without any takes the tenant's defaults.
	opts map[string]server.SessionOptions
}

type tenantBackend struct {
	tools *tools.Toolset
	exec  executor.BashExecutor
	close func(context.Context) error
	// forget drops a session's cached connection (docker).
	forget func(session string)
	// seen lists the sessions used (local).
	seen *sessionSet
}

var _ server.Backend = (*serveBackend)(nil)

func newServeBackend(ctx context.Context, cfg Config, log *slog.Logger) (*serveBackend, error) {
	b := &serveBackend{cfg: cfg, log: log, tenants: map[string]*tenantBackend{}, opts: map[string]server.SessionOptions{}}
	if cfg.Backend == "local" {
		return b, nil
	}
	b.agent, b.agentErr = agentBinary(cfg.Sandbox.Agent)
	rt, err := openRuntime(cfg, b.agent)
	if err != nil {
		return nil, err
	}
	m, err := sandbox.NewManager(sandbox.Config{
		Runtime: timedRuntime{sandboxRuntime: rt, b: b},
		Owner:   cfg.Sandbox.Owner,
		Ready:   sandboxed.WaitAgent,
		Logger:  log,
	})
	if err != nil {
		rt.Close()
		return nil, fmt.Errorf("%s backend: %w", cfg.Backend, err)
	}
	b.rt, b.manager = rt, m
	// Sandboxes (and their background tasks) of a previous process of this
	// owner are taken over; dead ones and orphaned directories removed.
	rep, err := m.Adopt(ctx)
	if err != nil {
		log.Warn("adopting sandboxes", "err", err)
	}
	log.Info("sandboxes adopted", "kept", len(rep.Kept), "removed", len(rep.Removed))
	b.adopted = rep.Kept
	return b, nil
}

// timedRuntime reports how long creating a sandbox takes.
type timedRuntime struct {
	sandboxRuntime
	b *serveBackend
}

func (t timedRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	start := time.Now()
	sb, err := t.sandboxRuntime.Create(ctx, spec)
	if err == nil && t.b.created != nil {
		t.b.created(spec.Tenant, time.Since(start))
	}
	return sb, err
}

// tenant returns the tenant's executor and Toolset, creating them on first
// use.
func (b *serveBackend) tenant(name string) (*tenantBackend, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tb, ok := b.tenants[name]; ok {
		return tb, nil
	}
	tb := &tenantBackend{}
	home := "/workspace"
	limits := b.cfg.Limits
	if b.policies != nil {
		pol, err := b.policies.Policy(name)
		if err != nil {
			return nil, err
		}
		// The output bounds are fixed when the tenant's executor is made;
		// the timeouts the Gate applies on every call, from the policy as
		// it is then.
		limits = pol.Limits
	}
	switch b.cfg.Backend {
	case "local":
		root := b.cfg.Local.Root
		if root == "" {
			wd, err := os.Getwd()
			if err != nil {
				return nil, err
			}
			root = wd
		}
		root = filepath.Join(root, name)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, fmt.Errorf("local backend: %w", err)
		}
		spill, err := filepath.Abs(filepath.Join(b.cfg.Local.SpillDir, name))
		if err != nil {
			return nil, err
		}
		home = root
		e, err := local.New(local.Config{Root: root, Home: home, SpillDir: spill, Limits: limits, Cgroup: local.CgroupMode(b.cfg.Local.Cgroup)})
		if err != nil {
			return nil, fmt.Errorf("local backend: %w", err)
		}
		tb.seen = &sessionSet{m: map[string]time.Time{}}
		tb.exec, tb.close = recording{e, tb.seen}, e.Close
	default:
		e, err := sandboxed.New(sandboxed.Config{
			Manager: b.manager,
			Tenant:  name,
			Spec:    func(session string) (sandbox.Spec, error) { return b.spec(name, session) },
			Limits:  limits,
			Egress:  egressRelay(b.log, b.cfg.Egress, b.checkEgress, b.observeEgress),
		})
		if err != nil {
			return nil, err
		}
		tb.exec, tb.forget = e, e.Forget
		tb.close = func(context.Context) error { return e.Close() }
	}
	var gate tools.Gate
	if b.gate != nil {
		gate = b.gate(name)
	}
	ts, err := tools.New(tb.exec, tools.Config{
		DisableRunInBackground: !b.cfg.EnableRunInBackground,
		Home:                   home,
		Facts:                  b.cfg.Facts,
		Gate:                   gate,
		OnNotice: func(session string, n tools.Notice) {
			if b.notify != nil {
				b.notify(name, session, n)
			}
		},
	})
	if err != nil {
		tb.close(context.Background())
		return nil, err
	}
	tb.tools = ts
	b.tenants[name] = tb
	return tb, nil
}

// spec is the sandbox spec of a new docker session: the options it was
// created with, else the tenant's defaults.
// checkEgress decides a connection of a tenant's sandbox by the tenant's
// current policy; without policies nothing is allowed (such sandboxes have
// no proxy anyway).
func (b *serveBackend) checkEgress(tenant, target string) error {
	if b.policies == nil {
		return fmt.Errorf("shellbox: egress to %s is not allowed: the server has no policies (policies.dir)", target)
	}
	pol, err := b.policies.Policy(tenant)
	if err != nil {
		return fmt.Errorf("shellbox: egress to %s is not allowed: %v", target, err)
	}
	return pol.CheckEgress(target)
}

func (b *serveBackend) observeEgress(tenant, outcome string) {
	if b.egress != nil {
		b.egress(tenant, outcome)
	}
}

func (b *serveBackend) spec(tenant, session string) (sandbox.Spec, error) {
	if b.agentErr != nil {
		return sandbox.Spec{}, b.agentErr
	}
	b.mu.Lock()
	o := b.opts[tenant+"/"+session]
	b.mu.Unlock()
	dc := b.cfg.Sandbox
	if b.policies != nil {
		pol, err := b.policies.Policy(tenant)
		if err != nil {
			return sandbox.Spec{}, server.Errorf(server.ErrNotAllowed, "%v", err)
		}
		n := 0
		for _, sb := range b.manager.Sandboxes() {
			if sb.Tenant == tenant && sb.Session != session {
				n++
			}
		}
		return policySpec(dc, pol, tenant, session, b.agent, o, n)
	}
	var err error
	if dc.Image, err = b.cfg.sessionImage(tenant, o.Image); err != nil {
		return sandbox.Spec{}, err
	}
	if dc.Runtime, err = b.cfg.sessionRuntime(tenant, o.Runtime); err != nil {
		return sandbox.Spec{}, err
	}
	return dockerSpec(dc, tenant, session, b.agent, nil)
}

// rewatch asks the agents of the adopted sandboxes for their running
// background tasks and watches them, so their completion notices reach the
// event streams and the sessions' next results as if this process had
// started them. Call it once the server is wired (notify, gate).
func (b *serveBackend) rewatch(ctx context.Context) {
	for _, sb := range b.adopted {
		tb, err := b.tenant(sb.Tenant)
		if err != nil {
			b.log.Warn("re-watching tasks", "tenant", sb.Tenant, "session", sb.Session, "err", err)
			continue
		}
		ex, ok := tb.exec.(*sandboxed.Executor)
		if !ok {
			continue
		}
		tasks, err := ex.Running(ctx, sb.Session)
		if err != nil {
			b.log.Warn("re-watching tasks", "tenant", sb.Tenant, "session", sb.Session, "err", err)
			continue
		}
		for _, t := range tasks {
			tb.tools.Watch(sb.Session, t)
		}
		if len(tasks) > 0 {
			b.log.Info("re-watching tasks", "tenant", sb.Tenant, "session", sb.Session, "tasks", len(tasks))
		}
	}
}

func (b *serveBackend) Toolset(_ context.Context, tenant string) (*tools.Toolset, error) {
	tb, err := b.tenant(tenant)
	if err != nil {
		return nil, server.Errorf(server.ErrUnavailable, "tenant %s: %v", tenant, err)
	}
	return tb.tools, nil
}

func (b *serveBackend) Sessions(_ context.Context, tenant string) ([]server.SessionInfo, error) {
	var out []server.SessionInfo
	if b.manager == nil {
		tb, err := b.tenant(tenant)
		if err != nil {
			return nil, err
		}
		for id, created := range tb.seen.list() {
			out = append(out, server.SessionInfo{ID: id, Tenant: tenant, State: "running", Created: created})
		}
		return out, nil
	}
	for _, sb := range b.manager.Sandboxes() {
		if sb.Tenant == tenant {
			out = append(out, sessionInfo(sb))
		}
	}
	return out, nil
}

func (b *serveBackend) CreateSession(ctx context.Context, tenant, session string, opts server.SessionOptions) (server.SessionInfo, error) {
	tb, err := b.tenant(tenant)
	if err != nil {
		return server.SessionInfo{}, err
	}
	if b.manager == nil {
		if opts.Image != "" || opts.Runtime != "" || len(opts.Mounts) > 0 {
			return server.SessionInfo{}, server.Errorf(server.ErrNotAllowed, "the local backend runs no images, runtimes or mounts")
		}
		created := tb.seen.add(session)
		return server.SessionInfo{ID: session, Tenant: tenant, State: "running", Created: created}, nil
	}
	if b.policies == nil {
		if len(opts.Mounts) > 0 {
			return server.SessionInfo{}, errNoMountAllowlist
		}
		if _, err := b.cfg.sessionImage(tenant, opts.Image); err != nil {
			return server.SessionInfo{}, err
		}
		if _, err := b.cfg.sessionRuntime(tenant, opts.Runtime); err != nil {
			return server.SessionInfo{}, err
		}
	}
	b.mu.Lock()
	prev, had := b.opts[tenant+"/"+session]
	b.opts[tenant+"/"+session] = opts
	b.mu.Unlock()
	spec, err := b.spec(tenant, session)
	if err != nil {
		b.mu.Lock()
		if had {
			b.opts[tenant+"/"+session] = prev
		} else {
			delete(b.opts, tenant+"/"+session)
		}
		b.mu.Unlock()
		if errors.Is(err, server.ErrNotAllowed) || errors.Is(err, server.ErrInvalid) || errors.Is(err, server.ErrUnavailable) {
			return server.SessionInfo{}, err
		}
		return server.SessionInfo{}, server.Errorf(server.ErrInvalid, "%v", err)
	}
	sb, err := b.manager.Ensure(ctx, spec)
	if err != nil {
		return server.SessionInfo{}, server.Errorf(server.ErrUnavailable, "sandbox for session %s: %v", session, err)
	}
	return sessionInfo(sb), nil
}

// errNoMountAllowlist refuses mounts on a server without policies: the
// allowlist is the policy's sandbox.mounts, so nothing may be mounted.
var errNoMountAllowlist = server.Errorf(server.ErrNotAllowed,
	"mounts need an allowlist, and this server has none: set policies.dir and list the directories in the tenant's sandbox.mounts")

// sessionInfo describes a docker session's sandbox.
func sessionInfo(sb sandbox.Sandbox) server.SessionInfo {
	si := server.SessionInfo{ID: sb.Session, Tenant: sb.Tenant, Image: sb.Image, Runtime: sb.Runtime,
		State: string(sb.State), Created: sb.Created}
	for _, m := range sb.Mounts {
		ro := m.ReadOnly
		si.Mounts = append(si.Mounts, server.Mount{Source: m.Source, Target: m.Target, ReadOnly: &ro})
	}
	return si
}

func (b *serveBackend) DeleteSession(ctx context.Context, tenant, session string) error {
	tb, err := b.tenant(tenant)
	if err != nil {
		return err
	}
	if b.manager == nil {
		if !tb.seen.remove(session) {
			return server.NoSuchSession(session)
		}
		return nil
	}
	b.mu.Lock()
	delete(b.opts, tenant+"/"+session)
	b.mu.Unlock()
	tb.forget(session)
	err = b.manager.Remove(ctx, tenant, session)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandbox.ErrNotFound):
		return server.NoSuchSession(session)
	default:
		return server.Errorf(server.ErrUnavailable, "removing session %s: %v", session, err)
	}
}

func (b *serveBackend) Ready(ctx context.Context) error {
	if b.policies != nil {
		if err := b.policies.Ready(); err != nil {
			return fmt.Errorf("policies: %w", err)
		}
	}
	if b.rt == nil {
		return nil
	}
	if err := b.rt.Ping(ctx); err != nil {
		return fmt.Errorf("%s: %w", b.cfg.Backend, err)
	}
	return nil
}

// Close stops the Toolsets' watchers and closes the executors: connections
// for docker (sandboxes and tasks keep running, for the next process), the
// tasks themselves for local.
func (b *serveBackend) Close(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, tb := range b.tenants {
		tb.tools.Close()
		errs = append(errs, tb.close(ctx))
	}
	if b.rt != nil {
		errs = append(errs, b.rt.Close())
	}
	return errors.Join(errs...)
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
