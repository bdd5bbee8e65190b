// Package sandbox is the per-session sandbox layer: the Spec of a session's
// sandbox, the small Runtime interface its backends implement (sandbox/docker
// first; containerd and Kubernetes later), and the Manager that owns the
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
// owner's running sandboxes and removes dead ones and host directories
// without a sandbox. Sandboxes carry labels (org.shellbox.tenant, .session,
// .owner, .managed) so a restarted server finds its own and never another
// server's.
//
// # Host directory
//
// Each session has <StateDir>/sessions/<tenant>/<session>/, mounted at
// /run/shellbox in the sandbox: the agent's socket (agent.sock) and spill/,
// where the agent writes the full output of commands. Both are root's, 0755:
// commands (a non-root uid) read spill files but cannot write there. The
// session's spill cap (Spec.SpillBytes) is a tmpfs mounted on spill/ by the
// Manager (SpillQuotaTmpfs, needs root) and is also handed to the agent
// (EnvSpillBytes).
//
// The Manager does not speak the agent's protocol: it returns a Sandbox whose
// SocketPath the caller dials. It sits under executor/, which drives commands
// through the agent (cmd/shellbox-agent). Nothing here renders model text.
package sandbox
