// Package containerd is the containerd backend of sandbox.Runtime, on the
// containerd v2 client (github.com/containerd/containerd/v2/client), with
// no Docker in the path. The OCI spec is built with containerd's pkg/oci
// options from the one sandbox.Spec (translate.go, pure and unit-tested).
//
// # Hardening (translate.go)
//
// Exactly sandbox/docker's, in OCI terms. A sandbox is one container, id
// ContainerID(tenant, session), whose task is the agent: bind-mounted
// read-only at /.shellbox/agent, PID 1, as 0:0 with SETUID, SETGID and KILL
// only; no-new-privileges and containerd's default seccomp profile; a
// read-only root file system with size-limited tmpfs /workspace (the
// session's own on the host, sandbox/hostdir, so that it outlives the
// container: sandbox.SessionState) and /tmp; new PID, network, IPC, UTS,
// mount and cgroup namespaces (loopback only, no CNI); memory, CPU and pids
// limits; the session's host directory at /run/shellbox; Spec.Mounts as
// pinned, non-recursive binds; no stdio. Each item in full:
// docs/deployment.md#how-a-containerd-sandbox-is-built-sandboxcontainerd.
//
// Labels on the container: org.shellbox.{managed,tenant,session,owner,
// runtime,network} and org.shellbox.hostdir (the host directory), plus the
// Spec's. A restarted server finds its sandboxes by them (List), and Get
// calls a container of the session's id without them a conflict.
//
// # Runtimes
//
// Spec.Runtime runc maps to io.containerd.runc.v2 and runsc to
// io.containerd.runsc.v1 (Config.RuntimeNames). gVisor's shim takes runsc's
// flags only from the options file the client names with each container
// (Config.RuntimeConfigs, .ci/setup-containerd.sh writes
// /etc/shellbox-containerd/runsc.toml); it needs network=none, host-uds=create
// (else the host cannot reach the agent's socket) and oci-seccomp (else
// gVisor ignores the seccomp profile). Under gVisor the pids limit is
// RLIMIT_NPROC and the cgroup a host backstop, as on Docker.
//
// With Config.Checkpoint, runsc sandboxes run under io.containerd.runc.v2
// instead, through a runsc wrapper written from the same runsc.toml, so
// that they can be checkpointed and restored (sandbox.Checkpointer,
// checkpoint.go; docs/checkpoint.md).
//
// # What it cannot tell
//
// OOMKilled is read from the memory cgroup of an exited task (oom_kill in
// memory.events or memory.oom_control), which exists until Remove deletes
// the task: best effort, false where the cgroup is not readable from the
// server (gVisor's own layout, another host). Images are never pulled: an
// image missing from the namespace is ErrUnavailable saying how to import
// it.
package containerd
