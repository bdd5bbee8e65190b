// Package kube is the Kubernetes backend of sandbox.Runtime, on
// k8s.io/client-go: one pod per session in Config.Namespace, named
// PodName(tenant, session), found by that name (Get) and by labels (List),
// its agent reached over the pod network on a TCP port with a per-session
// token. The pod is built from the one sandbox.Spec by translate
// (translate.go, pure and unit-tested field by field, and evaluated with
// the Pod Security admission's own checks).
//
// # The pod (translate.go)
//
//   - An init container runs the static agent of the shellbox image
//     (Config.AgentImage, Config.AgentPath) with --install: it copies
//     itself into an emptyDir, which the sandbox container mounts
//     read-only at /.shellbox; so any sandbox image works, as on Docker,
//     and the shellbox image needs no shell.
//   - The sandbox container runs that agent as PID 1 of its own pid
//     namespace (shareProcessNamespace false), serving on
//     --listen :Config.AgentPort. Readiness is a TCP probe of that port.
//   - readOnlyRootFilesystem, allowPrivilegeEscalation false (no_new_privs),
//     privileged false, capabilities drop ALL (and add only what the level
//     below allows), seccompProfile RuntimeDefault, default procMount,
//     automountServiceAccountToken false, enableServiceLinks false, no host
//     namespaces, no host ports or paths, restartPolicy Never (a dead agent
//     is a dead sandbox; the Manager replaces it), hostname "sandbox".
//   - /workspace, /tmp and the spill directory (/run/shellbox/spill) are
//     emptyDirs of medium Memory with sizeLimit = the Spec's sizes. Memory,
//     not disk: a memory-backed emptyDir is a tmpfs of exactly sizeLimit, so
//     filling it is ENOSPC for the command, as on Docker's tmpfs; a disk
//     emptyDir's sizeLimit is enforced only by the kubelet's periodic usage
//     check, which evicts the whole pod (the session) some seconds after the
//     limit is passed. The pages count towards the pod's memory limit (as
//     Docker's tmpfs do), so Create requires workspace+tmp+spill < memory.
//     The agent's own emptyDir is on disk (written once, Config.AgentDirBytes).
//     An emptyDir lives as long as its pod: it would survive a restart of
//     the container inside the pod, but with restartPolicy Never a sandbox
//     that dies is a pod the Manager replaces, so its /workspace starts
//     empty (unlike Docker and containerd, whose workspaces are per session
//     on the host: sandbox/hostdir). The runtime has no sandbox.SessionState.
//   - Resources: limits cpu = Spec.CPUs and memory = Spec.MemoryBytes;
//     requests memory in full, cpu at Config.CPURequestRatio of the limit.
//     The pids limit cannot be set per pod: it is the kubelet's
//     podPidsLimit, a node setting (the cluster must set it, below what the
//     smallest session memory holds of processes: docs/deployment.md). Under gVisor
//     Spec.PidsLimit is applied as on Docker, as RLIMIT_NPROC, which gVisor
//     counts per uid among the sandbox's own tasks: a pod spec has no
//     rlimits, so the agent sets it for its commands (--nproc). On runc it
//     is not applied (the kernel would count the uid's processes on the
//     whole node): the node's podPidsLimit is the only bound.
//   - runtimeClassName from Config.RuntimeClasses: runc on the cluster's
//     default handler, runsc on "gvisor".
//   - Labels org.shellbox.{managed,tenant,session,owner,runtime,network},
//     org.shellbox.release (Config.Release: the NetworkPolicy and the chart
//     select session pods by it) and app.kubernetes.io/managed-by; the
//     exact tenant, session and owner (label values are limited to 63
//     characters of [A-Za-z0-9._-]: the labels carry a sanitised form),
//     image, runtime, network and mounts (JSON) are annotations, from which
//     Get and List describe the sandbox. Host directory mounts are refused
//     (ErrInvalid): they would be hostPath volumes, which both levels below
//     forbid.
//
// # The token
//
// Create makes 32 random bytes (hex) per session and keeps them in a
// Secret of the pod's name, key "token", owned by the pod (ownerReference,
// without blockOwnerDeletion), so the garbage collector deletes it with the
// pod; Remove deletes it at once too. The pod is created first and the
// Secret second, with the owner reference in its create: a Secret never
// exists without its owner, so no failure or crash can leak one. A crash
// between the two leaves a labelled pod without a Secret, whose container
// cannot start (its init container's token variable refers to the missing
// Secret) and
// which Get reports StateCreated: pending, so a Manager that shares the
// pods with other replicas waits for it while it is younger than its
// CreateTimeout (another replica may be creating it) and replaces it
// after. The kubelet starts
// the sandbox container only after the init container, by when the Secret
// is there.
//
// The token reaches the agent as a file, never as a variable of the
// sandbox container: an initial environment block stays in PID 1's memory
// as /proc/1/environ, which gVisor shows to the commands' uid whatever the
// agent's dumpability, and under restricted (below) agent and commands
// share a uid. A Secret volume would be no better: readable by a command
// of the agent's uid, and read-only, so the agent could not remove it. So
// the init container gets the Secret's key (secretKeyRef) in its own
// environment (it has exited before any command exists) and writes it
// into a memory emptyDir of its own, "token" (64 KiB), mode 0400, owned by
// its uid, which is the agent's (--install --token-out; as root it also
// makes the directory root's, mode 0700); the agent reads it and removes
// it before it serves (--token-file). The agent makes itself
// non-dumpable, so /proc/1/mem is root's and ptrace is refused to anyone
// without CAP_SYS_PTRACE, and compares the token in constant time
// (agentapi).
//
// # Pod Security: baseline by default, restricted as a choice
//
// The restricted profile forbids running as root (runAsNonRoot,
// runAsUser) and adding any capability but NET_BIND_SERVICE. The agent of
// the Docker and containerd runtimes is root with SETUID, SETGID and KILL,
// because it runs each command as another, unprivileged uid with a
// supplementary "tag" group unique to the command (setgroups needs
// CAP_SETGID), which the command cannot drop: the tag is how the agent
// finds and kills a command's whole tree, setsid'd and double-forked
// escapees included, where it cannot make cgroups (executor/local: tag.go).
// Both levels are offered (Config.PodSecurity):
//
// PodSecurityBaseline (the default). The agent is root with SETUID, SETGID
// and KILL only (all three in baseline's allowed list), the init container
// root with CHOWN only (to give /workspace to the sandbox user, as Docker's
// tmpfs uid= does); commands run as Spec.UID with no capabilities. The pod
// meets baseline and fails exactly three checks of restricted, all for
// the one reason above: "unrestricted capabilities" (SETUID, SETGID, KILL;
// CHOWN in the init container), "runAsNonRoot != true" and "runAsUser=0"
// (TestPodSecurity runs the admission's own checks). Label the namespace
// pod-security.kubernetes.io/enforce=baseline (and warn/audit=restricted
// to see the gap). Everything Docker guarantees holds: exact tree kills,
// commands cannot signal, ptrace or read anything of the agent (another
// uid), nor write its spill directory (root's, 0755).
//
// PodSecurityRestricted. Agent and commands run as Spec.UID:GID, no
// capabilities anywhere (the agent with --no-setuid). The pod meets
// restricted. What that costs, and what holds:
//
//   - Tree kills are process groups only: without CAP_SETGID there are no
//     tag groups, and the cgroupfs of a pod is read-only, so a command that
//     leaves its process group (setsid, a daemon) survives its kill and
//     timeout and lives until the pod is deleted (still bounded by the pod's
//     memory and CPU and the node's pids limit). Without privilege this
//     cannot be made exact against a hostile command: a per-command
//     subreaper (PR_SET_CHILD_SUBREAPER, so the tree's orphans come to it)
//     is a process of the command's uid, which the command can SIGKILL
//     (only the namespace's init, the agent, is immune), after which its
//     orphans go to the agent and nothing says whose they are. What would
//     be exact: the agent ptracing every command with PTRACE_O_TRACEFORK,
//     VFORK and CLONE (every descendant attached at birth, its parent
//     known, no way to detach), at the price of a stop per fork and no
//     strace or gdb in the sandbox; or one command at a time (then
//     everything but PID 1 is the tree). Neither is built: baseline, which
//     is exact, is the default.
//   - Commands may signal the agent (same uid). As PID 1 of its pid
//     namespace the kernel drops SIGKILL and SIGSTOP from inside, and every
//     signal it has no handler for; the agent ignores all the others the Go
//     runtime would die of (so the kubelet's SIGTERM too: deletion ends the
//     pod with SIGKILL after GracePeriodSeconds). TestNoSetuid in
//     cmd/shellbox-agent sends them from a command.
//   - The OOM killer still picks a command before the agent: raising the
//     score a command is born with needs no privilege (the agent keeps its
//     own oom_score_adj open from before it turned non-dumpable).
//   - Commands cannot ptrace the agent or read its memory or environment
//     (non-dumpable; same uid is not enough without CAP_SYS_PTRACE), so the
//     token stays out of reach, and they cannot reach the agent as the
//     server does (no unix socket is made; TCP needs the token).
//   - Commands can write the spill directory (same uid): they can alter
//     their own session's spilled output, nothing else; the agent serves
//     spill files through os.Root and refuses symlinks.
//   - /workspace stays the emptyDir's root:root 0777 (no one may chown it),
//     so tools that check ownership (git's safe.directory) may complain.
//
// A later option is hostUsers: false (user namespaces): the agent would be
// root only inside the pod's user namespace; restricted still forbids the
// added capabilities, and this machine's runc (1.1) has no idmapped mounts.
//
// # Lifecycle
//
// Create waits (Config.ReadyTimeout, polling every Config.Poll) for the pod
// to run with its sandbox container ready and an IP, and fails early on a
// state that does not pass by waiting (ErrImageNeverPull, ErrImagePull,
// InvalidImageName, a container that terminated, a Failed pod, and a node
// whose container runtime has no handler for the RuntimeClass, which only
// the pod's events say: FailedCreatePodSandBox "no runtime for ..."). A pod that
// does not become ready fails Create with ErrUnavailable naming why, its
// conditions, and its last events (FailedScheduling, ...), and is deleted
// with its Secret. Remove deletes the pod (SIGTERM, SIGKILL after
// GracePeriodSeconds) and its Secret, and waits until the pod is gone.
//
// Errors are converted once (errors.go): NotFound, AlreadyExists,
// Conflict, Invalid/BadRequest become the sandbox classes; Forbidden is
// ErrUnavailable saying which: "no RBAC for pods in namespace X"
// (authorizer), "RuntimeClass missing", "refused by Pod Security admission"
// (label the namespace), or another admission plugin (quota, ...).
//
// # Network (netpol.go)
//
// A session pod has a network interface (unlike Docker's "none"), so a
// NetworkPolicy confines it: EnsureNetworkPolicy (with
// Config.ServerSelector) keeps one per release selecting its session pods
// by org.shellbox.managed and org.shellbox.release, with no egress at all
// (not the API server, another session pod, the cluster DNS or anything
// outside) and ingress only from the server pods to the agent port. The
// egress allowlist and network grants keep working through the relay on
// the agent connection, which the server opens; the agent's proxy listens
// on the pod's loopback only. Under gVisor grants fail closed here: the
// agent reads its commands' fd links with CAP_SYS_PTRACE there, which
// Pod Security baseline forbids, so the Docker and containerd runtimes'
// sandbox.GVisorLookupCaps are not added (executor/files, AsTracer). It
// needs a NetworkPolicy implementation on
// the cluster (kube-router on the lab's): without one the policy is inert.
//
// # Leader election (lease.go)
//
// The server replicas of a release share its sessions; one of them, the
// holder of the coordination.k8s.io/v1 Lease LeaseName(release) in
// Config.Namespace, reaps idle sessions and keeps the warm pools
// (session.Config.Leader). Elector is client-go's leaderelection over a
// LeaseLock (defaults 15s lease, 10s renew deadline, 2s retry), with the
// pod's name (POD_NAME) and a random suffix as identity. A leader that
// cannot renew stops leading (its lead context is cancelled) after the
// renew deadline, before the lease can have expired for the others; one
// that shuts down stops leading first and releases the Lease after, so the
// next takes over at its next retry.
//
// # Warm-pool claims (claims.go)
//
// Claims keeps which session a pooled pod was handed to on the pod itself,
// not in a server pod's directories (emptyDirs, gone with the pod, unseen
// by other replicas): the annotation AnnotationClaimedBy holds the session
// exactly, the label LabelClaimedBy its sanitised form, by which Lookup
// selects the pods it then checks against the annotation. Claim writes
// both by a merge patch conditioned on the resourceVersion it read: of
// replicas racing for one pod, one patch is accepted and the others
// conflict, re-read and find it claimed (ErrAlreadyExists). The claim goes
// with the pod; Release, called once the sandbox is gone, has nothing left
// to do and never unclaims a pod that still exists.
//
// A session holds one pod. Two replicas serving a new session's first
// calls at the same instant each look the session up (nothing), then
// claim: each its own first ready pod, which may differ. "Claim, then
// list the session's claims and let the lowest name win" does not close
// that: a replica that claimed, listed only its own claim and handed its
// pod out cannot be overruled by one whose claim, of a lower name, lands
// after. So claims of a session are serialised up front by its claim
// lock, a Secret ClaimLockName(tenant, session) created (atomically:
// AlreadyExists for the second) before the pod is patched, naming the
// pod (AnnotationClaimPooled) and owned by it (the garbage collector
// deletes it with the pod). Every claimer claims the pod the lock names
// and Claim returns it; the pod the loser picked stays unclaimed and goes
// back to its pool. A lock whose pod is gone, being deleted or another
// session's is stale (a claim is never undone while its pod exists, so
// the session never had that pod) and is deleted, conditioned on its uid.
//
// A cold start takes the same lock (Claims.Cold, sandbox.ColdStarts):
// without it, a replica that found no ready pod for a new session and
// created the session's own pod, and another that claimed a pooled one for
// it at the same instant, left the session with two sandboxes, its calls
// landing in one or the other. The cold start's lock names the session
// itself (no pooled name is one) and has no owner while its pod is being
// created; a Claim that finds it answers the session's name, and the
// claimer waits for that pod; a second Cold does the same. Once Create
// returned, the lock is settled: owned by the session's pod (a patch),
// or deleted if there is none. A cold lock stands while its pod exists;
// without one, it is stale once it has an owner (its pod went) or its
// creator's deadline (AnnotationColdUntil: the Manager's CreateTimeout,
// counted from its admission) is 10 s past: its creator died before
// making the pod. Not sooner, though the pod is Create's first request: a
// creator that is only slow (API requests wait seconds under load) must
// not be taken over. One taken over all the same (another replica's
// clock ahead by more than the margin) learns it at settling (the patch
// conflicts): a lock now naming a pooled pod whose claim is written is
// the session's, and the Manager removes the pod it made and serves the
// session from the claimed one; a stale one is deleted, none is made
// again, owned by the pod; another cold start's leaves the pod the
// session's (that one's Create finds it). The creator takes the lock only
// once admitted (the Manager's admission queue), so a wait in the queue
// never outlasts the lock. A replica waiting for another's cold start looks
// again after 250 ms, doubling to 2 s.
// A Running pod whose token Secret is not there yet reads as
// StateCreated: the Manager waits for a young pending sandbox instead of
// removing it as dead (another replica is creating it).
//
// Draining and rolling a pool never remove a claimed pod: the leader's
// list of ready pods can hold one another replica claimed a moment ago, so
// the Manager removes a pooled pod only after Retire, a delete conditioned
// on the uid and resourceVersion of the unclaimed pod it read; a claim
// patched in between changed the resourceVersion, the delete conflicts,
// and the pod read again is claimed (ErrAlreadyExists: left to its
// session). Claim refuses a pod being deleted, and a claim in flight on the
// read before the deletion conflicts.
//
// RBAC the runtime needs in Config.Namespace: pods (create, get, list,
// delete, patch: RecordUse and Claims), secrets (create, get, list,
// delete: tokens and claim locks; patch: a cold start's lock settled on
// its pod), events (list),
// networkpolicies (get, create, update; with a ServerSelector), leases
// (get, create, update: the Elector); and, cluster-wide and optional,
// runtimeclasses (get) for Runtimes, which counts a configured class it
// may not look at as present.
package kube
