// Command ptrace tries, on the process whose pid is its argument, what one
// call's commands could do to another call's processes of the same user:
// ptrace(PTRACE_ATTACH), process_vm_readv, pidfd_getfd and opening
// /proc/<pid>/mem, and prints one line per attempt ("ptrace: EPERM"). The
// Docker tests run it in a sandbox. (testdata: not part of the module's
// build.)
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	pid, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	err = unix.PtraceAttach(pid)
	if err == nil {
		unix.PtraceDetach(pid)
	}
	fmt.Println("ptrace:", name(err))

	var b [1]byte
	addr := firstMapping(pid)
	_, err = unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &b[0], Len: 1}}, []unix.RemoteIovec{{Base: addr, Len: 1}}, 0)
	fmt.Println("process_vm_readv:", name(err))

	pfd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		var fd int
		fd, err = unix.PidfdGetfd(pfd, 0, 0)
		if err == nil {
			unix.Close(fd)
		}
	}
	fmt.Println("pidfd_getfd:", name(err))

	f, err := os.Open("/proc/" + os.Args[1] + "/mem")
	if err == nil {
		f.Close()
	}
	fmt.Println("mem:", name(err))
}

// firstMapping returns the start of the process's first mapping (0 if its
// maps cannot be read: the read then fails with EFAULT, not EPERM).
func firstMapping(pid int) uintptr {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	start, _, _ := strings.Cut(sc.Text(), "-")
	a, _ := strconv.ParseUint(start, 16, 64)
	return uintptr(a)
}

func name(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(e)
	}
	if pe, ok := err.(*os.PathError); ok {
		if e, ok := pe.Err.(unix.Errno); ok {
			return unix.ErrnoName(e)
		}
	}
	return err.Error()
}
