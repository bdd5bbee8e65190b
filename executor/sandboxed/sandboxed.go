// Package sandboxed is the BashExecutor that runs every session's commands in
// that session's own sandbox, through the agent inside it.
//
// It owns no processes. Resolve is pure (the same executor.Limits rules as
// every executor, against the sandbox root, /workspace by default); Run,
// Start, Task and Has first make sure the session's sandbox exists — the
// sandbox.Manager creates it on first use and reuses it after — then hand the
// resolved Spec to the sandbox's agent over its connection. The agent runs
// the command as the sandbox user, enforces the timeout inside the sandbox
// (so a lost connection cannot leave a command running), kills whole trees,
// writes spill files into the session's host directory (mounted in the
// sandbox, so paths in markers are paths the model can read), and keeps
// background tasks: a restarted server dials the same agent and finds them.
//
// Connections are cached per session. A call whose connection fails drops
// it; the next call dials again, and if the sandbox itself is gone (its
// agent cannot be dialled) it is removed and a fresh one created, which
// finds the session's workspace where the runtime keeps one per session
// (sandbox.SessionState). Tasks of a sandbox that died are gone with it:
// their ids answer "no such task".
package sandboxed

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox"
)

// Agent is what this executor needs of a connection to a sandbox's agent:
// the BashExecutor methods after Resolve. agentapi.Client implements it.
type Agent interface {
	Run(ctx context.Context, spec executor.Spec) (executor.Result, error)
	Start(ctx context.Context, spec executor.Spec) (executor.Task, error)
	Task(ctx context.Context, session, id string) (executor.Task, error)
	Has(ctx context.Context, session string, shell executor.Shell) bool
	Close() error
}

// Dialer connects to the agent of a running sandbox. ctx bounds the dial.
type Dialer func(ctx context.Context, sb sandbox.Sandbox) (Agent, error)

// Config configures an Executor. One Executor serves one tenant.
type Config struct {
	// Manager owns the sandboxes. Required.
	Manager *sandbox.Manager
	// Tenant names the tenant whose sessions this executor serves. Required.
	Tenant string
	// Spec builds the sandbox spec of a new session (the tenant's image,
	// runtime and limits). Required.
	Spec func(session string) (sandbox.Spec, error)
	// Dial connects to a sandbox's agent (default DialAgent).
	Dial Dialer
	// Limits are the timeout and output defaults and caps.
	Limits executor.Limits
	// Root is the session cwd inside the sandbox (default /workspace).
	Root string
	// BaseEnv is the commands' base environment (default PATH, HOME=Root,
	// LANG=C.UTF-8). The server's own environment never reaches a sandbox.
	BaseEnv []string
	// Egress, if set, relays the egress of a sandbox whose network is
	// sandbox.NetworkEgress (sandbox/egress): it is started in its own
	// goroutine whenever a connection to such a sandbox's agent is made, and
	// must return once ctx ends, which happens when that connection is
	// dropped (the sandbox died or is being removed) or the executor is
	// closed. Commands of such a sandbox get egresswire.Env (NO_PROXY and
	// no_proxy only where the spec has none). Unset, such a sandbox's proxy
	// has no relay: its connections are refused.
	//
	// granted reports whether a connection's credential belongs to a call
	// of the sandbox's session that runs with PermissionNetwork, and if so
	// returns a context that ends with the call (or background task): such
	// a call's Spec carries a credential of its own (EgressGrant), which
	// the agent's proxy presents only for connections of the call's own
	// process tree. What the credential allows, and that its tunnels end
	// with the context, is the hook's to enforce.
	Egress func(ctx context.Context, sb sandbox.Sandbox, granted func(credential string) (context.Context, bool))
}

// PermissionNetwork is the sandbox permission (a call's
// sandbox_permissions, once the policy granted it) that gives the call's
// process tree a credential at the sandbox's egress proxy (see
// Config.Egress).
const PermissionNetwork = egresswire.Permission

// Executor runs commands in per-session sandboxes.
type Executor struct {
	cfg Config

	mu     sync.Mutex
	agents map[string]*conn // session → live connection

	// life bounds the executor's goroutines (egress relays, watchers of
	// background tasks holding a network grant); Close ends it and waits for
	// them. closed (under mu) stops new ones.
	life   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool

	grantMu sync.Mutex
	grants  map[string]map[string]grant // session → credential → grant in force
}

// grant is a call's network grant: in force until its context ends.
type grant struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// conn is a live connection to a session's agent, and the relay of its
// sandbox's egress if it has one.
type conn struct {
	Agent
	egress     bool
	stopEgress context.CancelFunc
}

// close stops the relay and closes the connection.
func (c *conn) close() {
	c.stopEgress()
	c.Agent.Close()
}

var _ executor.BashExecutor = (*Executor)(nil)

// DefaultPath is the PATH of the default base environment.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// New checks cfg and returns an Executor. It creates nothing until the first
// call of a session.
func New(cfg Config) (*Executor, error) {
	switch {
	case cfg.Manager == nil:
		return nil, errors.New("sandboxed: Config.Manager is required")
	case cfg.Tenant == "":
		return nil, errors.New("sandboxed: Config.Tenant is required")
	case cfg.Spec == nil:
		return nil, errors.New("sandboxed: Config.Spec is required")
	}
	if cfg.Dial == nil {
		cfg.Dial = DialAgent
	}
	if cfg.Limits == (executor.Limits{}) {
		cfg.Limits = executor.DefaultLimits()
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("sandboxed: Limits: %w", err)
	}
	if cfg.Root == "" {
		cfg.Root = "/workspace"
	}
	if cfg.BaseEnv == nil {
		cfg.BaseEnv = []string{"PATH=" + DefaultPath, "HOME=" + cfg.Root, "LANG=C.UTF-8"}
	}
	life, cancel := context.WithCancel(context.Background())
	return &Executor{cfg: cfg, agents: map[string]*conn{}, life: life, cancel: cancel, grants: map[string]map[string]grant{}}, nil
}

// DialAgent dials the agent of sb (agentapi protocol, with its
// version handshake).
func DialAgent(ctx context.Context, sb sandbox.Sandbox) (Agent, error) {
	if sb.Agent.Network == "" {
		return nil, fmt.Errorf("sandbox %s has no agent endpoint", sb.ID)
	}
	return agentapi.DialEndpoint(ctx, sb.Agent)
}

// WaitAgent is a sandbox.Config.Ready hook: it returns once a new sandbox's
// agent answers its handshake, or at once when the agent speaks another
// protocol version.
func WaitAgent(ctx context.Context, sb sandbox.Sandbox) error {
	c, err := waitAgent(ctx, sb)
	if err != nil {
		return err
	}
	return c.Close()
}

// waitAgent is WaitAgent returning the connection.
func waitAgent(ctx context.Context, sb sandbox.Sandbox) (*agentapi.Client, error) {
	var last error
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		c, err := agentapi.DialEndpoint(ctx, sb.Agent)
		if err == nil {
			return c, nil
		}
		last = err
		var mismatch *agentapi.VersionError
		if errors.As(err, &mismatch) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("agent of sandbox %s did not answer: %w (last: %v)", sb.ID, ctx.Err(), last)
		case <-time.After(delay):
		}
	}
}

// WarmUp prepares a pooled sandbox (sandbox.Config.Prepare): it runs
// `true` through the agent once, as a session's first call would, so that
// call finds the shell's files in the page cache (on fuse-overlayfs
// storage a container's first process start costs tens of milliseconds
// more than its next). ctx bounds it.
func WarmUp(ctx context.Context, sb sandbox.Sandbox) error {
	c, err := agentapi.DialEndpoint(ctx, sb.Agent)
	if err != nil {
		return fmt.Errorf("warming sandbox %s up: %w", sb.ID, err)
	}
	return warmUp(ctx, sb, c)
}

// warmUp is WarmUp on the connection c, which it closes.
func warmUp(ctx context.Context, sb sandbox.Sandbox, c *agentapi.Client) error {
	defer c.Close()
	spec, err := executor.DefaultLimits().Resolve(ctx, executor.Request{Session: sb.Session, Shell: executor.Bash, Command: "true"},
		"/workspace", []string{"PATH=" + DefaultPath, "HOME=/workspace", "LANG=C.UTF-8"})
	if err != nil {
		return fmt.Errorf("warming sandbox %s up: %w", sb.ID, err)
	}
	res, err := c.Run(ctx, spec)
	if err != nil {
		return fmt.Errorf("warming sandbox %s up: %w", sb.ID, err)
	}
	if res.ExitCode != 0 || res.Signal != "" {
		return fmt.Errorf("warming sandbox %s up: `true` ended with exit code %d, signal %q", sb.ID, res.ExitCode, res.Signal)
	}
	return nil
}

// Resolve applies the defaults and caps; workdirs are checked lexically here
// and confined inside the sandbox when the command starts.
func (e *Executor) Resolve(ctx context.Context, req executor.Request) (executor.Spec, error) {
	return e.cfg.Limits.Resolve(ctx, req, e.cfg.Root, e.cfg.BaseEnv)
}

// Run runs spec in the session's sandbox. Cancelling ctx closes the call's
// connection; the agent then kills the command's tree.
func (e *Executor) Run(ctx context.Context, spec executor.Spec) (executor.Result, error) {
	a, err := e.agent(ctx, spec.Session)
	if err != nil {
		if ctx.Err() != nil {
			return executor.Result{}, executor.Aborted()
		}
		return executor.Result{}, err
	}
	spec, release, err := e.withEgress(a, spec)
	if err != nil {
		return executor.Result{}, err
	}
	if release != nil {
		defer release()
	}
	res, err := a.Run(ctx, spec)
	if err != nil && ctx.Err() != nil {
		return executor.Result{}, executor.Aborted()
	}
	if err != nil && !classified(err) {
		if r, ok := e.diedOfOOM(ctx, spec); ok {
			e.check(spec.Session, a, err)
			return r, nil
		}
	}
	return res, e.check(spec.Session, a, err)
}

// oomWait bounds how long a broken call waits for the engine to see its
// sandbox exit.
const oomWait = 3 * time.Second

// diedOfOOM reports, after a call's connection broke, whether the session's
// sandbox died of its memory limit, and if so the call's result: killed by
// SIGKILL, OOMKilled, with a stderr line saying what happened. Under gVisor
// a sandbox over its memory limit dies whole (the host's OOM killer takes the
// sentry, which holds every process of the sandbox), unlike runc where the
// kernel kills a command and the agent reports it. The session's next call
// gets a fresh sandbox.
func (e *Executor) diedOfOOM(ctx context.Context, spec executor.Spec) (executor.Result, bool) {
	ctx, cancel := context.WithTimeout(ctx, oomWait)
	defer cancel()
	for {
		sb, err := e.cfg.Manager.Inspect(ctx, e.cfg.Tenant, spec.Session)
		if err != nil {
			return executor.Result{}, false
		}
		if sb.State != sandbox.StateRunning {
			if !sb.OOMKilled {
				return executor.Result{}, false
			}
			note := "shellbox: the sandbox ran out of memory and was killed whole, with its background tasks; the session's next call starts a fresh sandbox\n"
			if s, err := e.cfg.Spec(spec.Session); err == nil && s.MemoryBytes > 0 {
				note = fmt.Sprintf("shellbox: the sandbox ran out of memory (memory limit: %d bytes) and was killed whole, with its background tasks; the session's next call starts a fresh sandbox\n", s.MemoryBytes)
			}
			return executor.Result{Stderr: note, Signal: "SIGKILL", OOMKilled: true, TimeoutMs: spec.Timeout.Milliseconds()}, true
		}
		select {
		case <-ctx.Done():
			return executor.Result{}, false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Start starts a background task in the session's sandbox; the task lives
// in the agent, not in this process.
func (e *Executor) Start(ctx context.Context, spec executor.Spec) (executor.Task, error) {
	a, err := e.agent(ctx, spec.Session)
	if err != nil {
		return nil, err
	}
	spec, release, err := e.withEgress(a, spec)
	if err != nil {
		return nil, err
	}
	t, err := a.Start(ctx, spec)
	if err != nil {
		if release != nil {
			release()
		}
		return nil, e.check(spec.Session, a, err)
	}
	if release != nil {
		// A network grant lasts as long as the task (or this executor).
		if !e.spawn(func() {
			defer release()
			t.Wait(e.life)
		}) {
			release()
		}
	}
	return t, nil
}

// Task finds a task in the session's sandbox. The sandbox is looked up (and
// taken over, after a restart) like for any call; a session without a
// sandbox has no tasks, and asking for one creates no sandbox.
func (e *Executor) Task(ctx context.Context, session, id string) (executor.Task, error) {
	if err := executor.ValidSession(session); err != nil {
		return nil, executor.NoSuchTask(id)
	}
	if !e.hasSandbox(ctx, session) {
		return nil, executor.NoSuchTask(id)
	}
	a, err := e.agent(ctx, session)
	if err != nil {
		return nil, err
	}
	t, err := a.Task(ctx, session, id)
	return t, e.check(session, a, err)
}

// Running returns the session's running background tasks, for a server
// that re-adopted the sandbox and wants their completion notices. A session
// without a sandbox has none (and gets none).
func (e *Executor) Running(ctx context.Context, session string) ([]executor.Task, error) {
	if err := executor.ValidSession(session); err != nil {
		return nil, err
	}
	if !e.hasSandbox(ctx, session) {
		return nil, nil
	}
	a, err := e.agent(ctx, session)
	if err != nil {
		return nil, err
	}
	lister, ok := a.Agent.(interface {
		Tasks(ctx context.Context, session string) ([]agentapi.TaskInfo, error)
	})
	if !ok {
		return nil, nil
	}
	infos, err := lister.Tasks(ctx, session)
	if err != nil {
		return nil, e.check(session, a, err)
	}
	var out []executor.Task
	for _, info := range infos {
		if info.Status == nil || info.Status.State != executor.Running {
			continue
		}
		t, err := a.Task(ctx, session, info.ID)
		if err != nil {
			continue // ended meanwhile
		}
		out = append(out, t)
	}
	return out, nil
}

// Has reports whether the session's image has shell. It creates the
// session's sandbox if needed: only the image can tell.
func (e *Executor) Has(ctx context.Context, session string, shell executor.Shell) bool {
	if shell == executor.Bash {
		return true
	}
	a, err := e.agent(ctx, session)
	if err != nil {
		return false
	}
	return a.Has(ctx, session, shell)
}

// hasSandbox reports whether the session may have a sandbox: a live
// connection, one the Manager knows, or one the runtime has (a previous
// process's, not yet taken over). Only a definite "not found" says no, so
// looking for tasks never creates a sandbox.
func (e *Executor) hasSandbox(ctx context.Context, session string) bool {
	if e.connected(session) || e.cfg.Manager.Touch(e.cfg.Tenant, session) {
		return true
	}
	_, err := e.cfg.Manager.Inspect(ctx, e.cfg.Tenant, session)
	return !errors.Is(err, sandbox.ErrNotFound)
}

// connected reports whether the session has a live connection.
func (e *Executor) connected(session string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.agents[session]
	return ok
}

// Close closes the connections. Sandboxes and their tasks stay: they belong
// to the Manager, and a later process re-adopts them.
func (e *Executor) Close() error {
	e.mu.Lock()
	e.closed = true
	agents := e.agents
	e.agents = map[string]*conn{}
	e.mu.Unlock()
	e.cancel()
	for _, a := range agents {
		a.close()
	}
	e.wg.Wait()
	return nil
}

// Forget closes and drops the session's cached connection, e.g. before its
// sandbox is removed.
func (e *Executor) Forget(session string) {
	e.mu.Lock()
	a, ok := e.agents[session]
	delete(e.agents, session)
	e.mu.Unlock()
	if ok {
		a.close()
	}
}

// agent returns the session's connection, creating the sandbox and dialling
// its agent as needed. A sandbox whose agent cannot be dialled is dead: it is
// removed and created afresh, once.
func (e *Executor) agent(ctx context.Context, session string) (*conn, error) {
	if err := executor.ValidSession(session); err != nil {
		return nil, err
	}
	e.mu.Lock()
	a, ok := e.agents[session]
	e.mu.Unlock()
	if ok {
		e.cfg.Manager.Touch(e.cfg.Tenant, session)
		return a, nil
	}
	spec, err := e.cfg.Spec(session)
	if err != nil {
		return nil, executor.Errorf(executor.ErrUnavailable, "sandbox spec for session %s: %w", session, err)
	}
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		sb, err := e.cfg.Manager.Ensure(ctx, spec)
		if err != nil {
			return nil, executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: %w", session, err)
		}
		ag, err := e.cfg.Dial(ctx, sb)
		if err == nil {
			return e.keep(session, ag, sb), nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		// A sandbox the runtime says runs has its agent (PID 1) alive:
		// not answering is the network's doing for a while — a new
		// server pod's address not yet in the sessions' NetworkPolicy
		// (kube-router applies it moments after the pod starts), a
		// congested node. Removing it would end its background tasks, so
		// it is dialled again, and never removed.
		if ag, err := e.redial(ctx, spec, sb, err); err == nil {
			return e.keep(session, ag, sb), nil
		} else if errors.Is(err, errStillRunning) {
			return nil, executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: %w", session, err)
		}
		// The agent is gone: the sandbox is dead. Replace it; the session
		// (its workspace) goes on into the new one.
		if rerr := e.cfg.Manager.RemoveSandbox(ctx, e.cfg.Tenant, session); rerr != nil && !errors.Is(rerr, sandbox.ErrNotFound) {
			return nil, executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: agent unreachable (%v); removing it: %w", session, err, rerr)
		}
	}
	return nil, executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: agent unreachable: %w", session, lastErr)
}

// keep makes ag the session's connection, unless a concurrent call
// dialled first: then there is one connection, the first.
func (e *Executor) keep(session string, ag Agent, sb sandbox.Sandbox) *conn {
	e.mu.Lock()
	if prev, ok := e.agents[session]; ok {
		e.mu.Unlock()
		ag.Close()
		return prev
	}
	a := e.connect(ag, sb)
	e.agents[session] = a
	e.mu.Unlock()
	return a
}

// errStillRunning is redial's error for a sandbox that runs but whose
// agent did not answer within redialFor.
var errStillRunning = errors.New("its agent does not answer although the sandbox runs")

// redialFor bounds how long redial waits for the agent of a running
// sandbox; redialFirst is its first pause, doubled up to redialMax.
var (
	redialFor   = 30 * time.Second
	redialFirst = 100 * time.Millisecond
	redialMax   = 2 * time.Second
)

// redial dials sb's agent again for as long as the runtime says the
// sandbox runs, up to redialFor. It returns the runtime's error, or
// dialErr, when the sandbox is not running (it is dead: the caller
// replaces it), and an error wrapping errStillRunning when the sandbox
// runs but its agent never answered.
func (e *Executor) redial(ctx context.Context, spec sandbox.Spec, sb sandbox.Sandbox, dialErr error) (Agent, error) {
	deadline := time.Now().Add(redialFor)
	pause := redialFirst
	for {
		cur, err := e.cfg.Manager.Inspect(ctx, spec.Tenant, spec.Session)
		if err != nil || cur.State != sandbox.StateRunning || cur.ID != sb.ID {
			return nil, dialErr
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (for %s: %v)", errStillRunning, redialFor, dialErr)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, redialMax)
		ag, err := e.cfg.Dial(ctx, cur)
		if err == nil {
			return ag, nil
		}
		dialErr = err
	}
}

// check passes err through, dropping the session's connection when it is a
// transport failure rather than an answer of the agent.
func (e *Executor) check(session string, a *conn, err error) error {
	if err == nil || classified(err) {
		return err
	}
	e.mu.Lock()
	if e.agents[session] == a {
		delete(e.agents, session)
	}
	e.mu.Unlock()
	a.close()
	return executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: agent: %w", session, err)
}

// classified reports an error the agent answered with (it carries a class),
// as opposed to a broken connection.
func classified(err error) bool {
	for _, c := range []error{executor.ErrInvalid, executor.ErrNotFound, executor.ErrAborted, executor.ErrLimit} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// connect wraps a new connection to sb's agent and starts the relay of its
// egress, for as long as the connection is kept. The caller holds e.mu.
func (e *Executor) connect(ag Agent, sb sandbox.Sandbox) *conn {
	ctx, cancel := context.WithCancel(e.life)
	c := &conn{Agent: ag, stopEgress: cancel, egress: sb.Network == sandbox.NetworkEgress}
	if c.egress && e.cfg.Egress != nil && !e.closed {
		session := sb.Session
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.cfg.Egress(ctx, sb, func(credential string) (context.Context, bool) { return e.granted(session, credential) })
		}()
	}
	return c
}

// spawn runs fn in a goroutine Close waits for; false (fn not run) once the
// executor is closed.
func (e *Executor) spawn(fn func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		fn()
	}()
	return true
}

// withEgress points the command's HTTP clients at the sandbox's egress
// proxy, if it has one, and when the call holds PermissionNetwork gives it a
// credential of its own in spec.EgressGrant, which the agent binds to the
// command's process tree; release, nil without a credential, ends it. A
// call granted the network in a sandbox without a proxy (created while its
// policy gave no network) is refused: it would fail in ways that do not say
// why.
func (e *Executor) withEgress(c *conn, spec executor.Spec) (_ executor.Spec, release func(), _ error) {
	if !c.egress {
		if e.cfg.Egress != nil && slices.Contains(spec.Permissions, PermissionNetwork) {
			return spec, nil, executor.Errorf(executor.ErrInvalid,
				"the network permission was granted, but session %s's sandbox has no egress proxy (it was created while its policy gave no network); delete the session to get a sandbox with one", spec.Session)
		}
		return spec, nil, nil
	}
	if slices.Contains(spec.Permissions, PermissionNetwork) {
		// The credential goes to the agent, not into the environment: its
		// proxy presents it only for connections of this command's tree.
		credential := rand.Text()
		e.grant(spec.Session, credential)
		release = sync.OnceFunc(func() { e.revoke(spec.Session, credential) })
		spec.EgressGrant = credential
	}
	vars := egresswire.Env(egresswire.DefaultListen)
	env := make([]string, 0, len(spec.Env)+len(vars))
	for _, kv := range spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		switch _, ours := vars[k]; {
		case !ours:
			env = append(env, kv)
		case k == "NO_PROXY" || k == "no_proxy":
			// The spec's (a policy's env) wins.
			env = append(env, kv)
			delete(vars, k)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	spec.Env = env
	return spec, release, nil
}

func (e *Executor) grant(session, credential string) {
	ctx, cancel := context.WithCancel(e.life)
	e.grantMu.Lock()
	defer e.grantMu.Unlock()
	if e.grants[session] == nil {
		e.grants[session] = map[string]grant{}
	}
	e.grants[session][credential] = grant{ctx: ctx, cancel: cancel}
}

// revoke ends a grant: its context ends, and with it the tunnels the relay
// opened for it.
func (e *Executor) revoke(session, credential string) {
	e.grantMu.Lock()
	defer e.grantMu.Unlock()
	if g, ok := e.grants[session][credential]; ok {
		g.cancel()
		delete(e.grants[session], credential)
	}
	if len(e.grants[session]) == 0 {
		delete(e.grants, session)
	}
}

// granted returns the context of session's grant named by credential, ok
// false when there is none in force.
func (e *Executor) granted(session, credential string) (context.Context, bool) {
	if credential == "" {
		return nil, false
	}
	e.grantMu.Lock()
	defer e.grantMu.Unlock()
	g, ok := e.grants[session][credential]
	return g.ctx, ok
}
