package kube_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
)

// burnCommand spins the shell until its own CPU time, as the scheduler
// counts it (/proc/<pid>/schedstat, read by the shell's builtin read),
// reaches 2 s: a known amount however loaded the node.
const burnCommand = `while read ns rest < /proc/$$/schedstat && [ "$ns" -lt 2000000000 ]; do :; done; echo "burned $ns ns"`

// TestClusterUsageKnownBurn burns 2 CPU-seconds in a session pod on the
// real cluster and finds them, within 5% (the bound), in what
// Usage reads from the kubelet's summary: the growth between a reading
// the kubelet took after the pod had settled and one it took after the
// burn ended (it refreshes its figures every 10-15 s, so each waits for a
// reading taken after its moment).
func TestClusterUsageKnownBurn(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.Namespace(t)
	rt := c.New(t, kubetest.Config(ns), "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := rt.Create(ctx, kubetest.Spec(t, "usage", "burn", "usage-test", sandbox.RuntimeRunc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Remove(context.Background(), sb.ID) })
	kubetest.Exec(t, sb, "true")
	// after returns the pod's counters of a reading the kubelet took
	// after the moment at.
	after := func(what string, at time.Time) time.Duration {
		t.Helper()
		for {
			c, took, err := rt.UsageAt(ctx, sb.ID)
			if err == nil && took.After(at) {
				t.Logf("%s: %v of CPU, %d bytes in use (the kubelet's reading %v after the moment)", what, c.CPU, c.MemoryBytes, took.Sub(at).Round(time.Millisecond))
				return c.CPU
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: no reading of the kubelet after %v: %v", what, at, err)
			}
			time.Sleep(time.Second)
		}
	}
	before := after("before the burn", time.Now())
	start := time.Now()
	if out := kubetest.Exec(t, sb, burnCommand); !strings.HasPrefix(out, "burned ") {
		t.Fatalf("burn: %q", out)
	}
	t.Logf("the burn took %v", time.Since(start).Round(time.Millisecond))
	burned := (after("after the burn", time.Now()) - before).Seconds()
	t.Logf("the kubelet counted %.3f CPU-seconds for a 2 CPU-seconds burn", burned)
	if math.Abs(burned-2) > 0.1 {
		t.Errorf("burned %.3f CPU-seconds, want 2 within 5%%", burned)
	}
	// A pod that is gone is ErrNotFound. Remove deletes the pod with a
	// short grace and may return while the API server still lists it
	// terminating (it has a node and figures until it goes).
	if err := rt.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = rt.Usage(ctx, sb.ID)
	for err == nil && ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
		_, err = rt.Usage(ctx, sb.ID)
	}
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("usage of a removed pod: %v, want not found", err)
	}
}

// TestClusterWorkspaceBytes writes 48 MiB into a session pod's
// /workspace (a memory emptyDir, the default) on the real cluster and
// finds them, within 1 MiB, in what SandboxWorkspaceUsage reads from the
// kubelet's summary: the first measurement the kubelet took after the
// write ended. The kubelet measures a pod's volumes when it first sees
// the pod and then every one to two of its volume periods (1 min by
// default, jittered), so the test may wait about two minutes.
func TestClusterWorkspaceBytes(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.Namespace(t)
	rt := c.New(t, kubetest.Config(ns), "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := rt.Create(ctx, kubetest.Spec(t, "usage", "workspace", "usage-test", sandbox.RuntimeRunc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Remove(context.Background(), sb.ID) })
	const want = 48 << 20
	if out := kubetest.Exec(t, sb, "head -c 50331648 /dev/zero > /workspace/blob && stat -c %s /workspace/blob"); strings.TrimSpace(out) != "50331648" {
		t.Fatalf("write: %q", out)
	}
	written := time.Now()
	for {
		n, at, err := rt.SandboxWorkspaceUsage(ctx, sb.ID)
		if err == nil && at.After(written) {
			t.Logf("the kubelet measured %d bytes (%.3f MiB) for %d written, %v after the write", n, float64(n)/(1<<20), want, at.Sub(written).Round(time.Millisecond))
			if d := n - want; d < -(1<<20) || d > 1<<20 {
				t.Errorf("workspace %d bytes, want %d within 1 MiB", n, want)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no measurement of the kubelet after the write: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
	if err := rt.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = rt.SandboxWorkspaceUsage(ctx, sb.ID)
	for err == nil && ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
		_, _, err = rt.SandboxWorkspaceUsage(ctx, sb.ID)
	}
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("workspace of a removed pod: %v, want not found", err)
	}
}
