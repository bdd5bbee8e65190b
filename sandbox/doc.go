// Package sandbox is the per-session sandbox layer: the Spec of a session's
// sandbox, the small Runtime interface its backends implement (sandbox/docker,
// sandbox/containerd and kube/), and the Manager that owns the
// lifecycle.
//
// A Spec is built once from the tenant's policy with pure options
// (DefaultSpec, NewSpec, WithMemory, Compose, ...) and validated with errors
// that name the field. Backends only translate it; every hardening decision
// of a backend sits in one translation function (sandbox/docker: translate.go).
//
// One sandbox per (tenant, session). Manager.Ensure creates it on first use
// (concurrent first uses share one creation), waits for the agent through the
// Ready hook, and reuses it after. Reap removes sandboxes idle for a TTL,
// Remove deletes one on request, and Adopt, at server start, keeps this
// owner's running sandboxes, removes dead ones, and has the runtime sweep
// state no sandbox uses (Sweeper). Sandboxes carry labels (org.shellbox.tenant,
// .session, .owner, .managed) so a restarted server finds its own and never
// another server's.
//
// Warm pools: a pool holds ready sandboxes of one template (PoolTarget) under
// reserved session names (PoolPrefix). Ensure, for a session with no sandbox,
// claims a ready pooled sandbox of the session's TemplateHash (unless the
// session is to be restored from a saved image, Config.Restorable: its
// sandbox is then the image's, made cold); a claim is a
// record in Claims made atomically before the sandbox is handed out
// (DirClaims on one host, kube.Claims on Kubernetes). Two invariants hold
// across processes: a session holds one claimed sandbox, and a claimed
// sandbox is never removed as pooled (the Manager removes a pooled sandbox
// only after Claims.Retire, which is atomic against Claim). Fill makes the
// engine match the wanted pools; one process runs it (FillEvery).
//
// Admission: creations (not claims, not adoptions) take one of
// Config.MaxCreating slots, then queue (Config.CreateQueue,
// Config.CreateQueueWait) or fail with ErrUnavailable, so a burst of new
// sessions cannot take the host's CPUs from the calls of existing ones.
//
// A runtime says, per sandbox, how to reach its agent (Sandbox.Agent, an
// agentapi.Endpoint: a unix socket on one host, a pod IP and a per-session
// secret on Kubernetes); everything else a caller needs of a sandbox the agent
// serves on that endpoint. Host directories, sockets, the bind-mounted agent
// binary and the spill tmpfs are details of the single-host runtimes
// (sandbox/hostdir), never fields a caller sees.
//
// The Manager does not speak the agent's protocol. It sits under executor/,
// which drives commands through the agent (package agent). Nothing here
// renders model text. sandboxtest holds the runtime conformance suite that
// every runtime (the in-memory fake, Docker, containerd) runs unchanged.
//
// The design in full (claims and their crash cases, retirement, Fill, what
// lives in a pooled sandbox): docs/architecture.md#the-sandbox-layer-package-sandbox;
// the overview: docs/architecture.md#the-sandbox-and-its-agent.
package sandbox
