// Package local is the reference BashExecutor: it runs each command as a host
// process of the server, unsandboxed. It is what development uses, what the
// conformance suite (executor/executortest) holds every other executor to, and
// what cmd/shellbox-agent runs inside a sandbox (with Credential set to the
// policy's user, tag groups, and OOMScoreAdj inherited so the agent outlives
// its commands; see "As a sandbox's PID 1").
//
// # One command
//
// A call runs `bash -c <command>` (or pwsh) with exactly Spec.Env (plus PWD),
// stdin /dev/null and separate stdout/stderr pipes, in its own process group
// and, where the process has the rights, its own cgroup. The workdir is
// confined where the files are: Spec.Root is opened with os.OpenRoot, the
// workdir is opened beneath it (os.Root refuses `..` and symlinks that leave
// the root; an absolute symlink that lands inside is resolved and opened
// beneath the root again), its real path is read back from /proc/self/fd and checked against
// the root's, and the child is started with Dir set to /proc/self/fd/N of that
// open directory, so the chdir happens in the child on the very directory that
// was checked: there is no window for a rename or symlink swap to redirect it.
//
// A supervisor goroutine per command owns its lifetime. It waits for the
// leader to exit without reaping it (waitid WNOWAIT): the zombie keeps the
// leader's pid and process-group id from being reused, so signalling them stays
// safe until the tree is gone (with the process group alone, the group's
// members keep its id; see below). Then:
//
//   - timeout, Kill or a cancelled foreground ctx ends the whole tree: SIGTERM
//     to every process of the cgroup, to the process group and to the leader,
//     up to Grace for them to go, then SIGKILL to whatever is left, repeated
//     until nothing is left;
//   - when the leader exits on its own, whatever it left running (`sleep 100 &`,
//     a daemon) is ended the same way, so no call leaves processes behind;
//   - then the leader is reaped (its status is exact: an exit code, or the
//     signal's name with ExitCode -1, never 128+n), the cgroup given back
//     (see "Cgroup reuse"), and the pipes drained to EOF, so no output is
//     lost and no grandchild holding a pipe can hang the call.
//
// # What "the whole tree" means
//
// cgroup v2 (a cgroup2 mount, pure or the "unified" mount of a hybrid host,
// with cgroup.kill, Linux >= 5.14): each command is born in its own cgroup
// under <mount>/<CgroupParent>/ via clone3 CLONE_INTO_CGROUP
// (SysProcAttr.UseCgroupFD), so no process of the tree is ever outside it, and
// SIGKILL is cgroup.kill, which the kernel applies atomically, forks in flight
// included. Nothing the command starts survives, setsid and double-fork
// daemons included. Where clone3 into a cgroup is refused at run time although
// the cgroupfs is writable (gVisor, a seccomp profile), an auto executor falls
// back to v1 or the process group for good.
//
// cgroup v1 (a freezer hierarchy, else pids): v1 lets a single thread
// change cgroup, so the command is started from a locked OS thread that moves
// itself into <mount>/<CgroupParent>/<name>, forks the leader (born in the
// cgroup, as with CLONE_INTO_CGROUP) and moves itself back; the Go runtime
// never clones threads from a locked thread, so no server thread stays behind.
// Only when the server's own cgroup is not visible under the mount does the
// executor fall back to writing the leader's pid to cgroup.procs right after
// it starts. That has a tiny race: the move happens while bash is in its
// ~1 ms start-up, so a process forked before it stays outside the cgroup. Such
// a process is still in the process group and gets every signal; only one
// that also called setsid within that first millisecond can escape. SIGKILL
// freezes the cgroup, signals every member, thaws it, and repeats until it is
// empty, so a fork bomb cannot outrun it.
//
// Process group only (Cgroup "off", no cgroupfs, no rights, e.g. non-root):
// signals go to the leader's process group, and the tree counts as gone when
// no live process is left in the group. Here the leader is reaped as soon as
// it exits, and kill(-pgid, 0) failing with ESRCH says the group is empty in
// one system call; only a group that is not is scanned for in /proc (zombies
// do not count). The group's id cannot be handed out again while any process
// is in it, so the signals reach no one else (see proc.treeEmpty for the one
// window left). That ends everything that stays in the group (pipelines, `&`
// jobs, nohup, subshells), but a process that calls setsid or setpgid
// (`setsid cmd &`, daemons) leaves the group and escapes, as it always did:
// it is not killed, it does not keep the call waiting (the group may well be
// empty while it runs), and if it keeps a pipe open the call stops reading
// after a short drain period instead of waiting for it.
//
// Tag groups (Config.TagGroups, with Credential set to a non-root user; used
// when a command has no cgroup): this is how the agent closes that gap inside
// a container, where the cgroupfs is read-only and it has no CAP_SYS_ADMIN.
// Each command is started with one extra supplementary group, a gid of the
// range unique among the live commands: its tag. Every descendant inherits
// it, and none can drop it: setgroups(2) needs CAP_SETGID, which the command
// lost when it switched to its non-root uid, and no-new-privileges (or the
// absence of setuid-root binaries) keeps it from getting it back. So the tree
// is exactly the set of live processes whose /proc/<pid>/status lists the
// tag, setsid'd, double-forked and daemonized ones included. Signals go to
// the process group and to every tagged process outside it (once each;
// SIGKILL repeated until none is left, like the cgroup paths), through a
// pidfd where the kernel has them so a reused pid is never signalled; the
// tree is gone when no live process carries the tag. Each tree check reads
// the status of every process in sight: cheap in a sandbox, where only the
// agent and its commands are. A tag is reused only once its tree is gone.
// The range must be used by no one else on the pid namespace: two executors
// sharing one would kill each other's commands.
//
// Per-command cgroups are named <pid>-<starttime>-<random id> after the
// creating process, so Cleanup can tell the leftovers of a crashed server
// (creator gone) from the cgroups of a live one, kill what still runs in them
// and remove them. The server (or agent) calls it once at start-up.
//
// # Cgroup reuse
//
// Making and removing a cgroup per command (mkdir, open, rmdir) is a good
// part of a short command's overhead, so each hierarchy keeps up to
// maxIdleCgroups empty cgroups, with their directory (and, on v2,
// cgroup.events) still open, for the next commands (cgroupPool). The safety
// argument: a cgroup is owned by one command's supervisor from launch to
// release, and nothing else ever signals or kills it; the supervisor releases
// it only after the kill loop has returned, the leader has been reaped and
// the tree is gone, so no stale signal or cgroup.kill can reach it from the
// pool. It goes to the pool only if it is as good as new: never killed
// (cgroup.kill or a freeze ran on it: some kernels, 6.18 among them, SIGKILL
// at birth a process cloned with CLONE_INTO_CGROUP into a cgroup that was ever
// killed that way, so a killed cgroup is always removed), empty (v2: populated
// 0, which counts child cgroups), not frozen (v2: frozen 0; v1 freezer:
// THAWED), and without child cgroups. The same state checks run again when
// it is taken from the pool; a cgroup that fails one, or whose state cannot
// be read, is removed, never reused. Executor.Close drains the pools of every
// hierarchy it used and removes their cgroups; a command released after that
// has its cgroup removed.
//
// # As a sandbox's PID 1
//
// cmd/shellbox-agent runs an Executor as the sandbox's init, and four more
// things matter there (agent.go, reap.go, oom.go, Config.ExecShim):
//
//   - Reaping. Orphans of every command's tree are reparented to PID 1 and
//     must be reaped, but the leaders must not be, by anyone but their
//     supervisors. Every launch registers its leader before the reaper can
//     see its zombie (a lock held across fork and registration), and
//     ReapOrphans, which the agent calls on SIGCHLD, reaps every zombie child
//     that is not a registered leader.
//   - The OOM killer must pick a command, not the agent. OOMScoreAdjInherit
//     raises this process's own oom_score_adj around each fork (the child is
//     born with it) instead of writing the child's score, which a non-root
//     command's file does not allow without CAP_DAC_OVERRIDE.
//   - OOM reporting. With MemoryCgroup, a command whose leader died of
//     SIGKILL (or exited 137) while the cgroup's OOM-kill counter grew is
//     reported with Result.OOMKilled, and a last stderr line naming the
//     memory limit. (Under gVisor there is no such counter, and a sandbox over
//     its limit is killed whole by the host.)
//   - One call may not reach another's processes. With Config.ExecShim every
//     command starts through a shim that execs it in the same process, after
//     putting it in a Landlock domain of its own (package landlock): the
//     exec keeps the process, so the pid, process group, tag group and exit
//     status the executor tracks are the command's.
//
// # Output and memory
//
// Each stream feeds an output.Tail (the result's tail), a background task's
// output.Ring (the bash_output cursor), and one output.Spill per call shared by
// both streams (the full output, interleaved). The spill stays in memory up to
// twice the tail bound and is written to <SpillDir>/<session>/<id>.log only when
// it outgrows that, when a tail was truncated, or when a background reader lost
// bytes. Every buffer is bounded, so a command printing gigabytes costs the
// server a fixed amount of memory and disk up to SpillLimit.
//
// The spill files of an Executor share one output.Space: when a spill being
// written finds the filesystem full (ENOSPC: a sandbox's spill tmpfs), the
// oldest spill files of finished calls are deleted until it fits, so the
// newest outputs stay whole; a result or read that names a deleted file
// says so in SpillError. A file being written is never deleted. The agent
// adopts the files an earlier agent left in the spill directory
// (AdoptSpillFiles), so they are the first to go.
//
// A command's leader is waited for on a pidfd in the runtime's poller, so a
// running command holds no OS thread of this process (the agent keeps
// within a fixed number of threads; see cmd/shellbox-agent).
//
// # Lifetimes
//
// Run belongs to its ctx: cancelling it kills the tree (two-phase) and Run
// returns executor.Aborted() once the tree is gone. A background task belongs
// to the Executor, not to the ctx of Start; it ends when its command does, when
// it is killed, or at Close. Finished tasks are kept for Read and Wait, at most
// Config.MaxFinishedTasks per session, oldest evicted first.
package local
