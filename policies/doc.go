// Package policies fills the permissions seam (tools.Gate) with per-tenant
// YAML policy files: for every bash and pwsh call, allow / ask / deny from
// ordered rules matched against the parsed command (every simple command,
// and what wrappers such as bash -c, eval, env, xargs, find -exec and sudo
// run), rules for sandbox_permissions escalations, and the tenant's sandbox
// settings and limits. README.md in this directory is the file reference.
//
// The pieces, one file each: the schema and loader (schema.go, load.go,
// problems.go: file:line errors), the compiled Policy (policy.go), the
// command analysis (command.go, wrappers.go, argvwrappers.go with opts.go,
// runners.go, reevaluated.go; pwsh.go and pwsh_match.go map what package pwsh
// reads of a PowerShell call onto it), the
// matcher (match.go), the Engine that decides, holds asks for approval and
// reloads the directory (engine.go), and the audit log (audit.go).
//
// Asks wait in an ApprovalStore (approvals.go): the Engine adds a pending
// approval, waits for an approver's decision (Finish) until the policy's
// askTimeout, and expires it itself when nobody answered or its caller
// went away. The default store is this process's memory; with several
// server replicas the store is the cluster's (package
// kube/approvals: Approval objects that any replica lists and
// decides, and the replica holding the call hears of through a watch).
//
// A policy's sandbox settings are plain values (Policy.Sandbox,
// Policy.SessionMounts): the session layer maps them onto a sandbox spec,
// and policies does not import package sandbox. The rules both check (id
// syntax, runtimes, mount targets, the egress allowlist) live in confine.
//
// Rules are a guardrail and an approval flow; the sandbox is the security
// boundary. What a static policy cannot read is never allowed by the
// default: a command name that is not a literal, a wrapper option it does
// not know, a script from a file or descriptor, a string bash evaluates
// later, a variable that changes what later commands run, a command that
// runs commands it does not follow (the unparseable decision applies), and
// an interpreter or make (unless a rule names it). README.md says what
// is read and what no command reader can confine.
package policies
