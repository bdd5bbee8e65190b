// Package agent is the supervisor that runs as PID 1 of every sandbox
// (cmd/shellbox-agent is its flags and wiring): it bounds its own process
// (SetUpProcess), drops the capabilities its commands must not inherit
// (LimitCapabilities), runs commands through a local executor set up for
// a sandbox, serves the agentapi protocol, runs the egress proxy, and
// reaps the orphans it adopts (Serve).
//
// Everything under agent/ runs inside the sandbox, next to the code it
// confines, and is one review scope: a change here is a change to what an
// attacker in the sandbox faces. It imports agentapi (the wall) and leaf
// packages (executor, executor/files, executor/output, executor/local,
// confine), never the host side (sandbox/, session/, server/,
// executor/sandboxed).
//
// Sub-packages, by responsibility:
//   - agent/apiserver: the server half of the agentapi protocol (commands,
//     tasks, files, spill files, the workspace's export and import, the
//     egress long poll) over the executor.
//   - agent/egress: the HTTP proxy commands reach the network through, and
//     the attribution of a connection to the process tree holding it, which
//     decides whether it carries a call's network grant.
//   - agent/landlock: the exec shim that puts each call in a Landlock
//     domain of its own, so one call cannot open another's /proc/<pid>/mem.
//   - agent/notrace: the seccomp filter that keeps commands from tracing
//     one another (ptrace, process_vm_*, pidfd_getfd).
//   - agent/pid1: what the command runner (executor/local) does differently
//     as PID 1: tag groups, the inherited OOM score and OOM reporting, as
//     local.PID1 hooks, and the reaping of adopted orphans.
//   - the workspace stream it serves (GET and PUT /v1/workspace) is
//     package agentapi/workspace: a format of the wall, which the host also
//     writes for a frozen sandbox's checkpoint (sandbox/containerd).
//
// Files: supervisor.go (Options, Serve, the thread and fd bounds, reaping,
// the commands' base environment); capabilities.go (the bounding set, and
// the lookup capabilities kept permitted for the egress proxy);
// checkpoint.go (the host socket closed before a gVisor checkpoint and
// opened again after the restore, and the hook that asks for it:
// `shellbox-agent checkpoint-hook`).
//
// What stays in executor/local, because it is the runner's own state: the
// register of leaders a reaper must spare (leaders.go), the tracking of a
// tagged tree (tagtree.go) and network grants bound to trees (grant.go).
// The raising of the lookup capabilities (executor/files,
// lookupcaps_linux.go) stays with AsUser, whose capability helpers and
// thread budget it shares.
//
// What the agent runs as, what it promises its commands, its cost, and
// each of cmd/shellbox-agent's flags:
// docs/architecture.md#the-agent-pid-1-cmdshellbox-agent-and-agent.
package agent
