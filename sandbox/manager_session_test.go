package sandbox_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// A dead sandbox is replaced (RemoveSandbox, Ensure) and the new one finds
// the session's workspace; Remove ends the session, workspace and all.
func TestManagerSessionOutlivesItsSandbox(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f)
	ctx := context.Background()
	first, err := m.Ensure(ctx, spec(t, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	f.Kill("acme", "s1")
	if err := m.RemoveSandbox(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if !f.HasWorkspace("acme", "s1") {
		t.Fatal("RemoveSandbox took the workspace")
	}
	second, err := m.Ensure(ctx, spec(t, "s1"))
	if err != nil || second.ID == first.ID || f.Reuses.Load() != 1 {
		t.Fatalf("replacement %+v, %v; reuses %d, want a new sandbox on the old workspace", second, err, f.Reuses.Load())
	}
	if err := m.RemoveSandbox(ctx, "acme", "none"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("RemoveSandbox of no sandbox: %v", err)
	}

	if err := m.Remove(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if f.HasWorkspace("acme", "s1") {
		t.Error("Remove kept the workspace")
	}
	if err := m.Remove(ctx, "acme", "s1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("second Remove: %v, want ErrNotFound", err)
	}
}

// A sandbox removed behind the Manager's back leaves a session to end:
// Remove deletes its workspace and succeeds.
func TestManagerRemoveEndsASessionWithoutSandbox(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f)
	ctx := context.Background()
	if _, err := m.Ensure(ctx, spec(t, "s1")); err != nil {
		t.Fatal(err)
	}
	f.Vanish("acme", "s1")
	if err := m.Remove(ctx, "acme", "s1"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if f.HasWorkspace("acme", "s1") {
		t.Error("workspace kept")
	}
	// A workspace nobody knows (a session of an earlier server) ends too.
	f.Workspace("acme", "old")
	if err := m.Remove(ctx, "acme", "old"); err != nil || f.HasWorkspace("acme", "old") {
		t.Errorf("Remove of a workspace-only session: %v, kept %v", err, f.HasWorkspace("acme", "old"))
	}
}

// The reaper ends idle sessions, including those whose sandbox is gone,
// and their workspaces with them; a session in use keeps its own.
func TestManagerReapEndsSessions(t *testing.T) {
	f := newFake()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	m, _ := newManager(t, f, func(c *sandbox.Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	ctx := context.Background()
	for _, s := range []string{"idle", "dead", "busy"} {
		if _, err := m.Ensure(ctx, spec(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.RemoveSandbox(ctx, "acme", "dead"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	m.Touch("acme", "busy")
	reaped, err := m.Reap(ctx, 30*time.Minute)
	if err != nil || len(reaped) != 1 || reaped[0].Session != "idle" {
		t.Fatalf("reaped %+v, %v; want the idle sandbox", reaped, err)
	}
	for s, want := range map[string]bool{"idle": false, "dead": false, "busy": true} {
		if f.HasWorkspace("acme", s) != want {
			t.Errorf("%s: workspace %v, want %v", s, !want, want)
		}
	}
	// Nothing is left to reap twice.
	if reaped, err := m.Reap(ctx, 30*time.Minute); err != nil || len(reaped) != 0 {
		t.Errorf("second reap: %+v, %v", reaped, err)
	}
}

// Adopt's sweep keeps the workspaces of live sessions — with a sandbox, or
// whose sandbox is being replaced, or found dead (it is replaced on next
// use) — and removes those of sessions neither on the engine nor live.
func TestManagerAdoptSweepsWorkspacesOfEndedSessions(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f)
	ctx := context.Background()
	if _, err := m.Ensure(ctx, spec(t, "replacing")); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveSandbox(ctx, "acme", "replacing"); err != nil {
		t.Fatal(err)
	}
	f.Put(sandbox.Sandbox{Tenant: "acme", Session: "dead", Owner: "srv", State: sandbox.StateExited})
	f.Workspace("acme", "dead")
	f.Put(sandbox.Sandbox{Tenant: "acme", Session: "live", Owner: "srv", State: sandbox.StateRunning})
	f.Workspace("acme", "live")
	f.Workspace("acme", "ended")

	rep, err := m.Adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Swept, []string{"workspace:acme/ended"}) {
		t.Errorf("swept %v, want the ended session's workspace only", rep.Swept)
	}
	for _, s := range []string{"replacing", "dead", "live"} {
		if !f.HasWorkspace("acme", s) {
			t.Errorf("%s: workspace swept", s)
		}
	}
	// The dead one's session goes on: its next sandbox has the workspace.
	if _, err := m.Ensure(ctx, spec(t, "dead")); err != nil || f.Reuses.Load() != 1 {
		t.Errorf("Ensure after Adopt: %v, reuses %d", err, f.Reuses.Load())
	}
}

// The reaper leaves a session without a sandbox here alone when a sandbox
// of it is on the engine after all (another process made it).
func TestManagerReapSparesASessionRecreatedElsewhere(t *testing.T) {
	f := newFake()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	m, _ := newManager(t, f, func(c *sandbox.Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	ctx := context.Background()
	if _, err := m.Ensure(ctx, spec(t, "s1")); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveSandbox(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	f.Put(sandbox.Sandbox{Tenant: "acme", Session: "s1", Owner: "srv", State: sandbox.StateRunning})
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if _, err := m.Reap(ctx, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Get(ctx, "acme", "s1"); err != nil || !f.HasWorkspace("acme", "s1") {
		t.Errorf("reaped a session recreated elsewhere: %v, workspace %v", err, f.HasWorkspace("acme", "s1"))
	}
}
