// Package session is shellbox's session layer: everything between the
// server (or the CLI) and the runtimes, in one place, whichever runtime
// runs the sandboxes.
//
// A Service keeps, per tenant, an executor and a tools.Toolset: host
// processes for the local backend (Config.Runtime nil, unsandboxed, for
// development), else a sandboxed executor over one sandbox.Manager shared
// by every tenant, on any sandbox.Runtime (Docker, containerd), handed its
// connections by session/sandboxconn, which alone decides that a sandbox
// is dead. It owns:
//
//   - the one spec builder: a session's sandbox spec from the tenant's
//     policy (image, runtime, resources, user, mounts, network) over the
//     configured sandbox defaults (Defaults), or, for a tenant without a
//     policy, from those defaults and the tenant's allowed images and
//     runtimes (Choices);
//   - the session settings a client asked for at creation (image, runtime,
//     mounts), and the tenant's session quota;
//   - the egress relay of sandboxes whose policy allows network, decided
//     per connection by the tenant's current policy (egress.go);
//   - after a restart, adopting the sandboxes a previous process left and
//     watching their background tasks again (Start);
//   - the tenants' warm pools (KeepPools, PoolTargets): for a tenant whose
//     policy sets sandbox.pool.size, ready sandboxes made exactly as a
//     session of the tenant with no options gets its own, which such a
//     session claims on its first use (sandbox.Manager does the claiming);
//   - which process reaps idle sandboxes and keeps the warm pools
//     (Config.Leader): every server on one host; on Kubernetes, of the
//     replicas of a release, only the one holding its Lease
//     (kube's Elector), and only while it holds it.
//
// The Service implements server.Backend. Its observers (completion notices,
// gate and sandbox metrics, egress counts) are given at construction
// (Config.Notifier, Config.Metrics); nothing is assigned afterwards. cmd/ only parses flags
// and configuration, opens the runtime and constructs.
//
// Contexts: a Service's background work (re-watching, reaping, pools) runs
// under the context given to Start, reaping and pools under the leader's
// context within it, until that ends or Close, which waits for them (so a
// Lease is released before the process exits); relays under their
// executor's lifetime, which Close ends. Request contexts bound only the caller's wait.
package session
