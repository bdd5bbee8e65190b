package sandbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// TestManagerSuspend: Config.Suspend saves a session's sandbox before it
// goes, on request (Manager.Suspend) and at its idle TTL (Reap); a save
// that fails keeps the sandbox and the session's state, and a session's
// next sandbox is handed to Config.Resume before any call gets it, a new
// one removed when Resume fails and a taken-over one kept.
func TestManagerSuspend(t *testing.T) {
	f := newFake()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f.Now = clock
	var saved, resumed []string
	failSave, failResume := map[string]error{}, map[string]error{}
	m, _ := newManager(t, f, func(c *sandbox.Config) {
		c.Now = clock
		c.Suspend = func(ctx context.Context, sb sandbox.Sandbox) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Errorf("Suspend of %s without a deadline", sb.Session)
			}
			mu.Lock()
			defer mu.Unlock()
			if err := failSave[sb.Session]; err != nil {
				return err
			}
			saved = append(saved, sb.Session+"@"+sb.ID)
			return nil
		}
		c.Resume = func(ctx context.Context, sb sandbox.Sandbox) error {
			mu.Lock()
			defer mu.Unlock()
			resumed = append(resumed, sb.Session+"@"+sb.ID)
			return failResume[sb.Session]
		}
	})
	ctx := context.Background()
	ensure := func(s string) sandbox.Sandbox {
		t.Helper()
		sb, err := m.Ensure(ctx, spec(t, s))
		if err != nil {
			t.Fatalf("Ensure %s: %v", s, err)
		}
		return sb
	}
	a := ensure("a")
	f.Workspace("acme", "a")
	if len(resumed) != 1 || resumed[0] != "a@"+a.ID {
		t.Fatalf("Resume on creation: %v, want [a@%s]", resumed, a.ID)
	}
	ensure("a")
	if len(resumed) != 1 {
		t.Fatalf("Resume on reuse: %v, want it once per sandbox", resumed)
	}

	// On request.
	if err := m.Suspend(ctx, "acme", "a"); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	if len(saved) != 1 || saved[0] != "a@"+a.ID {
		t.Fatalf("saved %v, want [a@%s]", saved, a.ID)
	}
	if _, err := f.Get(ctx, "acme", "a"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("the suspended session's sandbox: %v, want it gone", err)
	}
	if f.HasWorkspace("acme", "a") {
		t.Fatal("the suspended session's runtime state stayed")
	}
	if err := m.Suspend(ctx, "acme", "a"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Suspend of a session without a sandbox: %v, want ErrNotFound", err)
	}
	a2 := ensure("a")
	if a2.ID == a.ID || resumed[len(resumed)-1] != "a@"+a2.ID {
		t.Fatalf("the next sandbox %s was not resumed: %v", a2.ID, resumed)
	}

	// A save that fails keeps everything.
	f.Workspace("acme", "a")
	failSave["a"] = errors.New("store full")
	if err := m.Suspend(ctx, "acme", "a"); err == nil || err.Error() != "store full" {
		t.Fatalf("Suspend with a failing save: %v, want its error", err)
	}
	if sb := ensure("a"); sb.ID != a2.ID || !f.HasWorkspace("acme", "a") {
		t.Fatalf("after a failed suspend: sandbox %s (want %s), workspace %v", sb.ID, a2.ID, f.HasWorkspace("acme", "a"))
	}

	// At the idle TTL: suspended when saved, kept when not.
	ensure("b")
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	reaped, err := m.Reap(ctx, 30*time.Minute)
	if err == nil || len(reaped) != 1 || reaped[0].Session != "b" {
		t.Fatalf("Reap: %v, %v; want b suspended and a's failed save reported", reaped, err)
	}
	if _, err := f.Get(ctx, "acme", "a"); err != nil {
		t.Fatalf("a, whose save failed, lost its sandbox: %v", err)
	}
	if reaped, err := m.Reap(ctx, 30*time.Minute); err != nil || len(reaped) != 0 {
		t.Fatalf("Reap right after a failed save: %v, %v; want a kept for another TTL", reaped, err)
	}

	// A new sandbox Resume fails for is removed; the call fails.
	failResume["c"] = errors.New("snapshot corrupt")
	if _, err := m.Ensure(ctx, spec(t, "c")); err == nil || err.Error() != "snapshot corrupt" {
		t.Fatalf("Ensure with a failing Resume: %v", err)
	}
	if _, err := f.Get(ctx, "acme", "c"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("the sandbox Resume failed for: %v, want it removed", err)
	}
}
