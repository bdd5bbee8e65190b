// Package egress gives a sandbox without a network interface a way out to an
// allowlist of host:port destinations, decided on the host.
//
// Sandboxes run with no network (Docker's --network none, and gVisor's
// --network=none): a loopback interface and nothing else. A tenant whose
// policy lists destinations (sandbox.network.allow) gets them through an
// HTTP proxy instead of an interface:
//
//	command in the sandbox ──HTTP_PROXY──▶ Proxy (the agent, 127.0.0.1:3128)
//	     ──agent socket (unix, host dir)──▶ Relay (the server) ──TCP──▶ host:port
//
// In detail:
//   - The Proxy runs inside the sandbox, in the agent (package agent/egress;
//     cmd/shellbox-agent --egress-listen). It accepts CONNECT host:port (HTTPS, and any TCP
//     protocol a client tunnels) and absolute-form requests (GET
//     http://host/…), and has no way out of its own: each connection waits
//     for the Relay.
//   - The Relay runs in the server. It keeps long polls open on the agent's
//     socket (POST /v1/egress, the agentapi protocol's socket, so nothing new
//     crosses the sandbox boundary and gVisor's --host-uds=create suffices:
//     the host connects, the sandbox never does). An answered poll names a
//     waiting connection's destination; the Relay checks it against the
//     tenant's current policy (a reload applies to the next connection),
//     dials it from the host, and splices the bytes.
//   - Commands find the proxy through HTTP_PROXY, HTTPS_PROXY (and their
//     lower-case forms) and NO_PROXY=localhost,127.0.0.1,::1, which the
//     executor adds to their environment (agentapi/egresswire.Env). curl, wget, pip, npm, git,
//     apt and Go honour them. A client that ignores them gets no network at
//     all: the allowlist fails closed.
//
// Names are resolved on the host, by the Relay, never in the sandbox (it has
// no resolver): an allowlisted name reaches whatever it resolves to there.
//
// # Wire protocol on the agent socket
//
// The Relay sends
//
//	POST /v1/egress HTTP/1.1
//	Connection: Upgrade
//	Upgrade: shellbox-egress/1
//
// The agent answers 204 when no connection waited for PollTimeout (the Relay
// polls again on the same connection), 404 when it runs no proxy, or
//
//	HTTP/1.1 101 Switching Protocols
//	Upgrade: shellbox-egress/1
//	Shellbox-Egress-Target: pypi-mirror.internal:443
//
// after which the socket connection belongs to that one proxied connection.
// The Relay writes one verdict line, "OK\n", "DENY <reason>\n" (the policy
// refused; the client gets 403 with the reason) or "FAIL <reason>\n" (the
// dial failed; 502), and after "OK" both ends copy bytes until either side
// closes.
//
// # Bounds
//
// Both ends distrust the other side of the socket: the agent runs in the
// sandbox. Client request heads and destinations, and the relay's poll
// answers, are read under deadlines and size limits; the proxy holds at
// most MaxConns client connections and MaxPending of them waiting for a
// relay (a connection waits RelayWait at most, and one that gave up holds no
// place); a Relay holds at most MaxTunnels tunnels, backs off from an agent
// that answers nonsense, and logs at most a line a second. Copies use fixed
// buffers.
//
// # Grants belong to the call's processes
//
// A call granted the network permission (sandbox_permissions) carries no
// credential: the executor hands its grant to the agent with the command
// (executor.Spec.EgressGrant), and the proxy presents it to the relay
// (egresswire.CredentialHeader) only for a connection whose client socket is held by
// that command's process tree alone (ProxyConfig.Grant, TreeGrant; see
// peer.go for how a connection is attributed). A client's
// Proxy-Authorization is refused with a reason.
//
// # What a connection may reach
//
// The relay's Check returns a Decision: Addr vets every address the dial
// would connect to, after names resolve on the server's host (so an
// allowlisted name cannot lead to the server's loopback or a metadata
// service), and Until ends the tunnel with the grant it was allowed under.
package egress
