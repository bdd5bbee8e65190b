// Package containerd is the containerd backend of sandbox.Runtime, on the
// containerd v2 client (github.com/containerd/containerd/v2/client), with
// no Docker in the path. The OCI spec is built with containerd's pkg/oci
// options from the one sandbox.Spec (translate.go, pure and unit-tested).
//
// # Hardening (translate.go)
//
// Exactly sandbox/docker's, in OCI terms. A sandbox is one container, id
// ContainerID(tenant, session), whose task is the agent:
//
//   - the agent bind-mounted read-only at /.shellbox/agent, PID 1, as 0:0
//     with the bounding, permitted and effective sets SETUID, SETGID, KILL
//     only (no inheritable or ambient), so commands, which it runs as the
//     sandbox user, have none;
//   - no-new-privileges, containerd's default seccomp profile (Docker's,
//     allowing privileged syscalls only for the capabilities kept);
//   - a read-only root file system (no writable /run: containerd's default
//     spec has a tmpfs there, Docker's has not); /workspace (owned by the
//     sandbox user) and /tmp are size-limited tmpfs mounts, the workspace
//     the session's own on the host (sandbox/hostdir), bound non-recursively
//     so that it outlives the container (Remove keeps it, RemoveSession
//     removes it: sandbox.SessionState); /dev/shm and
//     /dev/mqueue private (new IPC namespace), /sys and the cgroupfs
//     read-only, Docker's masked and read-only /proc paths;
//   - new PID, network, IPC, UTS, mount and cgroup namespaces: the network
//     namespace is empty, so loopback only (runc brings lo up; gVisor, with
//     network=none in its runsc.toml, has its own loopback), no CNI;
//   - memory (swap = memory: no swap), CPU (CFS quota per 100 ms, as
//     Docker's NanoCPUs) and pids limits, core dumps off, RLIMIT_NOFILE
//     inherited from the daemon (as Docker's containers inherit dockerd's),
//     oom_score_adj 0;
//   - the session's host directory (sandbox/hostdir) bind-mounted at
//     /run/shellbox, recursive so the spill tmpfs mounted on the host shows
//     through; Spec.Mounts as non-recursive binds, read-only where asked, of
//     their sources pinned by sandbox/hostdir.Pin (checked by device and
//     inode on runc once the task started), recorded as allowed in the
//     spec's annotation org.shellbox.mounts;
//   - no stdio: the agent's output goes nowhere (Docker: log driver none).
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
// # What it cannot tell
//
// OOMKilled is read from the memory cgroup of an exited task (oom_kill in
// memory.events or memory.oom_control), which exists until Remove deletes
// the task: best effort, false where the cgroup is not readable from the
// server (gVisor's own layout, another host). Images are never pulled: an
// image missing from the namespace is ErrUnavailable saying how to import
// it.
package containerd
