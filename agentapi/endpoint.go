package agentapi

import (
	"context"
	"fmt"
	"net"

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

// Dial connects to the agent. ctx bounds the connection attempt only.
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
	var d net.Dialer
	return d.DialContext(ctx, e.Network, e.Address)
}

// String names the endpoint for logs and errors, without its token.
func (e Endpoint) String() string {
	if e.Network == "" {
		return "(no agent endpoint)"
	}
	return e.Network + ":" + e.Address
}
