package notrace

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// notraceHelperEnv makes the test binary run notraceHelper instead of the
// tests: a filter, once installed, stays with the process.
const notraceHelperEnv = "SHELLBOX_LOCAL_NOTRACE_HELPER"

// notraceHelper tries the tracing system calls on itself (which the kernel
// allows any process) before and after ConfineCommands, and a forked child's
// ptrace after it, and prints what each returned.
func notraceHelper() int {
	try := func() string {
		var b [1]byte
		local := []unix.Iovec{{Base: &b[0], Len: 1}}
		src := []byte{42}
		remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: 1}}
		_, rerr := unix.ProcessVMReadv(os.Getpid(), local, remote, 0)
		pfd, err := unix.PidfdOpen(os.Getpid(), 0)
		if err != nil {
			return "pidfd_open: " + err.Error()
		}
		defer unix.Close(pfd)
		fd, gerr := unix.PidfdGetfd(pfd, 0, 0)
		if gerr == nil {
			unix.Close(fd)
		}
		// clone3 with a size of 0: EINVAL where the kernel sees it.
		_, _, cerr := unix.Syscall(clone3, 0, 0, 0)
		return fmt.Sprintf("process_vm_readv=%v pidfd_getfd=%v clone3=%v", errName(rerr), errName(gerr), errName(cerr))
	}
	if os.Getenv(notraceHelperEnv) == "child" {
		fmt.Println(try())
		return 0
	}
	fmt.Println("before:", try())
	// The runtime's profile as gVisor applies it: clone3 EPERM, installed
	// first.
	if os.Getenv(notraceHelperEnv) == "eperm" {
		if err := Install("runtime profile", clone3EPERM()); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Println("profile:", try())
	}
	if err := ConfineCommands(); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("after:", try())
	// A process started after it (this binary again, trying the same).
	child := exec.Command("/proc/self/exe", "-test.run=^$")
	child.Env = append(os.Environ(), notraceHelperEnv+"=child")
	out, _ := child.CombinedOutput()
	fmt.Print("child: " + string(out))
	return 0
}

// clone3EPERM is a filter that answers clone3 with EPERM, as gVisor
// answers the default profiles' SCMP_ACT_ERRNO, and allows the rest.
func clone3EPERM() []unix.SockFilter {
	return []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: clone3, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: seccompRetErrno | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: seccompRetAllow},
	}
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// TestConfineCommands: the tracing system calls work before
// ConfineCommands and fail with EPERM after it, in the process and in a
// process it starts; clone3 reaches the kernel before (EINVAL for its size
// of 0) and fails with ENOSYS after, also where a filter installed before
// answered it with EPERM (gVisor's way with the runtime's profile).
func TestConfineCommands(t *testing.T) {
	t.Parallel()
	if _, err := commandFilter(runtime.GOARCH); err != nil {
		t.Skipf("no filter for this architecture: %v", err)
	}
	for _, mode := range []string{"1", "eperm"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), notraceHelperEnv+"="+mode)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper %s: %v\n%s", mode, err, out)
		}
		got := string(out)
		want := []string{
			"before: process_vm_readv=ok pidfd_getfd=ok clone3=EINVAL\n",
			"after: process_vm_readv=EPERM pidfd_getfd=EPERM clone3=ENOSYS\n",
			"child: process_vm_readv=EPERM pidfd_getfd=EPERM clone3=ENOSYS\n",
		}
		if mode == "eperm" {
			want = append(want, "profile: process_vm_readv=ok pidfd_getfd=ok clone3=EPERM\n")
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("helper %s said:\n%s\nwant a line %q", mode, got, w)
			}
		}
	}
	if _, err := commandFilter("mips"); err == nil {
		t.Error("a filter for an architecture without a table")
	}
}
