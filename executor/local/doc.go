// Package local is the reference BashExecutor: it runs each command as a host
// process of the server, unsandboxed. It is what development uses, what the
// conformance suite (executor/executortest) holds every other executor to, and
// what the agent (package agent, cmd/shellbox-agent) runs inside a sandbox,
// with Credential set to the policy's user and the abilities of a sandbox's
// PID 1 plugged in as Config.PID1 (package agent/pid1).
//
// A call runs `bash -c <command>` (or pwsh) with exactly Spec.Env (plus PWD),
// stdin /dev/null and separate stdout/stderr pipes, in its own process group
// and, where the process has the rights, its own cgroup. The workdir is
// confined where the files are (workdir.go): opened beneath Spec.Root through
// os.Root, checked, and entered by the child as /proc/self/fd/N of that open
// directory, so no rename or symlink swap can redirect it.
//
// A supervisor goroutine per command owns its lifetime. It waits for the
// leader without reaping it (waitid WNOWAIT), so its pid and process group
// cannot be reused while the tree is signalled. Timeout, Kill or a cancelled
// foreground ctx ends the whole tree (SIGTERM, up to Grace, then SIGKILL until
// nothing is left), and so does the leader's own exit for whatever it left
// running; then the leader is reaped (an exit code, or the signal's name
// with ExitCode -1), the cgroup given back, and the pipes drained to EOF.
//
// "The whole tree" is, by what the host allows: a cgroup v2 cgroup the
// command is born in (clone3 CLONE_INTO_CGROUP, killed by cgroup.kill); a v1
// freezer or pids cgroup; the process group only (setsid escapes); or, inside
// a container, the process group plus every process carrying the command's
// tag group (PID1.Tag hands it out; tagtree.go tracks it), which a non-root
// command cannot drop.
// Per-command cgroups are named after their creator, so Cleanup (called once
// at start-up) removes a crashed server's leftovers; empty, never-killed
// cgroups are pooled for reuse (cgroup.go).
//
// What a sandbox's PID 1 adds lives in package agent/pid1 (the tag pool,
// the inherited OOM score, OOM reporting, orphan reaping), behind the small
// PID1 interface (pid1.go): launch asks it for a tag and forks through it,
// and the supervisor gives the tag back and asks for the OOM verdict once
// the tree is gone. The runner keeps what is its own state: every leader is
// registered before a reaper can see it, and NotLeaders is how a reaper
// learns which zombies it may take (leaders.go); network grants are bound
// to trees (grant.go); Config.ExecShim puts each command in a Landlock
// domain of its own.
//
// Every output buffer is bounded (output.Tail, output.Ring, output.Spill),
// so a command printing gigabytes costs a fixed amount of memory and disk
// up to SpillLimit; a full spill filesystem deletes the oldest spill files of
// finished calls (output.Space). A running command holds no OS thread: its
// leader is waited for on a pidfd in the runtime's poller.
//
// Lifetimes: Run belongs to its ctx: cancelling it kills the tree (two-phase)
// and Run returns executor.Aborted() once the tree is gone. A background task
// belongs to the Executor, not to the ctx of Start; it ends when its command
// does, when it is killed, or at Close. Finished tasks are kept for Read and
// Wait, at most Config.MaxFinishedTasks per session, oldest evicted first.
//
// The design in full (the workdir check, the supervisor, each kind of tree
// and its limits, cgroup reuse and its safety argument, PID 1, output and
// memory): docs/architecture.md#running-a-command-executorlocal.
package local
