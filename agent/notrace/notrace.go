// Package notrace installs the agent's seccomp filter for commands
// (ConfineCommands): it keeps the commands of a sandbox from tracing one
// another, and makes clone3 fail with ENOSYS so that libc starts threads
// with clone.
package notrace

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// No tracing between calls.
//
// Every command of a sandbox runs as the same user, and the kernel lets a
// process trace, read and write the memory of any other process of its
// user: with ptrace(2), process_vm_readv(2)/process_vm_writev(2), and
// pidfd_getfd(2), which copies another process's file descriptor. So a
// background task of one call could take over another call's processes
// (the ones holding a network grant, say). Docker's and containerd's
// default seccomp profiles allow all four on kernels from 4.8 (5.6 for
// pidfd_getfd), and a host without Yama (or with ptrace_scope 0) has
// nothing else in the way. ConfineCommands closes them with a seccomp filter of
// the agent's own, installed on every thread of the agent before it starts
// a command: filters are inherited across fork and execve and cannot be
// removed, so every command gets it. The price: strace, gdb and other
// tracers do not work in a sandbox (they fail with EPERM). What the filter
// cannot see is /proc/<pid>/mem, opened by path: the agent puts each call
// in a Landlock domain of its own for that (Config.ExecShim, package
// landlock; docs/security.md, Known limits).

// clone3 fails with ENOSYS.
//
// glibc (2.34 on) starts every thread and process with clone3 and falls back
// to clone only when clone3 fails with ENOSYS. The default profiles of
// Docker and containerd answer clone3 with ENOSYS (seccomp cannot read
// clone3's flags, which are in memory, to refuse new namespaces the way it
// does for clone's). gVisor applies the OCI profile itself (runsc
// --oci-seccomp) and answers every SCMP_ACT_ERRNO with EPERM whatever its
// errnoRet (runsc/specutils/seccomp: "runc always returns EPERM"), so under
// gVisor pthread_create failed (python3: "can't start new thread") and
// every threaded program with it, on Docker, containerd and pods alike.
// The filter answers clone3 with ENOSYS itself: of two filters that both
// return SECCOMP_RET_ERRNO, the one installed last decides the errno, on
// Linux (kernel/seccomp.c, seccomp_run_filters) and in gVisor's sentry
// (pkg/sentry/kernel/seccomp.go) alike, and the agent's filter is installed
// after the runtime's. Nothing is allowed that the profile refused: clone3
// still fails. The agent's own clone3 (a command born into its cgroup,
// executor/local on cgroup v2) meets the same ENOSYS, as it met the
// profiles' answer before (the agent has no CAP_SYS_ADMIN, which they
// ask for clone3): the executor falls back to the v1 hierarchy or process
// groups as it did.

// seccomp(2) constants (linux/seccomp.h, linux/audit.h).
const (
	seccompSetModeFilter   = 1
	seccompFilterFlagTsync = 1
	seccompRetAllow        = 0x7fff0000
	seccompRetErrno        = 0x00050000
	auditArchX86_64        = 0xc000003e
	auditArchI386          = 0x40000003
	auditArchAarch64       = 0xc00000b7
	auditArchARM           = 0x40000028
	x32SyscallBit          = 0x40000000
)

// clone3 is clone3's number on every architecture of the tables below.
const clone3 = 435

// tracingSyscalls are the system calls ConfineCommands refuses, per audit
// architecture this build may meet (a 64-bit process may still make
// 32-bit system calls: int 0x80 on x86-64, aarch32 on arm64): ptrace,
// process_vm_readv, process_vm_writev, pidfd_getfd. On x86-64 the x32 ABI's
// numbers (x32SyscallBit cleared) are refused too.
var tracingSyscalls = map[string]map[uint32][]uint32{
	"amd64": {
		auditArchX86_64: {101, 310, 311, 438, 521, 539, 540},
		auditArchI386:   {26, 347, 348, 438},
	},
	"arm64": {
		auditArchAarch64: {117, 270, 271, 438},
		auditArchARM:     {26, 376, 377, 438},
	},
}

// commandFilter returns the BPF program of ConfineCommands for goarch: the
// tracing system calls fail with EPERM and clone3 with ENOSYS, every other
// is allowed; a system call of an architecture not listed fails with EPERM.
func commandFilter(goarch string) ([]unix.SockFilter, error) {
	archs, ok := tracingSyscalls[goarch]
	if !ok {
		return nil, fmt.Errorf("no command filter for %s", goarch)
	}
	const (
		offNr   = 0 // struct seccomp_data: nr, arch, ...
		offArch = 4
	)
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	deny := stmt(unix.BPF_RET|unix.BPF_K, seccompRetErrno|uint32(unix.EPERM))
	enosys := stmt(unix.BPF_RET|unix.BPF_K, seccompRetErrno|uint32(unix.ENOSYS))
	allow := stmt(unix.BPF_RET|unix.BPF_K, seccompRetAllow)
	// A block per architecture: compare arch, skip the block if not it;
	// inside, load nr (x32 bit cleared on x86-64), answer clone3 with
	// ENOSYS, deny on a match.
	var prog []unix.SockFilter
	for _, arch := range sortedArchs(archs) {
		nrs := archs[arch]
		var block []unix.SockFilter
		block = append(block, stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr))
		if arch == auditArchX86_64 {
			block = append(block, stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, ^uint32(x32SyscallBit)))
		}
		block = append(block, jeq(clone3, 0, 1), enosys)
		for i, nr := range nrs {
			// On a match jump to the deny after the last comparison.
			block = append(block, jeq(nr, uint8(len(nrs)-i), 0))
		}
		block = append(block, allow, deny)
		prog = append(prog, stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch), jeq(arch, 0, uint8(len(block))))
		prog = append(prog, block...)
	}
	return append(prog, deny), nil
}

// sortedArchs returns the keys of archs, the native architecture first
// (the common case takes the fewest comparisons).
func sortedArchs(archs map[uint32][]uint32) []uint32 {
	var out []uint32
	for _, a := range []uint32{auditArchX86_64, auditArchAarch64, auditArchI386, auditArchARM} {
		if _, ok := archs[a]; ok {
			out = append(out, a)
		}
	}
	return out
}

// ConfineCommands installs the command filter (see above: no tracing,
// clone3 ENOSYS) on every thread of this process, and so on every process
// it starts from now on. It sets no-new-privileges, which installing a
// filter without CAP_SYS_ADMIN requires (sandboxes have it set already).
// It cannot be undone.
func ConfineCommands() error {
	prog, err := commandFilter(runtime.GOARCH)
	if err != nil {
		return err
	}
	return Install("command filter", prog)
}

// Install installs the seccomp filter prog on every thread of this process
// (SECCOMP_FILTER_FLAG_TSYNC), after setting no-new-privileges; name says
// whose filter it is in errors. It cannot be undone.
func Install(name string, prog []unix.SockFilter) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("%s: prctl(PR_SET_NO_NEW_PRIVS): %w", name, err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, seccompSetModeFilter, seccompFilterFlagTsync, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	switch {
	case errno != 0:
		return fmt.Errorf("%s: seccomp(SECCOMP_SET_MODE_FILTER): %w", name, errno)
	case r != 0:
		// TSYNC names the thread that could not take the filter.
		return fmt.Errorf("%s: seccomp: thread %d could not take the filter", name, r)
	}
	return nil
}
