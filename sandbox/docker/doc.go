// Package docker is the Docker Engine backend of sandbox.Runtime, on the
// official client (github.com/docker/docker/client) with API version
// negotiation: every call and field it uses exists in API 1.41, so it runs
// against Engine 20.10 and current engines alike.
//
// # Hardening (translate.go)
//
// A sandbox is one container, named ContainerName(tenant, session), with:
//
//   - the agent bind-mounted read-only at /.shellbox/agent as entrypoint and
//     PID 1 (no docker-init), running as 0:0 with CapDrop ALL and CapAdd
//     SETUID, SETGID, KILL only: enough to start each command as the sandbox
//     user, whose capability sets are then empty;
//   - no-new-privileges, Docker's default seccomp profile (never unconfined);
//   - a read-only root filesystem; /workspace (owned by the sandbox user) and
//     /tmp are size-limited tmpfs mounts, the one disk quota that works on
//     overlay storage (fuse-overlayfs included) and under gVisor alike; their
//     pages count towards the memory limit. The workspace is the session's
//     own tmpfs on the host (sandbox/hostdir), bound non-recursively, so it
//     outlives the container: Remove keeps it, RemoveSession removes it
//     (sandbox.SessionState);
//   - network "none" (loopback only), private IPC and cgroup namespaces;
//   - memory (swap = memory: no swap), CPU (CPUQuota over sandbox.CPUPeriod,
//     below the tenant's cgroup with sandbox.tenantCpus) and pids limits, core
//     dumps off, no restart, no logging (output goes through the agent);
//   - the session's host directory bind-mounted at /run/shellbox, recursive so
//     the spill tmpfs mounted on the host shows through;
//   - Spec.Mounts as non-recursive binds of their sources pinned by
//     sandbox/hostdir.Pin (opened beneath their entries, no symlink followed,
//     bound at a neutral path until the container started, then checked by
//     device and inode on runc); the label org.shellbox.mounts records them
//     as allowed.
//
// # gVisor (runsc)
//
// Spec.Runtime "runsc" selects the engine runtime of that name. Two things
// differ, both measured on runsc 2022-12 (ptrace platform):
//
//   - the pids cgroup counts the gVisor kernel's host threads (~50 idle,
//     several per guest task, growing with churn), not the workload: a limit
//     sized for the workload kills the sandbox under ordinary use. So the
//     workload's limit becomes RLIMIT_NPROC, which gVisor counts per uid among
//     its own tasks (inside one sandbox only), and the cgroup limit becomes a
//     host backstop, 16×limit+512;
//   - gVisor has no OOM killer of its own: a command exceeding the memory
//     limit makes the host kill the whole sandbox (contained in its cgroup).
//     The agent should cap its commands (RLIMIT_AS) under runsc.
//
// The runtime must be registered with runtimeArgs --network=none (gVisor
// refuses to start in the root network namespace otherwise),
// --host-uds=create (or all: else the agent's socket exists only inside the
// sandbox and the host cannot dial it) and --oci-seccomp (else gVisor ignores
// the seccomp profile and commands show Seccomp: 0).
package docker
