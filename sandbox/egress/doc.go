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
// The Proxy runs inside the sandbox, in the agent (package agent/egress),
// and has no way out of its own. The Relay, this package, runs in the
// server: it keeps long polls open on the agent's socket (POST /v1/egress
// of the agentapi protocol, so nothing new crosses the sandbox boundary),
// checks each waiting connection's destination against the tenant's
// current policy (a reload applies to the next connection), dials it from
// the host, and splices the bytes. Commands find the proxy through
// HTTP_PROXY and its kin (agentapi/egresswire.Env); a client that ignores
// them gets no network at all: the allowlist fails closed. Names are
// resolved on the host, by the Relay, never in the sandbox.
//
// Both ends distrust the other side of the socket: reads are under deadlines
// and size limits, a Relay holds at most MaxTunnels tunnels, backs off from
// an agent that answers nonsense, and logs at most a line a second.
//
// A call granted the network permission carries no credential: the proxy
// presents its grant (egresswire.CredentialHeader) only for a connection
// held by that call's process tree alone. The relay's Check returns a
// Decision: Addr vets every address the dial would connect to (so an
// allowlisted name cannot lead to the server's loopback or a metadata
// service), and Until ends the tunnel with the grant it was allowed under.
//
// A Decision with an Intercept terminates the connection's TLS in the
// relay instead (intercept.go): the client is shown a leaf of the tenant's
// CA for the connection's host, every request on the connection must name
// that host (SNI, Host, absolute URL; CONNECT inside is refused), its
// header is rewritten (credentials injected, package secrets) and it goes
// upstream over the relay's own TLS, verified against the server's roots,
// HTTP/1.1 both ways or h2 both ways (the client is offered h2 by ALPN
// only when the upstream agreed to it), a 101 answer (WebSocket) spliced
// from there on. On h2 (intercept_h2.go) each stream is such a request,
// judged alone; a refused gRPC request is answered as gRPC ends a call
// (grpc-status, grpc-message naming the rule), since gRPC clients read no
// body. What the HTTP/2 layer refuses before the relay's handler (a
// malformed stream, a 431, a rapid-reset flood) is counted on the
// connection (h2Watch) and recorded once it ends, as is a TLS handshake
// that failed: a record of the connection, counted Refused. Bytes that are not a TLS
// handshake are tunnelled blind: a plain-text request is never given a
// credential.
//
// An Intercept with Rules (a destination a policy gives HTTP rules) judges
// every request on the connection on its own, TLS or plain text (a plain
// one is then read as HTTP too, never given a credential): its path is
// brought to confine.NormalPath's one form (decoded, no dot segments, no
// runs of /; a path with no single reading, %2F say, is refused with 400),
// the first rule matching its method and that path decides, else the
// destination's default. A refused request is answered 403, the body and
// Shellbox-Error naming the rule ("shellbox egress: POST host/path is
// denied by rule <where it is written>: "<rule>""), and the connection
// ends: requests pipelined behind it are never sent, and a kept-alive
// connection earns nothing, as each request is read, judged and answered
// before the next is read. An allowed one goes upstream with the path it
// was judged by (confine.EncodePath), so the server reads what the rule
// saw; an Upgrade other than websocket (h2c) is refused, since the
// requests it would carry are not read. The rule that decided is in the
// request's RequestRecord.
//
// A blind tunnel's first flight is read all the same (blind.go): the
// server name of a TLS ClientHello, the Host of each plain-text HTTP
// request. A name other than the tunnel's is judged as a connection to
// that name, by Check, with the same grant: refused there, or terminated
// there (rules, credentials), the tunnel is closed (a request: 421), so a
// front end that routes by name (a CDN) cannot be asked, through a tunnel
// allowed for one of its names, for a name the policy refuses or judges.
//
// The design in full (the wire protocol of the poll and its verdict lines,
// the bounds on both ends, how a connection is attributed to a tree):
// docs/architecture.md#egress-sandboxegress.
package egress
