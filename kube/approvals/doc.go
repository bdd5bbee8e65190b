// Package approvals is the policies.ApprovalStore of server replicas
// on Kubernetes: every ask is an Approval object (approvals.shellbox.dev,
// a namespaced CustomResourceDefinition the chart installs from its crds/
// directory), so any replica lists and decides what another holds, and
// every replica's subscribers (the server's SSE and MCP streams) hear of
// every change.
//
// An Approval lives in the sessions namespace (Config.Namespace), named
// "ap-" and the 16 hex digits of its id (ap_<hex>), labelled with its
// release; the call is in its spec, the decision in its status. A tenant
// never sees another's: List filters by spec.tenant, and Finish of another
// tenant's or release's object is ErrNoSuchApproval.
//
// Who does what:
//   - Add (the replica holding the call) creates the object, pending.
//   - Finish (an approver on any replica, or the holder expiring it)
//     updates it conditioned on the resourceVersion it read: of two
//     decisions exactly one is written, the other gets
//     policies.ErrAlreadyDecided with the winning decision.
//   - Wait (the holder) is woken by one informer per replica, and rereads
//     its approval every Config.Poll in case the watch lags.
//   - Expiry is the holder's; an orphan (its holder died) is expired by
//     whichever replica sweeps first (Config.SweepInterval,
//     Config.OrphanGrace).
//   - Subscribers are called from the watch, never from a write.
//   - History: each tenant keeps its newest Config.MaxHistory decided
//     Approvals.
//
// The object and each step in full: docs/kubernetes.md#approvals-shared-by-the-replicas-kubeapprovals.
//
// RBAC in Config.Namespace: approvals.shellbox.dev get, list, watch,
// create, update, delete.
package approvals
