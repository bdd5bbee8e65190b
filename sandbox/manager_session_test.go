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
	if err := m.RemoveSandbox(ctx, first); err != nil {
		t.Fatal(err)
	}
	if !f.HasWorkspace("acme", "s1") {
		t.Fatal("RemoveSandbox took the workspace")
	}
	second, err := m.Ensure(ctx, spec(t, "s1"))
	if err != nil || second.ID == first.ID || f.Reuses.Load() != 1 {
		t.Fatalf("replacement %+v, %v; reuses %d, want a new sandbox on the old workspace", second, err, f.Reuses.Load())
	}
	if err := m.RemoveSandbox(ctx, sandbox.Sandbox{Tenant: "acme", Session: "none", ID: "c9"}); !errors.Is(err, sandbox.ErrNotFound) {
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
	sbs := map[string]sandbox.Sandbox{}
	for _, s := range []string{"idle", "dead", "busy"} {
		sb, err := m.Ensure(ctx, spec(t, s))
		if err != nil {
			t.Fatal(err)
		}
		sbs[s] = sb
	}
	if err := m.RemoveSandbox(ctx, sbs["dead"]); err != nil {
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
	replacing, err := m.Ensure(ctx, spec(t, "replacing"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveSandbox(ctx, replacing); err != nil {
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
	sb, err := m.Ensure(ctx, spec(t, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveSandbox(ctx, sb); err != nil {
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

// RemoveSandbox removes the sandbox it names, never its successor: calls
// that found the session's old sandbox dead race to replace it (each
// RemoveSandbox of the old one, then Ensure), and a removal that comes
// after another call's replacement leaves the new sandbox alone, so the
// session gets one new sandbox, not one per call.
func TestManagerRemoveSandboxRacingAReplacement(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f)
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		old, err := m.Ensure(ctx, spec(t, "s1"))
		if err != nil {
			t.Fatal(err)
		}
		f.Kill("acme", "s1")
		creates := f.Creates.Load()
		const calls = 8
		got := make(chan sandbox.Sandbox, calls)
		var wg sync.WaitGroup
		for i := 0; i < calls; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := m.RemoveSandbox(ctx, old); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
					t.Errorf("RemoveSandbox: %v", err)
				}
				sb, err := m.Ensure(ctx, spec(t, "s1"))
				if err != nil {
					t.Errorf("Ensure: %v", err)
				}
				got <- sb
			}()
		}
		wg.Wait()
		close(got)
		if n := f.Creates.Load() - creates; n != 1 {
			t.Fatalf("round %d: %d sandboxes created to replace one dead sandbox, want 1", round, n)
		}
		cur, err := f.Get(ctx, "acme", "s1")
		if err != nil || cur.ID == old.ID {
			t.Fatalf("round %d: the session's sandbox is %+v, %v; want the replacement", round, cur, err)
		}
		for sb := range got {
			if sb.ID != cur.ID {
				t.Errorf("round %d: a call got sandbox %s, the session has %s", round, sb.ID, cur.ID)
			}
		}
	}

	// Named by ID and creation (containerd gives a session's sandboxes
	// one ID), and so also by a Manager that does not know the session.
	cur, err := m.Ensure(ctx, spec(t, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	stale := cur
	stale.Created = cur.Created.Add(-time.Second)
	other, _ := newManager(t, f)
	for _, mm := range []*sandbox.Manager{m, other} {
		if err := mm.RemoveSandbox(ctx, stale); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("RemoveSandbox of a predecessor with the same ID: %v, want ErrNotFound", err)
		}
	}
	if sb, err := m.Ensure(ctx, spec(t, "s1")); err != nil || sb.ID != cur.ID {
		t.Fatalf("after stale removals the session has %+v, %v; want %s still", sb, err, cur.ID)
	}
	if err := other.RemoveSandbox(ctx, cur); err != nil {
		t.Errorf("RemoveSandbox of the current sandbox by another Manager: %v", err)
	}
	if _, err := f.Get(ctx, "acme", "s1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the named sandbox is still on the runtime: %v", err)
	}
}
