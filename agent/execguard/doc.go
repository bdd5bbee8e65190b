// Package execguard checks every exec of a sandbox's commands against the
// call's policy rules, whatever syntax, wrapper, runner, variable or script
// produced it: the second, independent check behind the static reader
// (policies), which decides before a call runs so that asks reach an
// approver, but reads only what the command's text shows.
//
// # The mechanism, and why
//
// A guard process (the agent binary re-executed as `shellbox-agent
// exec-guard`, started by Start before anything else of the agent's runs)
// ptrace-seizes every thread of the agent, with PTRACE_O_TRACEFORK,
// TRACEVFORK and TRACECLONE, so that every process the agent starts, and
// every process those start, is traced from its birth: there is no window
// between a fork and the check. The agent then installs, on all its threads
// (TSYNC), a seccomp filter that answers execve and execveat with
// SECCOMP_RET_TRACE: every exec of every command stops in the guard before
// the kernel runs it. The guard reads the path and argv from the process's
// memory, matches them against the call's rules (internal/cmdmatch, the
// same matcher the reader uses), and lets the exec go on or makes it fail
// with EPERM (the system call skipped), and the call goes on. A denial is
// reported to the agent, which writes its line into the call's stderr (so
// the result says which rule and which command) and its log; before a
// call's result is built the agent waits for the guard to have reported
// everything of the call's tree (Guard.Watch's release).
//
// The alternatives, and why not:
//   - A seccomp user-notification supervisor: gVisor accepts no filter flag
//     but TSYNC (pkg/sentry/syscalls/linux/sys_seccomp.go), so
//     SECCOMP_FILTER_FLAG_NEW_LISTENER fails there; one mechanism for runc,
//     gVisor and pods is worth more. RET_TRACE is implemented by gVisor.
//   - A Landlock execute allowlist per call: Landlock decides by path, not
//     argv (`git push --force` against `git status`), gVisor has no Landlock,
//     and an allowlist of every permitted binary is not what a deny rule says.
//   - An LSM: not present in pods nor under gVisor, and needs the host.
//
// The tracer must be a process of its own started before the agent's
// ConfineCommands filter (agent/notrace), which refuses ptrace to the agent and
// everything it starts: that filter keeps the commands from tracing each
// other, and the guard is outside it.
//
// # What is checked, and the races
//
// At the seccomp stop (before the exec): the names the command goes by, the
// basename of argv[0] and of the path, and, when the file's content is that
// of a program a rule names (a copy or a link of /usr/bin/rm under another
// name: same size, then the same SHA-256), that program's name; then argv,
// against each deny and ask rule (an ask rule's command the reader saw in
// an approved call is not among them: the approver saw it). Another thread
// of the same address space (or a vfork parent) could change argv after
// the guard read it and before the kernel copies it; so at
// PTRACE_EVENT_EXEC, when the new image exists and no other thread of it
// does, the guard checks again what did run, from /proc/<pid>/cmdline and
// /proc/<pid>/exe, and kills the process (SIGKILL) if a rule refuses it.
//
// That second check is made for every exec the first let through, not
// only for a process that shares its memory (a thread, a vfork child):
// a process with no other thread can still have its argv changed between
// the two, by another process of the call, of the same user and Landlock
// domain, writing its /proc/<pid>/mem (the agent's filter refuses
// ptrace and process_vm_writev, not an open by path), or through a
// MAP_SHARED mapping its argv's strings are in. Nothing the guard can
// read at the seccomp stop rules those out, so its PTRACE_EVENT_EXEC stop
// is kept.
//
// Exempt: the first exec of each process the agent starts (the agent's own
// choice of program, the Landlock shim or bash), and, once, right after
// it, an exec by that process whose argv is exactly the one the agent
// started the call with (the shim's exec of bash): the reader judged that
// command line, and PTRACE_EVENT_EXEC checks that it is what ran.
//
// Fail closed: an exec whose argv cannot be read is refused, a file of a
// named program's size that cannot be read is taken for that program, a
// process whose program cannot be read after its exec is killed, and the
// dynamic loader run as a program (by name or content) is refused whole,
// since it maps what it runs with no exec to check.
//
// Busybox and toybox applets (busybox rm) are read for what they run.
//
// What it cannot see: what an interpreter does through its own system
// calls (python3 deleting files with os.remove is not an exec), as before
// (docs/security.md); a program changed by one byte is not known by its
// content.
// Only amd64: 32-bit and x32 execs are refused outright by the filter.
//
// # Liveness: nothing waits without bound
//
// Every stop of every traced thread is answered (continued, or, in a
// group-stop, PTRACE_LISTEN, as without a tracer), and the guard waits
// for nothing of the agent's (a report or a sync echo that does not fit
// the queue is dropped; the agent's sync gives up after a second). What
// the guard holds, it holds for a bound:
//   - A new process or thread whose first stop comes before its parent's
//     fork event (a placeholder) waits for that event, which names its
//     call. A parent SIGKILLed in its event stop before the guard waited
//     for it, or before it read the new pid, never reports the event:
//     its child is then taken for an orphan, as soon as that is known
//     (the parent's exit reported, or the child handed to a reaper
//     outside the guard, or adopted by the agent while not in the
//     agent's process group) or after 10 s. An orphan runs, with every
//     exec it or what it starts makes refused (no call's rules can be
//     known for it, so none of its execs is let through: closed; killing
//     it would take more than the check needs, and it then ends as it
//     would have, closing the call's output it holds), and the guard's
//     log says so; a late event still names it. A thread the guard has
//     no record of that stops at an exec is refused and made an orphan.
//   - An exec of a call whose rules have not come waits up to 10 s, then
//     is refused.
//   - The first stop of each new tracee (PTRACE_EVENT_STOP, with SIGTRAP
//     or, in a group-stop, SIGSTOP) starts it; a later SIGSTOP (or
//     TSTP, TTIN, TTOU) stop is a group-stop and holds until a SIGCONT.
//   - A file hashed for its content is opened without blocking (a FIFO
//     swapped in after its stat would hold every exec) and must be the
//     file the stat saw.
//
// TestKilledForkParentsEnd, TestGroupStopHolds, TestStopContEnds and
// TestConcurrentCallsEnd run these paths, with the orphans handed to a
// reaper outside and to the agent.
//
// # The guard's privileges
//
// It runs as the agent's user (root in a container without
// CAP_SYS_PTRACE; a pod's non-root user) and reads the commands' memory,
// files and /proc links with its file-system uid and gid set to theirs (on
// its tracing thread; under gVisor, whose setfsuid changes nothing, that
// thread's real and effective ids), so it reaches nothing they could not.
// It is started before the agent empties its capability bounding set: a
// tracer's permitted capabilities must hold its tracee's. Commands cannot trace it (ConfineCommands) nor, where they run
// as another uid, signal it. If it dies, every exec fails (ENOSYS from the
// filter with no tracer): closed, not open. Under --no-setuid (pods) the
// commands share its uid and may kill it, which breaks only their own
// sandbox's execs.
//
// # The cost per exec
//
// A fork and exec of a traced tree stops five times in the guard, and
// each stop is two context switches and a run of the guard's thread: the
// parent's fork event and the child's first stop (both needed: the
// child is attributed to its call by the event, and nothing of it runs
// before; a child auto-attached by PTRACE_O_TRACEFORK under PTRACE_SEIZE
// starts in a PTRACE_EVENT_STOP the kernel sets, which no option takes
// away), the exec's seccomp stop (the check), PTRACE_EVENT_EXEC (the
// re-check above), and the parent's SIGCHLD (a signal-delivery stop,
// which ptrace makes of every signal); the child's exit is reported
// too, with no stop. No other stop is asked for: the filter traces only
// execve and execveat, and PTRACE_O_TRACEVFORKDONE and TRACEEXIT are not
// set. None of the five can go without a window or a lost attribution,
// so the guard's work per stop is what is cut:
//   - SIGCHLD, which the kernel sends the tracer at every stop, is
//     ignored (wait4 is woken all the same), not taken in a handler;
//   - the Go runtime's own work: with one processor, its monitor took
//     the processor of nearly every wait4 that blocked, woke a thread to
//     hold it, and polled every 20 µs from then on; and it preempted the
//     tracing goroutine, which never passes through the scheduler, with a
//     signal every 10 ms, which set its polling back to 20 µs. The guard
//     runs with two processors (one idle, so no wait4's is taken:
//     guardProcs) and yields every 5 ms (yieldEvery), and its socket to
//     the agent is read and written through the runtime's poller, not by
//     a thread blocked in each; its threads stay within GuardTasks. A wait
//     that blocks is still one the runtime sees: blocking where it cannot
//     see would hold a garbage collection's stop-the-world, and the
//     guard's socket to the agent with it, until the next stop;
//   - the ptrace requests of a stop are raw system calls (none blocks);
//   - a child whose first stop comes before its parent's fork event is
//     not read from /proc then: mostly the event is there next, and
//     names it; /proc/<pid>/status is read (raw, into a buffer of the
//     stack) only if the guard would block first, or a traced process
//     exits (resolve);
//   - memory is read a page at a time into one buffer, with
//     process_vm_readv (the /proc/<pid>/mem file where that is refused:
//     it checks the guard's real ids, not the file-system ids it acts
//     as): an exec's path, argv array and strings, mostly on one page of
//     the shell's heap, are one system call; the command line after the
//     exec is read with raw open, read and close;
//   - a file is stat'ed once for both of its content checks, and a
//     named program's files are looked up once.
//
// What remains per fork and exec (1000 of /bin/true): about 25 system
// calls and 7 context switches of the guard, against 44 and 15 before.
//
// BenchmarkExecLoop measures it, against the same loop without the
// guard, in time and in CPU: docs/benchmarks.md.
package execguard
