// Package kube is the Kubernetes backend of sandbox.Runtime, on
// k8s.io/client-go: one pod per session in Config.Namespace, named
// PodName(tenant, session), found by that name (Get) and by labels (List),
// its agent reached over the pod network on a TCP port with a per-session
// token. The pod is built from the one sandbox.Spec by translate
// (translate.go, pure and unit-tested field by field, and evaluated with
// the Pod Security admission's own checks).
//
// What the package holds, by file:
//   - translate.go: the pod (an init container installs the static agent
//     into an emptyDir; the agent is PID 1 of the sandbox container;
//     read-only root, no capabilities but what the Pod Security level
//     allows, memory emptyDirs of the Spec's sizes, resources, the
//     RuntimeClass, labels and annotations).
//   - kube.go: Create, Get, List, Remove and the token. Create makes 32
//     random bytes per session, kept in a Secret of the pod's name owned
//     by the pod (created after it, so a Secret never exists without its
//     owner); the init container hands it to the agent as a file, never
//     as a variable of the sandbox container.
//   - errors.go: API errors converted once into the sandbox classes
//     (Forbidden says whether RBAC, the RuntimeClass or an admission
//     plugin refused).
//   - netpol.go: the release's NetworkPolicy: session pods get no egress
//     at all and ingress only from the server pods to the agent port.
//   - lease.go: the Elector, client-go's leader election over the Lease
//     LeaseName(release); the holder reaps idle sessions and keeps the warm
//     pools (session.Config.Leader).
//   - usage.go: Usage and SandboxWorkspaceUsage, for the usage Sampler,
//     from the kubelets' summaries (GET
//     /api/v1/nodes/<node>/proxy/stats/summary, one request per node per
//     sampling pass, its body read to 16 MiB at most): the pod's CPU time
//     and working set, and its workspace volume's used bytes, rather than
//     a statfs by the pod's agent (cheaper per pass, and out of the
//     commands' reach, for figures up to two minutes old: the reasons and
//     the costs are at the top of usage.go). A reading that fails is
//     ErrUnavailable, and the Sampler keeps the last value.
//   - claims.go: Claims, warm-pool claims kept on the pooled pod (an
//     annotation written by a patch conditioned on its resourceVersion),
//     serialised per session by a claim lock Secret, which cold starts take
//     too (Claims.Cold); Retire removes an unclaimed pod only.
//
// Pod Security (Config.PodSecurity): baseline by default, where the agent
// is root with SETUID, SETGID and KILL only and tree kills are exact (tag
// groups); restricted as a choice, where agent and commands share
// Spec.UID, no capabilities anywhere, and tree kills are process groups
// only.
//
// Lifetimes: Create waits (Config.ReadyTimeout) for the pod to be ready and
// fails early on a state that does not pass by waiting; a pod that does not
// become ready is deleted with its Secret. Remove deletes the pod and its
// Secret and waits until the pod is gone. The runtime has no
// sandbox.SessionState: a session's /workspace is the pod's emptyDir.
//
// Pods deleted behind shellbox's back (deletions.go): Remove marks its
// own deletions (AnnotationRemoving) and ends their agent at once;
// WatchDeletions tells the leader of the others while their agent serves
// through the grace (Config.SaveOnDelete), so it saves their workspace;
// WatchGone tells every replica when such a pod's agent or the pod itself
// is gone, so a replica that served it lets go of its connection at once.
//
// RBAC the runtime needs in Config.Namespace: pods (create, get, list, watch,
// delete, patch), secrets (create, get, list, delete, patch), events
// (list), networkpolicies (get, create, update; with a ServerSelector),
// leases (get, create, update); and, cluster-wide and optional,
// runtimeclasses (get) and nodes/proxy (get: usage; the chart's
// usage.kubeletStats, without which no usage is measured on Kubernetes).
//
// The design in full (the pod field by field, the token's path, what
// each Pod Security level costs, the lifecycle, the network, leader
// election, the claim and cold-start locks, and RBAC):
// docs/kubernetes.md#the-session-pods-kube. Installing it:
// docs/deployment.md#kubernetes.
package kube
