package faults_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
)

// pause freezes every process of sb through its engine (docker pause;
// containerd's task Pause): under gVisor `runsc pause` stops the whole
// sandbox, under runc the cgroup freezer does. It returns the unpause,
// which the test's end calls too (a test that fails midway leaves no
// frozen sandbox behind).
func (r *rig) pause(t *testing.T, sb sandbox.Sandbox) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	var unpause func(ctx context.Context) error
	switch r.e.Name {
	case "docker":
		cli := dockertest.Engine(t)
		if err := cli.ContainerPause(ctx, sb.ID); err != nil {
			t.Fatalf("pausing sandbox %s: %v", sb.ID, err)
		}
		unpause = func(ctx context.Context) error { return cli.ContainerUnpause(ctx, sb.ID) }
	case "containerd":
		c, nsctx := containerdtest.Client(t, containerdtest.Address(t))
		ctr, err := c.LoadContainer(nsctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		task, err := ctr.Task(nsctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Pause(nsctx); err != nil {
			t.Fatalf("pausing sandbox %s: %v", sb.ID, err)
		}
		unpause = func(context.Context) error { return task.Resume(nsctx) }
	default:
		t.Fatalf("no pause on engine %s", r.e.Name)
	}
	done := false
	resume := func() {
		if done {
			return
		}
		done = true
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		unpause(ctx) // gone already, most often: removed as dead
	}
	t.Cleanup(resume)
	return resume
}

// TestSandboxPaused: a session's sandbox is paused through its engine
// (under gVisor `runsc pause`: the whole sandbox stops, the one way to
// stop its agent from the host without wedging the engine, as
// TestAgentStopped explains; under runc the cgroup freezer). A call with
// timeoutMs 3000 ends with a clear error within its bounds — its agent
// answered neither the call nor a liveness check — and the paused
// sandbox is removed (or, where its removal outlasted the verdict's
// bound, the error says so and the next call removes it); the next call
// runs in a new sandbox with the session's workspace. (On containerd
// under gVisor a paused task cannot be signalled: sandbox/containerd's
// removal resumes it first.)
func TestSandboxPaused(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			t.Run(runtime, func(t *testing.T) { sandboxPaused(t, newRig(t, e, runtime)) })
		}
	})
}

func sandboxPaused(t *testing.T, r *rig) {
	const s = "paused"
	r.write(t, s, "before")
	dead := r.sandboxOf(t, s)
	start := time.Now()
	r.pause(t, dead)
	res, took := r.bash(t, s, "echo ran", "timeoutMs", 3000)
	if !res.IsError || !strings.Contains(res.Text, "did not answer") && !strings.Contains(res.Text, "stopped answering") {
		t.Errorf("the call to the paused sandbox: %q, want an error saying its agent did not answer", res.Text)
	}
	if sb, err := r.get(s); err == nil && same(sb, dead) && !strings.Contains(res.Text, "removing it failed") {
		t.Errorf("the paused sandbox %s is still on the engine (%s) after the call reported it removed", sb.ID, sb.State)
	}
	next, nextTook := r.bash(t, s, "cat /workspace/before")
	t.Logf("fault %s/%s/sandbox paused: the call (timeoutMs 3000) ended after %s: %q; the next call took %s (recovery %s)",
		r.e.Name, r.runtime, took.Round(time.Millisecond), res.Text, nextTook.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if next.IsError || next.Text != "before" {
		t.Errorf("the next call: %q", next.Text)
	}
	r.recovered(t, s, dead, "before")
}
