// Package sandbox is the per-session sandbox layer: the Spec of a session's
// sandbox, the small Runtime interface its backends implement (sandbox/docker,
// sandbox/containerd and kube/), and the Manager that owns the
// lifecycle.
//
// # One spec, many translations
//
// A Spec is built once from the tenant's policy with pure options
// (DefaultSpec, NewSpec, WithMemory, Compose, ...) and validated with errors
// that name the field. Backends only translate it; every hardening decision
// of a backend sits in one translation function (sandbox/docker: translate.go).
//
// # Lifecycle
//
// One sandbox per (tenant, session). Manager.Ensure creates it on first use
// (concurrent first uses share one creation), waits for the agent through the
// Ready hook, and reuses it after. Reap removes sandboxes idle for a TTL,
// Remove deletes one on request, and Adopt, at server start, keeps this
// owner's running sandboxes, removes dead ones, and has the runtime sweep
// state no sandbox uses (Sweeper). Sandboxes carry labels (org.shellbox.tenant, .session,
// .owner, .managed) so a restarted server finds its own and never another
// server's.
//
// # Warm pools
//
// A pool holds ready sandboxes of one template: a tenant's Spec with no
// session (PoolTarget). Pooled sandboxes are created under reserved session
// names (PoolPrefix, the template's hash, a random suffix), so they carry
// the ordinary labels and every runtime creates, finds, lists and removes
// them unchanged; no client may name a session with that prefix.
//
// Ensure, for a session with no sandbox, claims a ready pooled sandbox whose
// TemplateHash (everything in the Spec but Session and Owner) equals the
// session's Spec's, so a session asking for what the template lacks
// (another image, other mounts: a bind mount cannot be added to a running
// container) gets a cold start. Nothing per session lives in the sandbox
// itself: the commands' environment (DSH_SESSION_ID included) is built per
// call, the egress allowlist is decided per connection by the tenant's
// policy as it is then, and the user, resources and mounts are the
// tenant's (the template's). The agent is checked (Config.Ready) at claim.
//
// A claim is a record in Claims, made atomically before the sandbox is
// handed out (DirClaims: link(2), which fails when the name exists; on
// Kubernetes, kube.Claims: an annotation on the pooled pod, written by a
// patch conditioned on its resourceVersion), so a pooled sandbox goes to
// one session only, whichever
// processes race for it and wherever one crashes: a record made just before
// a crash is found by Adopt, which gives the sandbox to its session.
// Adopt tells claimed sandboxes (adopted as their sessions') from pooled,
// unclaimed ones (kept for the pools) and drops claim records whose sandbox
// is gone; List shows claimed sandboxes under their sessions and pooled ones
// not at all.
//
// Two invariants hold across processes. A session holds one claimed
// sandbox: Claims.Claim returns the one the session holds if another
// process claimed one for it an instant before (two replicas serving a
// new session's first calls), and the Manager hands that one out and puts
// its own pick back. And a claimed sandbox is never removed as pooled:
// the Manager removes a pooled sandbox only after Claims.Retire, which is
// atomic against Claim (DirClaims: the same link(2) of a retirement mark;
// kube.Claims: a delete conditioned on the unclaimed pod's
// resourceVersion), and leaves it to its session when a claim won
// (ErrAlreadyExists; FillReport.Claimed). A crash between a retirement
// and the removal leaves a retired sandbox (Claims.List: an empty
// Session), which Adopt removes.
//
// Fill is one pass that makes the engine match the wanted pools: it creates
// what is missing, only while a creation slot is free and no session waits
// for one (sessions first), and removes pooled sandboxes no pool wants (a
// template change rolls its pool: the old ones are removed unclaimed, never
// handed out). One process runs it (FillEvery): the server on one host, the
// elected replica on Kubernetes. Its list of ready sandboxes is its own
// (what it created and adopted), so on Kubernetes it can hold a pod another
// replica claimed since: Retire is what spares it.
//
// # Admission
//
// Creations (not claims, not adoptions) take one of Config.MaxCreating
// slots; past them they queue, at most Config.CreateQueue of them, for at
// most Config.CreateQueueWait, then fail (ErrUnavailable) with "too many
// sandboxes being created: N in progress, M queued; waited 30s". So a burst
// of new sessions cannot take the host's CPUs from the calls of existing
// ones, which never wait here.
//
// # Reaching the agent
//
// A runtime says, per sandbox, how to reach its agent (Sandbox.Agent, an
// agentapi.Endpoint: a unix socket on one host, a pod IP and a per-session secret on
// Kubernetes); everything else a caller needs of a sandbox — commands,
// tasks, spill files, the egress relay — the agent serves on that endpoint.
// Host directories, sockets, the bind-mounted agent binary and the spill
// tmpfs are details of the single-host runtimes (sandbox/hostdir), never
// fields a caller sees.
//
// The Manager does not speak the agent's protocol. It sits under executor/,
// which drives commands through the agent (cmd/shellbox-agent). Nothing here
// renders model text. sandboxtest holds the runtime conformance suite that
// every runtime (the in-memory fake, Docker, containerd) runs unchanged.
package sandbox
