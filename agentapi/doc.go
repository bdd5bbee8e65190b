// Package agentapi is the sandbox wall: the protocol between the shellbox
// server and the agent inside each sandbox (package agent), shared by both
// sides and importing neither (nothing under agent/, sandbox/, session/,
// server/ or cmd/). It holds the versioned wire types, the error classes,
// the agent's Endpoint and thread budget, and the Client; the server half
// is agent/apiserver, and agentapi/egresswire holds what the egress proxy
// and the host's relay share.
//
// The protocol is the executor.BashExecutor seam, minus Resolve, carried
// over a unix socket (single-host runtimes) or TCP with a per-session
// bearer token (Kubernetes). agent/apiserver serves it over any Runner (the
// agent serves a local.Executor); Client speaks it and is a Runner itself,
// so a command run through the protocol behaves exactly as one run by the
// executor behind it. The conformance suite (executor/executortest) runs
// through it to prove that.
//
// # Transport
//
// HTTP/1.1 with JSON bodies over a unix socket, using net/http on both sides:
// keep-alive connections, no framing of our own, and an agent that can be
// debugged by hand:
//
//	curl --unix-socket /run/shellbox/agent.sock http://agent/v1/hello
//
// The socket's mode is 0600 (see Listen): in a sandbox the agent runs as root
// and its commands do not, so they cannot drive it. Whoever can connect can
// run anything as the sandbox user; that is the server, on the host, through
// the session's host directory.
//
// # Versioning
//
// The client starts with GET /v1/hello and refuses an agent whose protocol
// is not its own with a *VersionError:
//
//	agent protocol mismatch: shellbox speaks protocol 1, the agent at <socket> speaks 2 (agent version X)
//
// Every later request carries a Shellbox-Protocol header, which the agent
// checks likewise. The version changes only for incompatible changes; new
// fields and endpoints are compatible (decoders ignore unknown fields), so a
// field added to executor.Spec must be one an older agent may ignore, or the
// version must change.
//
// # Endpoints
//
// Bodies are JSON. executor.Spec has no JSON tags: its fields travel under
// their Go names ("Session", "Command", "Timeout", …), durations as integer
// nanoseconds. executor.Result, Output and Status use their JSON tags;
// executor.KillResult its Go names ("AlreadyDone", "Status").
//
//	GET  /v1/hello                   → Hello {"protocol":1,"agent":"…","pwsh":false,"root":"/workspace","home":"/workspace"}
//	POST /v1/run                     Spec → executor.Result; with "Accept: application/x-ndjson", a stream of Frames (below)
//	POST /v1/calls/{call}/cancel     → 204
//	POST /v1/start                   Spec → Started {"id":"…"}
//	GET  /v1/tasks?session=S         → TaskList {"tasks":[{"id":…,"session":…,"status":{…}}]}
//	GET  /v1/tasks/{id}?session=S    → TaskInfo, or 404 "no such task: <id>"
//	POST /v1/tasks/{id}/read         {"session":S} → executor.Output (moves the task's one read cursor)
//	POST /v1/tasks/{id}/peek         {"session":S} → executor.Output: tails of the whole output, cursor unmoved (operator console)
//	POST /v1/tasks/{id}/wait         {"session":S} → executor.Result, when the task ends (long poll)
//	POST /v1/tasks/{id}/kill         {"session":S} → executor.KillResult
//	GET  /v1/has?session=S&shell=pwsh → {"has":true}
//	GET  /v1/log                     → {"log":"…"}: the agent's recent log lines (which command's tree it signalled, and why)
//	GET  /v1/spill?path=P[&offset=N][&limit=M] → the bytes of spill file P (application/octet-stream)
//	POST /v1/egress                  (Upgrade: shellbox-egress/1) → 204, or 101 and a proxied connection
//	PUT  /v1/files?path=P[&max=N][&entries=M][&mode=0644]  a file's bytes, or (Content-Type: application/x-tar) a tar into the directory P → files.Written
//	GET  /v1/files?path=P[&max=N][&entries=M]  → a file's bytes, or (Accept: application/x-tar) a tar of P; Shellbox-File: files.Info as JSON
//	GET  /v1/files/stat?path=P       → files.Info (a final symlink not followed)
//
// A client that wants a foreground command's output while it runs (a Spec
// with Live set) asks POST /v1/run for application/x-ndjson. The agent then
// answers 200 at once with one JSON Frame per line: {"output":Chunk} frames
// as the command writes (Data base64; at most StreamPending bytes held for a
// slow client, the rest counted in Skipped; coalesced over StreamInterval),
// then exactly one {"result":Result} or {"error":Error}, whose Result is the
// one a plain run returns. The protocol version is unchanged: an agent that
// predates streaming ignores Accept and answers the plain Result, which the
// client returns as a run without live output; a client that predates it
// never asks. A client that stops reading is a client gone: the command's
// tree is killed, as when a plain run's connection drops.
//
// /v1/egress exists only in an agent that runs the sandbox's egress proxy;
// its long poll and what follows the 101 are sandbox/egress's (see that
// package's doc).
//
// /v1/spill exists only in an agent given its spill directory
// (ServerConfig.SpillDir), and is how a server with no host path to the spill
// files (Kubernetes) reads them. P is the file's path as the agent and the
// commands see it, exactly as Result.SpillPath and Output.SpillPath name it
// (/run/shellbox/spill/<session>/<id>.log): absolute, clean and strictly
// inside the spill directory, or the answer is 400. The agent opens it
// through an os.Root on the spill directory, so neither ".." nor a symlink
// leads out, and serves only a regular file that is not itself a symlink
// (400 otherwise; 404 "no such spill file: P" when it is missing). The body
// is the file from byte N (default 0) on, at most M bytes (default: to the
// end), with a Content-Length: the file's size when it was opened bounds it,
// so fewer bytes than M mean its end (a running task's spill may grow
// later; page on from there). An offset past the end answers an empty body.
//
// /v1/files exist only in an agent given its session root (ServerConfig.Files;
// the agent always is). P is absolute inside the root or relative to it; the
// agent resolves it where the files are, through an os.Root, as the sandbox
// user, and writes atomically: package files says how. The caps are the
// caller's (the policy's): max bytes of the transfer (for a tar, the
// stream), max entries of a tar; over them answers 413 (class too_large),
// while streaming. A full filesystem answers 507 (class no_space). A
// download that fails once its answer began breaks the connection, so a
// short stream is never mistaken for a whole one.
//
// A task of another session answers exactly as an unknown id. Request bodies
// are bounded (MaxSpecBytes for specs, MaxSmallBytes otherwise).
//
// # Errors
//
// A non-2xx answer has the body {"class":…,"message":…}. The message is the
// error's text, exactly what the model reads after "Error: " (e.g. "no such
// task: 1a2b3c"); the class maps to the executor error classes, and the
// client rebuilds an error of that class with that text:
//
//	invalid      400  executor.ErrInvalid (also 404 for an unknown endpoint)
//	not_found    404  executor.ErrNotFound
//	aborted      499  executor.ErrAborted
//	limit        429  executor.ErrLimit
//	unavailable  503  executor.ErrUnavailable
//	too_large    413  files.ErrTooLarge
//	no_space     507  files.ErrNoSpace
//	internal     500  an error without a class (a plain error on the client)
//
// # Lifetimes
//
// A foreground run belongs to its request: if the connection drops (the
// server died or gave up) the agent kills the command's tree. A caller that
// cancels does not drop the connection, though: the client names each run
// (Shellbox-Call header) and cancels it by name with
// POST /v1/calls/{call}/cancel, then waits on the run's own answer, which
// comes once the tree is gone (SIGTERM, grace, SIGKILL) — so the client's Run
// keeps executor.BashExecutor's promise that the tree is gone when it returns
// "tool call aborted". A cancel that overtakes its run (they travel on
// different connections) is remembered for a minute and applied on arrival.
//
// The command's timeout is the agent's to enforce, connection or not. A
// background task belongs to the agent: it outlives the request that started
// it, the client, and the server process, so a restarted server dials the
// agent again and finds its tasks with GET /v1/tasks and GET /v1/tasks/{id};
// their output since the last read, and their final status, are still there.
// A wait long poll ends when the task does or when the client goes away; a
// kill, once received, completes either way.
package agentapi
