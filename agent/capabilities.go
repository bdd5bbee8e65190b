package agent

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The capability bounding set.
//
// A command's capability sets are empty once the agent switches it to the
// sandbox user, but its bounding set is the container's (SETUID, SETGID,
// KILL: 0xe0), the ceiling of what an exec could ever regain. The agent
// empties it for itself, and so for every command, at start: it needs
// CAP_SETPCAP for PR_CAPBSET_DROP (the runtimes grant it for this alone),
// drops every capability from the bounding set of every one of its threads
// (syscall.AllThreadsSyscall: the set is per thread, and Go runs on many),
// then gives up CAP_SETPCAP itself. The capabilities it keeps (SETUID,
// SETGID, KILL) stay effective: the bounding set limits only what an
// execve may gain.
//
// Without CAP_SETPCAP (a pod with no capabilities, --no-setuid) nothing is
// dropped: there the runtime's bounding set is already what the pod
// allows, and dropBoundingSet reports errNoSetpcap.

var errNoSetpcap = errors.New("no CAP_SETPCAP: the capability bounding set is left as the runtime set it")

// dropBoundingSet empties the bounding set of every thread, then drops
// CAP_SETPCAP from every thread's effective, permitted and inheritable
// sets.
func dropBoundingSet() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) == 0 {
		return errNoSetpcap
	}
	for c := 0; c < 64; c++ {
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); e != 0 {
			if e == unix.EINVAL { // past the kernel's last capability
				break
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, e)
		}
	}
	keep := ^uint32(1 << unix.CAP_SETPCAP)
	data[0].Effective &= keep
	data[0].Permitted &= keep
	data[0].Inheritable &= keep
	if err := capsetAllThreads(&hdr, &data); err != nil {
		return fmt.Errorf("give up CAP_SETPCAP: %w", err)
	}
	return nil
}

// capsetAllThreads sets the capability sets of every thread: capset(2)
// sets the calling thread's alone, and Go runs on many.
func capsetAllThreads(hdr *unix.CapUserHeader, data *[2]unix.CapUserData) error {
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(hdr)
	runtime.KeepAlive(data)
	if e != 0 {
		return e
	}
	return nil
}

// Capabilities kept for the egress proxy's lookups.
//
// Under gVisor the runtime also gives the agent CAP_SYS_PTRACE and
// CAP_DAC_READ_SEARCH: the egress proxy reads its commands' /proc/<pid>/fd
// links with them, where acting as the commands' user is refused
// (executor/files, AsTracer). The agent needs them nowhere else, so it
// keeps them in its permitted set only, out of the effective (and
// inheritable) set of every thread, and AsTracer raises them on one
// locked thread for a lookup. A process without them is left as it is.

// lowerTracerCaps clears CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH from the
// effective and inheritable sets of every thread, when the permitted set
// holds both (files.TracerCaps: the proxy then reads fd links with
// files.AsTracer).
func lowerTracerCaps() error {
	const tracer = 1<<unix.CAP_SYS_PTRACE | 1<<unix.CAP_DAC_READ_SEARCH
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Permitted&tracer != tracer {
		return nil
	}
	data[0].Effective &^= tracer
	data[0].Inheritable &^= tracer
	if err := capsetAllThreads(&hdr, &data); err != nil {
		return fmt.Errorf("lower CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH: %w", err)
	}
	return nil
}

// LimitCapabilities empties the bounding set, which every command inherits
// (where the agent holds CAP_SETPCAP; without it the set stays as the
// runtime made it), and lowers the lookup capabilities to permitted only.
// It must run before the first command.
func LimitCapabilities() error {
	if err := dropBoundingSet(); err != nil && !errors.Is(err, errNoSetpcap) {
		return err
	}
	return lowerTracerCaps()
}
