package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// One Landlock domain per call.
//
// Every command of a sandbox runs as the same user, so without more, one
// call's commands may open /proc/<pid>/mem of another call's process (the
// seccomp filter, local.DenyTracing, stops ptrace and process_vm_*, not an
// open) and write into it: a background task could make a process of a
// call holding a network grant connect for it. Landlock fences that: a
// process in a Landlock domain may ptrace-access (the check /proc/<pid>/mem
// goes through) only processes of its own domain or of domains nested in
// it. So each command is started through the agent binary itself,
// `shellbox-agent --landlock-exec PATH ARGV...`, which enters a new domain
// of its own and execs the command: every call is a domain, the calls are
// siblings, and none reaches another's memory; the agent, outside every
// domain, still reaches them all. The domain restricts nothing else: its
// ruleset handles one right commands never have (making block devices).
//
// Where the kernel has no Landlock (gVisor, whose sentry refuses another
// process's mem anyway), the agent starts commands directly.

// landlockExecArg is the first argument that makes the agent binary the
// per-call shim.
const landlockExecArg = "--landlock-exec"

// landlockABI returns the kernel's Landlock ABI version, 0 when it has none.
func landlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// enterDomain puts the calling thread into a new Landlock domain.
func enterDomain() error {
	// Only handled_access_fs: the size of ABI 1's struct, which every
	// kernel with Landlock accepts.
	attr := unix.LandlockRulesetAttr{Handled_access_fs: unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), 8, 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	defer unix.Close(int(fd))
	// Unprivileged domains need no_new_privs (the sandbox has it already).
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	return nil
}

// landlockExec is the shim: args are the command's path and argv. It does
// not return unless the command cannot start; its exit codes are the
// shell's for a command that cannot run (126) or is not found (127).
func landlockExec(args []string, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprintf(stderr, "shellbox-agent: %s PATH ARGV0 [ARG...]\n", landlockExecArg)
		return 126
	}
	// The domain is the thread's: it must be the thread that execs.
	runtime.LockOSThread()
	if err := enterDomain(); err != nil {
		fmt.Fprintf(stderr, "shellbox-agent: the command's Landlock domain: %v\n", err)
		return 126
	}
	err := unix.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(stderr, "shellbox-agent: exec %s: %v\n", args[0], err)
	if err == unix.ENOENT {
		return 127
	}
	return 126
}
