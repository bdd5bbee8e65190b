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
// allows any process) before and after DenyTracing, and a forked child's
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
		return fmt.Sprintf("process_vm_readv=%v pidfd_getfd=%v", errName(rerr), errName(gerr))
	}
	if os.Getenv(notraceHelperEnv) == "child" {
		fmt.Println(try())
		return 0
	}
	fmt.Println("before:", try())
	if err := DenyTracing(); err != nil {
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

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// TestDenyTracing: the tracing system calls work before DenyTracing and
// fail with EPERM after it, in the process and in a process it starts.
func TestDenyTracing(t *testing.T) {
	t.Parallel()
	if _, err := tracingFilter(runtime.GOARCH); err != nil {
		t.Skipf("no filter for this architecture: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), notraceHelperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{
		"before: process_vm_readv=ok pidfd_getfd=ok\n",
		"after: process_vm_readv=EPERM pidfd_getfd=EPERM\n",
		"child: process_vm_readv=EPERM pidfd_getfd=EPERM\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("helper said:\n%s\nwant a line %q", got, want)
		}
	}
	if _, err := tracingFilter("mips"); err == nil {
		t.Error("a filter for an architecture without a table")
	}
}
