// Package egress is the in-sandbox half of the egress path: the HTTP proxy
// the agent serves to its commands (Proxy, 127.0.0.1:3128), which has no way
// out of its own and hands each connection to the server's relay over the
// agent socket, and the attribution of a connection to the process tree
// holding its socket (peer.go: Holders, TreeGrant), which decides whether
// the connection carries a call's network grant.
//
// The relay, the policy check and the wire protocol's description are the
// host side's: package sandbox/egress, and in full
// docs/architecture.md#egress-sandboxegress. The names both ends share on
// the wire are in agentapi/egresswire.
package egress
