package containerd_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// burn spins the shell until its own CPU time, as the scheduler counts it
// to the nanosecond (/proc/<pid>/schedstat, read by the shell's builtin
// read: no fork), reaches 2 s, however loaded the host.
const burn = `while read ns rest < /proc/$$/schedstat && [ "$ns" -lt 2000000000 ]; do :; done; echo "$ns"`

// TestUsageMeasuresAKnownBurn burns 2 CPU-seconds in a sandbox and finds
// them in the task's cgroup within 5%, the bound, then 128 MiB
// held in memory. runc only: under
// gVisor nothing inside the sandbox counts CPU as the host does (see the
// Docker runtime's test).
func TestUsageMeasuresAKnownBurn(t *testing.T) {
	addr := containerdtest.Address(t)
	rt := containerdtest.New(t, containerdtest.Config(t, addr), sandbox.RuntimeRunc)
	s := spec(t, sandbox.RuntimeRunc, dockertest.Tenant("ctrd-usage"), "u", dockertest.Owner(t))
	s.TmpBytes = 160 * sandbox.MiB
	ctx := context.Background()
	sb, err := rt.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Remove(context.Background(), sb.ID) })
	exec(t, sb, "true") // the agent answers
	before, err := rt.Usage(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the burning shell's own CPU time: %s ns", strings.TrimSpace(exec(t, sb, burn)))
	after, err := rt.Usage(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	cpu := (after.CPU - before.CPU).Seconds()
	t.Logf("burned 2 CPU-seconds, the cgroup counted %.3f; memory %d bytes, peak %d", cpu, after.MemoryBytes, after.MemoryPeakBytes)
	if math.Abs(cpu-2) > 0.1 {
		t.Errorf("the cgroup counted %.3f CPU-seconds, want 2 within 5%%", cpu)
	}
	// 128 MiB written to /tmp, a tmpfs, stay charged to the sandbox's
	// memory (shmem: not file cache the kernel may drop).
	exec(t, sb, "head -c 134217728 /dev/zero > /tmp/fill")
	filled, err := rt.Usage(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	mib := float64(filled.MemoryBytes-after.MemoryBytes) / (1 << 20)
	t.Logf("128 MiB in /tmp, the cgroup counted %.1f MiB more in use; peak %.1f MiB", mib, float64(filled.MemoryPeakBytes)/(1<<20))
	if math.Abs(mib-128) > 128*0.05 {
		t.Errorf("the cgroup counted %.1f MiB more in use for 128 MiB in /tmp, want 128 within 5%%", mib)
	}
	// A removed sandbox's usage is not found.
	if err := rt.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Usage(ctx, sb.ID); err == nil {
		t.Error("Usage of a removed sandbox: no error")
	}
}
