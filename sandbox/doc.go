// Package sandbox is the per-session sandbox layer: the Spec of a session's
// sandbox, the small Runtime interface its backends implement (sandbox/docker,
// sandbox/containerd and sandbox/kube), and the Manager that owns the
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
// # Reaching the agent
//
// A runtime says, per sandbox, how to reach its agent (Sandbox.Agent, an
// Endpoint: a unix socket on one host, a pod IP and a per-session secret on
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
