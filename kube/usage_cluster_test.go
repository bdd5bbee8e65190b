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
