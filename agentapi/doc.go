// Package agentapi is the sandbox wall: the protocol between the shellbox
// server and the agent inside each sandbox (package agent), shared by both
// sides and importing neither (nothing under agent/, sandbox/, session/,
// server/ or cmd/). It holds the versioned wire types, the error classes,
// the agent's Endpoint and thread budget, and the Client; the server half
// is agent/apiserver, agentapi/egresswire holds what the egress proxy
// and the host's relay share, and agentapi/workspace is the workspace
// stream (/v1/workspace's body): the agent packs and unpacks it inside,
// the host for a frozen gVisor sandbox's checkpoint.
//
// The protocol is the executor.BashExecutor seam, minus Resolve, carried
// over a unix socket (single-host runtimes) or TCP with a per-session
// bearer token (Kubernetes). agent/apiserver serves it over any Runner (the
// agent serves a local.Executor); Client speaks it and is a Runner itself,
// so a command run through the protocol behaves exactly as one run by the
// executor behind it. The conformance suite (executor/executortest) runs
// through it to prove that.
//
// The contract in brief:
//   - Transport: HTTP/1.1 with JSON bodies on net/http, on a socket of mode
//     0600 (agent/apiserver.Listen), so the sandbox's commands cannot drive the agent.
//   - Versioning: the client starts with GET /v1/hello and refuses an agent
//     of another protocol with a *VersionError; every later request carries
//     a Shellbox-Protocol header. A field added to executor.Spec must be one
//     an older agent may ignore, or the version must change.
//   - Errors: a non-2xx answer is {"class":…,"message":…}; the message is
//     the error's text, exactly what the model reads, and the client
//     rebuilds an error of that class (invalid, not_found, aborted, limit,
//     unavailable, too_large, no_space, internal) with that text.
//   - Bounds: request bodies are bounded (MaxSpecBytes for specs,
//     MaxSmallBytes otherwise); a task of another session answers exactly
//     as an unknown id.
//
// Ownership and cancellation: a foreground run belongs to its request (a
// dropped connection kills the command's tree); a caller that cancels
// names the run (Shellbox-Call) and cancels it with POST
// /v1/calls/{call}/cancel, and Run returns once the tree is gone, keeping
// executor.BashExecutor's promise. The command's timeout is the agent's to
// enforce, connection or not. A background task belongs to the agent: it
// outlives the request, the client and the server process, so a restarted
// server finds its tasks again with GET /v1/tasks.
//
// The reference, with every endpoint, body, streaming frame, error class
// and status code: docs/architecture.md#protocol-reference-agentapi.
package agentapi
