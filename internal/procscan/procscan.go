// Package procscan is what every scan of /proc in this process shares: the
// bound on scans in flight (Limit, Slot) and a read of a small /proc file
// with plain system calls (ReadFile). The command runner (executor/local:
// process groups and tag groups) and a sandbox's PID 1 (agent/pid1: orphans,
// the OOM score and counter) both scan, and the bound holds for all of them
// together: the agent keeps within a fixed number of threads
// (agent/supervisor.go). Standard library only.
package procscan

import (
	"os"
	"sync/atomic"
	"syscall"
)

// slots, when set, bounds the /proc scans in flight (Limit).
var slots atomic.Pointer[chan struct{}]

// Limit bounds the scans of /proc in flight in this process (the searches
// of a command's tree and of orphans) to n; n <= 0: unbounded, the default.
// A scan is hundreds of system calls, each of which can hold an OS thread
// while the Go runtime starts another for the goroutines that wait: a
// sandbox's agent, which must keep within a fixed number of threads, runs
// only a few at a time, and the others wait as goroutines. Call it before
// any command starts.
func Limit(n int) {
	if n <= 0 {
		slots.Store(nil)
		return
	}
	ch := make(chan struct{}, n)
	slots.Store(&ch)
}

// Slot takes a scan slot, if scans are bounded; the result gives it back.
func Slot() (done func()) {
	s := slots.Load()
	if s == nil {
		return func() {}
	}
	*s <- struct{}{}
	return func() { <-*s }
}

// Names lists the entries of /proc (pids and the rest); with an error, the
// names read before it.
func Names() ([]string, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// ReadFile reads a small /proc file with plain system calls: os.ReadFile
// costs twice as many (it registers the file with the poller, stats it),
// which matters for scans under gVisor, where every system call is
// expensive.
func ReadFile(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 2048)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}
