// Package policies fills the permissions seam (tools.Gate) with per-tenant
// YAML policy files: for every bash and pwsh call, allow / ask / deny from
// ordered rules matched against the parsed command (every simple command,
// and what wrappers such as bash -c, eval, env, xargs, find -exec and sudo
// run), rules for sandbox_permissions escalations, and the tenant's sandbox
// settings and limits. README.md in this directory is the file reference.
//
// The pieces, one file each: the schema and loader (schema.go, load.go,
// nodecheck.go: file:line errors), the compiled Policy (policy.go), the
// command analysis (command.go, wrappers.go; pwsh.go and pwsh_match.go
// map what package pwsh reads of a PowerShell call onto it), the
// matcher (match.go), the Engine that decides, holds asks for approval and
// reloads the directory (engine.go, approvals.go), and the audit log
// (audit.go).
//
// Rules are a guardrail and an approval flow; the sandbox is the security
// boundary. What a static policy cannot read (a command name that is not a
// literal) is never allowed.
package policies
