package docker_test

import (
	"context"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// burn spins a shell until its own CPU time, as the scheduler counts it
// to the nanosecond (/proc/<pid>/schedstat's first field, read by the
// shell's builtin read: no fork), reaches 2 s, however loaded the host.
// RLIMIT_CPU (ulimit -t) is no reference: it is checked against tick-based
// times, which ran 3% above the cgroup's count here.
const burn = `while read ns rest < /proc/$$/schedstat && [ "$ns" -lt 2000000000 ]; do :; done; echo "$ns"`

// TestUsageMeasuresAKnownBurn burns 2 CPU-seconds in a sandbox and finds
// them in the cgroup's counters within 5%, the bound, then 128 MiB
// held in memory. It logs what one reading costs.
//
// runc only: under gVisor the sandbox's clocks are the Sentry's, not the
// host scheduler's (a burn stopped by RLIMIT_CPU after 2 s of the
// Sentry's CPU time showed 1.06 CPU-seconds in the cgroup on this loaded
// 2-core machine; /proc/<pid>/schedstat is the Sentry's too), so nothing
// inside the sandbox is a reference to check the cgroup by.
func TestUsageMeasuresAKnownBurn(t *testing.T) {
	const rt = sandbox.RuntimeRunc
	e := newEnv(t, rt)
	sb := e.ensure(e.spec("usage", sandbox.WithTmpSize(160*sandbox.MiB)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, err := e.rt.Usage(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code, err := e.exec(ctx, sb.ID, []string{"sh", "-c", burn})
	if err != nil || code != 0 {
		t.Fatalf("the burn: %v, exit %d, stderr %q", err, code, stderr)
	}
	t.Logf("the burning shell's own CPU time: %s ns", strings.TrimSpace(stdout))
	after, err := e.rt.Usage(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	cpu := (after.CPU - before.CPU).Seconds()
	t.Logf("%s: burned 2 CPU-seconds, the cgroup counted %.3f; memory %d bytes, peak %d", rt, cpu, after.MemoryBytes, after.MemoryPeakBytes)
	if math.Abs(cpu-2) > 0.1 {
		t.Errorf("the cgroup counted %.3f CPU-seconds, want 2 within 5%%", cpu)
	}
	if after.MemoryBytes <= 0 || after.MemoryPeakBytes < after.MemoryBytes && after.MemoryPeakBytes != 0 {
		t.Errorf("memory %d, peak %d: want some in use, and a peak at least that", after.MemoryBytes, after.MemoryPeakBytes)
	}

	// 128 MiB written to /tmp, a tmpfs, stay charged to the sandbox's
	// memory (shmem: not file cache the kernel may drop).
	if _, stderr, code, err := e.exec(ctx, sb.ID, []string{"sh", "-c", "head -c 134217728 /dev/zero > /tmp/fill"}); err != nil || code != 0 {
		t.Fatalf("filling /tmp: %v, exit %d, stderr %q", err, code, stderr)
	}
	filled, err := e.rt.Usage(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	mib := float64(filled.MemoryBytes-after.MemoryBytes) / (1 << 20)
	t.Logf("%s: 128 MiB in /tmp, the cgroup counted %.1f MiB more in use; peak %.1f MiB", rt, mib, float64(filled.MemoryPeakBytes)/(1<<20))
	if math.Abs(mib-128) > 128*0.05 {
		t.Errorf("the cgroup counted %.1f MiB more in use for 128 MiB in /tmp, want 128 within 5%%", mib)
	}
	if filled.MemoryPeakBytes < filled.MemoryBytes {
		t.Errorf("peak %d below the memory in use %d", filled.MemoryPeakBytes, filled.MemoryBytes)
	}

	// What a reading costs this process (the engine's own work is
	// not in it): reported, not asserted.
	const n = 20
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	for range n {
		if _, err := e.rt.Usage(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	wall := time.Since(start) / n
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpuPer := time.Duration((ru1.Utime.Nano()+ru1.Stime.Nano())-(ru0.Utime.Nano()+ru0.Stime.Nano())) / n
	t.Logf("%s: one reading: %v wall, %v of this process's CPU", rt, wall, cpuPer)
}
