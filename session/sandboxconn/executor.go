package sandboxconn

import (
	"context"
	"errors"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed"
	"github.com/shellbox/shellbox/sandbox"
)

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
	// sandbox.NetworkEgress (sandbox/egress): its Relay is started in its own
	// goroutine whenever a connection to such a sandbox's agent is made, and
	// must return once ctx ends, which happens when that connection is
	// dropped (the sandbox died or is being removed) or the executor is
	// closed. Commands of such a sandbox get egresswire.Env (NO_PROXY and
	// no_proxy only where the spec has none) and the hook's Env. Unset, such a sandbox's proxy
	// has no relay: its connections are refused.
	//
	// granted reports whether a connection's credential belongs to a call
	// of the sandbox's session that runs with PermissionNetwork, and if so
	// returns a context that ends with the call (or background task): such
	// a call's Spec carries a credential of its own (EgressGrant), which
	// the agent's proxy presents only for connections of the call's own
	// process tree. What the credential allows, and that its tunnels end
	// with the context, is the hook's to enforce.
	Egress EgressHook
}

// Executor is the sandboxed executor of one tenant over its Connections.
type Executor struct {
	*sandboxed.Executor
	conns *Connections
}

var _ executor.BashExecutor = (*Executor)(nil)

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
	conns := newConnections(cfg)
	ex, err := sandboxed.New(sandboxed.Config{Connections: conns, Limits: cfg.Limits, Root: cfg.Root, BaseEnv: cfg.BaseEnv})
	if err != nil {
		conns.Close()
		return nil, err
	}
	return &Executor{Executor: ex, conns: conns}, nil
}

// Unchecked is Connections.Unchecked of the executor's connections.
func (e *Executor) Unchecked() (n int, why string) { return e.conns.Unchecked() }

// Forget closes and drops the session's cached connection, e.g. before its
// sandbox is removed.
func (e *Executor) Forget(session string) { e.conns.Forget(session) }

// Close ends the network grants of background tasks, then closes the
// connections and waits for their relays. Sandboxes and their tasks stay:
// they belong to the Manager, and a later process re-adopts them.
func (e *Executor) Close() error {
	e.Executor.Close()
	return e.conns.Close()
}

// agent is Connections.agent of the executor's connections.
func (e *Executor) agent(ctx context.Context, session string) (*conn, error) {
	return e.conns.agent(ctx, session)
}
