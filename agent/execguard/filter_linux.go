//go:build linux

package execguard

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/agent/notrace"
)

// seccomp(2) and audit constants (linux/seccomp.h, linux/audit.h).
const (
	seccompRetAllow = 0x7fff0000
	seccompRetTrace = 0x7ff00000
	seccompRetErrno = 0x00050000
	auditArchX86_64 = 0xc000003e
	auditArchI386   = 0x40000003
	x32SyscallBit   = 0x40000000

	// execve and execveat: x86-64, x32 (with x32SyscallBit), i386.
	nrExecve64, nrExecveat64   = 59, 322
	nrExecveX32, nrExecveatX32 = 520, 545
	nrExecve386, nrExecveat386 = 11, 358
)

// execFilter is the BPF program InstallFilter installs on amd64: execve and
// execveat of the native ABI stop in the tracer (SECCOMP_RET_TRACE); those
// of the x32 and i386 ABIs, which the tracer does not read, fail with EPERM;
// everything else is allowed (agent/notrace's filter refuses the
// architectures it does not know).
func execFilter() []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	const offNr, offArch = 0, 4
	ld := func(off uint32) unix.SockFilter { return stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
	ret := func(k uint32) unix.SockFilter { return stmt(unix.BPF_RET|unix.BPF_K, k) }
	allow, trace, eperm := ret(seccompRetAllow), ret(seccompRetTrace), ret(seccompRetErrno|uint32(unix.EPERM))
	return []unix.SockFilter{
		/* 0 */ ld(offArch),
		/* 1 */ jeq(auditArchX86_64, 0, 6), // else to 8
		/* 2 */ ld(offNr),
		/* 3 */ jeq(nrExecve64, 9, 0), // to 13: trace
		/* 4 */ jeq(nrExecveat64, 8, 0), // to 13
		/* 5 */ jeq(x32SyscallBit|nrExecveX32, 6, 0), // to 12: eperm
		/* 6 */ jeq(x32SyscallBit|nrExecveatX32, 5, 0), // to 12
		/* 7 */ allow,
		/* 8 */ jeq(auditArchI386, 0, 5), // else to 14: allow
		/* 9 */ ld(offNr),
		/* 10 */ jeq(nrExecve386, 1, 0), // to 12
		/* 11 */ jeq(nrExecveat386, 0, 2), // to 12, else to 14
		/* 12 */ eperm,
		/* 13 */ trace,
		/* 14 */ allow,
	}
}

// InstallFilter installs the exec filter on every thread of this process
// (TSYNC), and so on every process it starts from now on: from here on an
// exec with no tracer fails (ENOSYS), so only after Start's guard has
// seized every thread. It needs no-new-privileges (agent/notrace sets it).
// It cannot be undone.
func InstallFilter() error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("exec guard: no exec filter for %s", runtime.GOARCH)
	}
	return notrace.Install("exec guard", execFilter())
}
