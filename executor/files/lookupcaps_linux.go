package files

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
)

// Reading every process's fd links: the egress proxy under gVisor.
//
// The agent's egress proxy attributes a connection to the processes holding
// its socket by their /proc/<pid>/fd links (agent/egress), which takes the
// ptrace read right over each. On Linux the agent reads them as the
// commands' user (AsUser: setfsuid, which the ptrace check of /proc uses).
// gVisor refuses that (source: google/gvisor, pkg/sentry):
//
//   - reading a link asks kernel.ContextCanTrace (fsimpl/proc/task_fds.go,
//     fdSymlink.Readlink), which passes a caller with CAP_SYS_PTRACE in its
//     effective set, or whose *real* uid and gid are the target's real,
//     effective and saved ones (kernel/ptrace.go, canTraceStandard);
//   - AsUser can only change the effective ids there (no setfsuid), and an
//     effective uid going from 0 to another empties the effective set
//     (kernel/task_identity.go, setKUIDsUnchecked, as Linux does), so the
//     thread has neither: EACCES;
//   - taking the real ids instead would let the commands signal the
//     thread, and so the agent: gVisor lets a sender whose real uid is the
//     target's real uid signal it (kernel/task_signals.go, MayKill; tgkill
//     names one thread), and does not shield a namespace's init from its
//     members' signals (a TODO in the same file), so SIGKILL or SIGSTOP
//     would end or freeze the agent.
//
// So under gVisor the agent keeps its ids (real, effective and saved 0: no
// command may signal or trace the thread, whatever it holds) and its
// runtime gives it CAP_SYS_PTRACE, for the links, and CAP_DAC_READ_SEARCH,
// for the /proc/<pid>/fd directory itself (mode 0500, owned by the uid the
// process had when its /proc entry was made, which a root without DAC
// capabilities may not search). The agent keeps both in its permitted set
// only (agent, capabilities.go): AsTracer raises them in the effective
// set of one locked thread for the lookup, and lowers them after. The
// commands never get them (changing uid from 0 clears the permitted set,
// the bounding set is empty); gVisor has no open_by_handle_at (the
// CAP_DAC_READ_SEARCH escape on Linux: it answers EOPNOTSUPP), and the
// runtimes give them under gVisor only.

// tracerCaps are the capabilities AsTracer raises.
const tracerCaps = 1<<unix.CAP_SYS_PTRACE | 1<<unix.CAP_DAC_READ_SEARCH

// TracerCaps reports whether this process may raise CAP_SYS_PTRACE and
// CAP_DAC_READ_SEARCH (its permitted set holds them): then AsTracer reads
// any process's fd links.
func TracerCaps() bool {
	c, err := threadCaps()
	return err == nil && c.prm&tracerCaps == tracerCaps
}

// AsTracer runs fn with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH raised in
// the calling thread's effective set, its ids unchanged (see above): fn
// must do its work in the calling goroutine. The thread is locked, and it
// is unlocked only once the set is lowered back; if it cannot be, it dies
// with the goroutine. It shares the MaxUserThreads budget with AsUser.
func AsTracer(fn func() error) error {
	userThreads <- struct{}{}
	defer func() { <-userThreads }()
	runtime.LockOSThread()
	prev, err := threadCaps()
	if err == nil && prev.prm&tracerCaps != tracerCaps {
		err = fmt.Errorf("not permitted (CapPrm %#x)", prev.prm)
	}
	if err != nil {
		runtime.UnlockOSThread()
		return executor.Errorf(executor.ErrUnavailable, "files: cannot raise CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH: %v", err)
	}
	raised := prev
	raised.eff |= tracerCaps
	err = setThreadCaps(raised)
	defer func() {
		if setThreadCaps(prev) == nil {
			runtime.UnlockOSThread()
		}
	}()
	if err != nil {
		return executor.Errorf(executor.ErrUnavailable, "files: cannot raise CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH: %v", err)
	}
	return fn()
}

// capSets are a thread's capability sets.
type capSets struct{ eff, prm, inh uint64 }

// threadCaps returns the calling thread's capability sets.
func threadCaps() (capSets, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]unix.CapUserData
	if err := unix.Capget(&hdr, &d[0]); err != nil {
		return capSets{}, fmt.Errorf("capget: %w", err)
	}
	join := func(lo, hi uint32) uint64 { return uint64(lo) | uint64(hi)<<32 }
	return capSets{
		eff: join(d[0].Effective, d[1].Effective),
		prm: join(d[0].Permitted, d[1].Permitted),
		inh: join(d[0].Inheritable, d[1].Inheritable),
	}, nil
}

// setThreadCaps sets the calling thread's capability sets (capset(2) with
// pid 0 is the calling thread's alone) and reads them back.
func setThreadCaps(c capSets) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	d := [2]unix.CapUserData{
		{Effective: uint32(c.eff), Permitted: uint32(c.prm), Inheritable: uint32(c.inh)},
		{Effective: uint32(c.eff >> 32), Permitted: uint32(c.prm >> 32), Inheritable: uint32(c.inh >> 32)},
	}
	if err := unix.Capset(&hdr, &d[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	got, err := threadCaps()
	if err != nil {
		return err
	}
	if got != c {
		return fmt.Errorf("capset: the sets are %+v, not %+v", got, c)
	}
	return nil
}
