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
// them in the task's cgroup within 5%, the bound. runc only: under
// gVisor nothing inside the sandbox counts CPU as the host does (see the
// Docker runtime's test).
func TestUsageMeasuresAKnownBurn(t *testing.T) {
	addr := containerdtest.Address(t)
	rt := containerdtest.New(t, containerdtest.Config(t, addr), sandbox.RuntimeRunc)
	s := spec(t, sandbox.RuntimeRunc, dockertest.Tenant("ctrd-usage"), "u", dockertest.Owner(t))
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
	if after.MemoryBytes <= 0 {
		t.Errorf("memory in use %d, want some", after.MemoryBytes)
	}
	// A removed sandbox's usage is not found.
	if err := rt.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Usage(ctx, sb.ID); err == nil {
		t.Error("Usage of a removed sandbox: no error")
	}
}
