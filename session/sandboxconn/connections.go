// Package sandboxconn owns the connection of each session to its
// sandbox, and is the one place that decides a sandbox is dead.
//
// Connections ensures the session's sandbox (sandbox.Manager creates it on
// first use and reuses it after), dials its agent, redials an agent that
// does not answer while the runtime says its sandbox runs, and replaces a
// sandbox whose agent is gone; after a broken foreground call it says
// whether the sandbox died of its memory limit. It keeps the per-session
// connection cache, the relay of each connection's egress and the network
// grants of calls (egress.go), and the readiness check's connection for
// the first dial (readyconns.go). The executor over a sandbox
// (executor/sandboxed) is handed these connections and knows nothing of
// sandboxes; New wires the two.
//
// A call whose connection fails drops it, and the sandbox is judged then
// (Broken, death.go): one the runtime no longer runs, or whose agent took a
// connection and answered neither the call nor a liveness check (stopped,
// wedged), is dead and removed at once. The next call (or the same call,
// when its request never reached the agent: agentapi.ErrNotSent) dials
// again, and a session without a live sandbox gets a fresh one, which finds
// the session's workspace where the runtime keeps one per session
// (sandbox.SessionState).
package sandboxconn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed"
	"github.com/shellbox/shellbox/sandbox"
)

// Connections are the connections of one tenant's sessions to their
// sandboxes' agents (sandboxed.Connections).
type Connections struct {
	manager *sandbox.Manager
	tenant  string
	spec    func(session string) (sandbox.Spec, error)
	dial    Dialer
	egress  EgressHook

	mu    sync.Mutex
	conns map[string]*conn // session → live connection

	// life bounds the egress relays and the network grants; Close ends it
	// and waits for the relays. closed (under mu) stops new ones.
	life   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool

	grantMu sync.Mutex
	grants  map[string]map[string]grant // session → credential → grant in force

	// probe checks that a sandbox's agent answers (agentapi.ProbeEndpoint;
	// the package's tests replace it).
	probe func(ctx context.Context, sb sandbox.Sandbox) error
}

var _ sandboxed.Connections = (*Connections)(nil)

// conn is a live connection to a session's agent, and the relay of its
// sandbox's egress if it has one.
type conn struct {
	agent Agent
	// sb is the sandbox as it was when the connection was made: Broken
	// judges that one, not a successor.
	sb         sandbox.Sandbox
	owner      *Connections
	egress     bool
	stopEgress context.CancelFunc
	egressEnv  func() map[string]string // the EgressHook's Env of the sandbox, nil without
	// noExecGuard is the agent's handshake's NoExecGuard: why it checks
	// no execs ("" : it does).
	noExecGuard string
}

// Agent implements sandboxed.Conn.
func (c *conn) Agent() Agent { return c.agent }

// close stops the relay and closes the connection.
func (c *conn) close() {
	c.stopEgress()
	c.agent.Close()
}

// newConnections returns the connections of cfg's tenant; cfg is checked.
func newConnections(cfg Config) *Connections {
	dial := cfg.Dial
	if dial == nil {
		dial = DialAgent
	}
	life, cancel := context.WithCancel(context.Background())
	return &Connections{manager: cfg.Manager, tenant: cfg.Tenant, spec: cfg.Spec, dial: dial, egress: cfg.Egress,
		conns: map[string]*conn{}, life: life, cancel: cancel, grants: map[string]map[string]grant{},
		probe: func(ctx context.Context, sb sandbox.Sandbox) error { return agentapi.ProbeEndpoint(ctx, sb.Agent) }}
}

// Conn implements sandboxed.Connections.
func (c *Connections) Conn(ctx context.Context, session string) (sandboxed.Conn, error) {
	cn, err := c.agent(ctx, session)
	if err != nil {
		return nil, err
	}
	return cn, nil
}

// agent returns the session's connection, creating the sandbox and dialling
// its agent as needed. A sandbox whose agent cannot be dialled is dead: it is
// removed and created afresh, once.
func (c *Connections) agent(ctx context.Context, session string) (*conn, error) {
	if err := executor.ValidSession(session); err != nil {
		return nil, err
	}
	c.mu.Lock()
	a, ok := c.conns[session]
	c.mu.Unlock()
	if ok && c.manager.Touch(c.tenant, session) {
		return a, nil
	}
	spec, err := c.spec(session)
	if err != nil {
		return nil, executor.Errorf(executor.ErrUnavailable, "sandbox spec for session %s: %w", session, err)
	}
	if ok {
		// The Manager holds the session (a suspend or a removal under
		// way: Touch refuses) or no longer knows the sandbox: the call
		// must not reach a sandbox on its way out. Ensure waits for
		// the operation and answers with the session's sandbox; the
		// cached connection serves if it is still that one.
		sb, err := c.manager.Ensure(ctx, spec)
		if err != nil {
			return nil, executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: %w", session, err)
		}
		if sb.ID == a.sb.ID && sb.Created.Equal(a.sb.Created) {
			return a, nil
		}
		c.Forget(session)
	}
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		sb, err := c.manager.Ensure(ctx, spec)
		if err != nil {
			return nil, executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: %w", session, err)
		}
		ag, err := c.dial(ctx, sb)
		if err == nil {
			return c.keep(session, ag, sb), nil
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
		// it is dialled again, and never removed. An agent that took the
		// connection and did not answer its handshake (agentapi.ErrNoAnswer:
		// stopped, wedged) is not the network's doing: it is dead.
		if !errors.Is(err, agentapi.ErrNoAnswer) {
			if ag, err := c.redial(ctx, spec, sb, err); err == nil {
				return c.keep(session, ag, sb), nil
			} else if errors.Is(err, errStillRunning) {
				return nil, executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: %w", session, err)
			}
		}
		// The agent is gone: the sandbox is dead. Replace it; the session
		// (its workspace) goes on into the new one.
		if rerr := c.manager.RemoveSandbox(ctx, sb); rerr != nil && !errors.Is(rerr, sandbox.ErrNotFound) {
			return nil, executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: agent unreachable (%v); removing it: %w", session, err, rerr)
		}
	}
	return nil, executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: agent unreachable: %w", session, lastErr)
}

// keep makes ag the session's connection, unless a concurrent call
// dialled first: then there is one connection, the first.
func (c *Connections) keep(session string, ag Agent, sb sandbox.Sandbox) *conn {
	c.mu.Lock()
	if prev, ok := c.conns[session]; ok {
		c.mu.Unlock()
		ag.Close()
		return prev
	}
	a := c.connect(ag, sb)
	c.conns[session] = a
	c.mu.Unlock()
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
// dialErr, when the sandbox is not running or its agent took a connection
// and did not answer (it is dead: the caller replaces it), and an error
// wrapping errStillRunning when the sandbox runs but its agent could not
// be reached.
func (c *Connections) redial(ctx context.Context, spec sandbox.Spec, sb sandbox.Sandbox, dialErr error) (Agent, error) {
	deadline := time.Now().Add(redialFor)
	pause := redialFirst
	for {
		cur, err := c.manager.Inspect(ctx, spec.Tenant, spec.Session)
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
		ag, err := c.dial(ctx, cur)
		if err == nil {
			return ag, nil
		}
		if errors.Is(err, agentapi.ErrNoAnswer) {
			return nil, err // the agent took the connection: not the network
		}
		dialErr = err
	}
}

// oomWait bounds how long a broken call waits for the engine to see its
// sandbox exit.
const oomWait = 3 * time.Second

// DiedOfOOM implements sandboxed.Connections: whether, after a call's
// connection broke, the session's sandbox died of its memory limit, and
// that limit (the session's spec's). Under gVisor a sandbox over its
// memory limit dies whole (the host's OOM killer takes the sentry, which
// holds every process of the sandbox), unlike runc where the kernel kills
// a command and the agent reports it. The session's next call gets a
// fresh sandbox.
func (c *Connections) DiedOfOOM(ctx context.Context, session string) (*executor.SandboxOOM, bool) {
	ctx, cancel := context.WithTimeout(ctx, oomWait)
	defer cancel()
	for {
		sb, err := c.manager.Inspect(ctx, c.tenant, session)
		if err != nil {
			return nil, false
		}
		if sb.State != sandbox.StateRunning {
			if !sb.OOMKilled {
				return nil, false
			}
			death := &executor.SandboxOOM{}
			if s, err := c.spec(session); err == nil && s.MemoryBytes > 0 {
				death.MemoryBytes = s.MemoryBytes
			}
			return death, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Exists implements sandboxed.Connections: a live connection, one the
// Manager knows, or one the runtime has (a previous process's, not yet
// taken over). Only a definite "not found" says no, so looking for tasks
// never creates a sandbox.
func (c *Connections) Exists(ctx context.Context, session string) bool {
	if c.connected(session) || c.manager.Touch(c.tenant, session) {
		return true
	}
	_, err := c.manager.Inspect(ctx, c.tenant, session)
	return !errors.Is(err, sandbox.ErrNotFound)
}

// connected reports whether the session has a live connection.
func (c *Connections) connected(session string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.conns[session]
	return ok
}

// Unchecked counts the sessions whose connected agent checks no execs
// (agentapi.Hello.NoExecGuard: its command rules hold only before a call
// runs), and gives one of their reasons.
func (c *Connections) Unchecked() (n int, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.conns {
		if a.noExecGuard != "" {
			n++
			if why == "" || a.noExecGuard < why {
				why = a.noExecGuard // the same one each time
			}
		}
	}
	return n, why
}

// Forget closes and drops the session's cached connection, e.g. before its
// sandbox is removed.
func (c *Connections) Forget(session string) {
	c.mu.Lock()
	a, ok := c.conns[session]
	delete(c.conns, session)
	c.mu.Unlock()
	if ok {
		a.close()
	}
}

// Close closes the connections, ends the relays and grants, and waits for
// the relays. Sandboxes and their tasks stay: they belong to the Manager,
// and a later process re-adopts them.
func (c *Connections) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*conn{}
	c.mu.Unlock()
	c.cancel()
	for _, a := range conns {
		a.close()
	}
	c.wg.Wait()
	return nil
}
