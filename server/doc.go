// Package server is `shellbox serve`: one HTTP listener that serves the
// tools to agent harnesses over MCP (streamable HTTP at /mcp, revision
// 2026-07-28 on a stateless core beside 2025-11-25 with MCP sessions,
// routed by each request's Mcp-Protocol-Version; stdio for a local harness) and a REST JSON API (sessions, tool calls, events as
// server-sent events, approvals), with bearer-token tenants, limits,
// Prometheus metrics and health endpoints.
//
// It imports no backend. Everything it runs goes through two seams: Backend
// (a tenant's Toolset and its sessions) and, optionally, Approvals (the
// permission requests a policy is waiting on), and, with replicas, an
// eventstream.EventRelay (kube/events on Kubernetes) that carries completion notices
// between them: a notice is delivered to this process's streams once
// (the newest 4,096 notices' keys are kept to drop a second copy), and a
// relayed one also to the Backend (NoticeReceiver) for the session's next
// tool result. cmd/shellbox implements Backend over the session layer.
//
// Tenancy: the tenant of a request is the one its bearer token maps to, never
// a name the client sends. A tenant's ids (sessions, tasks, approvals) are
// looked up within that tenant only, so another tenant's id answers exactly
// as an unknown one: 404 with "no such session|task|approval: <id>" (an MCP
// session id: 404 no_such_mcp_session).
//
// Errors are turned into HTTP statuses here and nowhere else: every non-2xx
// answer is a JSON body {"error": {"code": "...", "message": "..."}}.
package server
