// Package apiserver is the agent's half of the agentapi protocol: Server
// serves a Runner (in the agent, a local.Executor) over HTTP on the agent's
// socket (Listen, mode 0600) or a pod's TCP port, with the files, spill,
// workspace and egress endpoints the agent is configured for. The endpoints, bodies and
// error classes are agentapi's (see its package doc); the client that
// speaks to this server is agentapi.Client.
package apiserver
