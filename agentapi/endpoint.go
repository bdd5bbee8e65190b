package agentapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// Endpoint says how to reach a sandbox's agent: the one thing every caller
// above a runtime needs of it (the agent serves commands, tasks, spill files
// and the egress relay, all on this endpoint).
type Endpoint struct {
	// Network is "unix" (single-host runtimes: a socket in the session's
	// host directory) or "tcp" (Kubernetes: the pod's IP).
	Network string
	// Address is the socket's path, or host:port.
	Address string
	// Token, when set, is the per-session secret the agent requires, sent
	// as "Authorization: Bearer <Token>". A unix socket needs none: its
	// mode and directory keep everyone but the server out. Never log it.
	Token string
}

// connectBound bounds a connection attempt to an agent (Dial): one that
// answers connects in a millisecond (a unix socket, a pod on the cluster
// network), and in a second or two on a congested node. Past it the address
// is taken for gone: the pod IP of a pod deleted meanwhile is a blackhole on
// a cluster network (nothing answers its SYNs, nor says it is unreachable),
// and the kernel gives up on a connect only after its SYN retries, over a
// minute, while the call that dialled waits. A variable for the tests.
var connectBound = 5 * time.Second

// Dial connects to the agent. ctx bounds the connection attempt, and so
// does connectBound: an address that takes no connection within it (the
// pod of a sandbox gone, its address a blackhole) fails with an error
// that says so, which a request reports as ErrNotSent.
func (e Endpoint) Dial(ctx context.Context) (net.Conn, error) {
	switch e.Network {
	case "unix", "tcp":
	case "":
		return nil, fmt.Errorf("sandbox %w: the sandbox has no agent endpoint", executor.ErrUnavailable)
	default:
		// Of no class, as before the move (sandbox's own ErrInvalid): a
		// class of the executor's would make the sandboxed executor take
		// the failed dial for an answer of the agent (classified) and keep
		// the connection.
		return nil, fmt.Errorf("invalid sandbox spec: agent endpoint network %q (want unix or tcp)", e.Network)
	}
	d := net.Dialer{Timeout: connectBound}
	c, err := d.DialContext(ctx, e.Network, e.Address)
	// Either error stands for the bound's expiry: the dialer's context, or
	// the socket's write deadline set from it, whichever fires first.
	if err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
		// Not wrapped: this bound's expiry is no caller's deadline
		// (context.DeadlineExceeded), and "i/o timeout" says nothing more.
		return nil, fmt.Errorf("no connection to the agent at %s within %s (its sandbox may be gone, and its address with it)", e, connectBound)
	}
	return c, err
}

// String names the endpoint for logs and errors, without its token.
func (e Endpoint) String() string {
	if e.Network == "" {
		return "(no agent endpoint)"
	}
	return e.Network + ":" + e.Address
}
