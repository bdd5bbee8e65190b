// Package approvals is the policies.ApprovalStore of server replicas
// on Kubernetes: every ask is an Approval object (approvals.shellbox.dev,
// a namespaced CustomResourceDefinition the chart installs from its crds/
// directory), so any replica lists and decides what another holds, and
// every replica's subscribers (the server's SSE and MCP streams) hear of
// every change.
//
// # The object
//
// An Approval lives in the sessions namespace (Config.Namespace), named
// "ap-" and the 16 hex digits of its id (ap_<hex>): the name says nothing
// of the call. It is labelled org.shellbox.release (the replicas of a
// release see only their own), org.shellbox.tenant (a sanitised form, for
// kubectl) and app.kubernetes.io/managed-by=shellbox. The exact tenant,
// session, tool, command (clipped by the Engine, 16 KiB at most), workdir,
// rule, reason, justification, escalations, creation time and deadline
// are in its spec; state (pending, approved, denied, expired), approver,
// decision reason and decision time in its status. There is no status
// subresource: a decision is one update of the object. A tenant never
// sees another's: List filters by spec.tenant, and Finish of an object
// whose spec.tenant (or release) differs is ErrNoSuchApproval, as is an id
// that is not of the ap_<16 hex> form (no request is made for it).
//
// # Who does what
//
//   - Add (the replica holding the call) creates the object, pending. The
//     bound of pending approvals per tenant is checked against this
//     replica's cache: replicas creating at the same instant may pass it
//     by as many as they are.
//   - Finish (an approver on any replica, or the holder expiring it) gets
//     the object from the API server and updates it conditioned on that
//     resourceVersion: of two decisions exactly one is written, the other
//     gets a conflict, rereads, finds it decided and returns
//     policies.ErrAlreadyDecided with the winning decision.
//   - Wait (the holder) is woken by a watch: one informer per replica
//     (client-go's reflector: list, then watch, relisting after a failed
//     watch) keeps a cache of the release's Approvals and tells waiters of
//     every change of theirs, within milliseconds of the decision's
//     write. Besides the watch the holder rereads its approval from the
//     API server every Config.Poll (5s), so a watch that lags or is down
//     delays a decision at most that long.
//   - Expiry is the holder's: the Engine Finishes its ask as expired at
//     the deadline or when its caller goes away. A pending approval whose
//     holder died (its deadline passed more than Config.OrphanGrace ago)
//     is expired by whichever replica sweeps first (every
//     Config.SweepInterval; conditioned updates, so only one writes).
//   - Subscribers are called from the watch, never from a write: an
//     approval created or decided on replica A reaches B's subscribers as
//     it reaches A's (objects already there when the store starts are not
//     announced).
//   - History: each tenant keeps its newest Config.MaxHistory decided
//     Approvals; older ones are deleted (oldest decision first) by the
//     replica that decides (once its watch shows the decision), and by
//     every replica's sweep (deletes are conditioned on the object's UID;
//     a second replica's delete of the same object finds it gone). There
//     is no TTL: a quiet tenant's last decisions stay listed, as in
//     memory.
//
// RBAC in Config.Namespace: approvals.shellbox.dev get, list, watch,
// create, update, delete.
package approvals
