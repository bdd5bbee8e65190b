// Package threads holds a Go process's OS threads to a number it creates
// up front (Reserve), for processes that share a pids cgroup with programs
// that may fill it: the Go runtime dies ("newosproc") when it cannot create
// a thread it needs, so it creates them while it can. The agent
// (agentapi.AgentTasks) and its exec guard (agentapi.GuardTasks) use it.
package threads

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Reserve makes the Go runtime create OS threads now, while it can,
// until the process has total of them (as near as the runtime allows). The goroutines unlock before they
// end, so the threads stay, idle, in the runtime's pool.
func Reserve(total int) {
	var release sync.WaitGroup
	release.Add(1)
	var held sync.WaitGroup
	for i := 0; i < total && Count() < total; i++ {
		ready := make(chan struct{})
		held.Add(1)
		go func() {
			defer held.Done()
			runtime.LockOSThread()
			close(ready)
			release.Wait()
			runtime.UnlockOSThread()
		}()
		<-ready
	}
	release.Done()
	held.Wait()
	// Waking goroutines can make the runtime start a thread more than the
	// locked ones needed: a goroutine that ends locked to its thread ends
	// the thread, so end the extra ones (the main thread is never ended;
	// a try that lands on it changes nothing).
	for i := 0; i < 2*total && Count() > total; i++ {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
		}()
		<-done
		time.Sleep(time.Millisecond)
	}
}

// Count is the number of threads of this process, 0 if unknown.
func Count() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
