package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/server"
)

// TestSweepSuspended: suspended sessions past their suspendedTTL are
// deleted with their snapshots, and so are the records of sessions that
// ended without a suspend; younger suspended ones and running sessions
// (a sandbox) stay.
func TestSweepSuspended(t *testing.T) {
	store, err := snapshot.NewDir(snapshot.DirOptions{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f := sandboxtest.NewFake()
	l, err := New(Config{Runtime: f, Owner: "o", Ready: func(context.Context, sandbox.Sandbox) error { return nil },
		Snapshots: store, SuspendedTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec, err := sandbox.NewSpec("acme", "live", sandbox.WithImage("img"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.manager.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, c := range []struct {
		session string
		r       record
	}{
		{"old", record{State: stateSuspended, Suspended: now.Add(-2 * time.Hour)}},
		{"young", record{State: stateSuspended, Suspended: now.Add(-10 * time.Minute)}},
		{"live", record{State: stateRunning, Suspended: now.Add(-49 * time.Hour), Resumed: now.Add(-48 * time.Hour)}},
		{"ended", record{State: stateRunning, Suspended: now.Add(-49 * time.Hour), Resumed: now.Add(-48 * time.Hour)}},
		// Past its TTL but being resumed (by another server: no sandbox
		// here): kept; its claim gone stale, deleted.
		{"resuming", record{State: stateResuming, Suspended: now.Add(-2 * time.Hour), Claim: &claim{Owner: "other", Token: "t1", Since: now, Until: now.Add(time.Minute)}}},
		{"stale", record{State: stateResuming, Suspended: now.Add(-2 * time.Hour), Claim: &claim{Owner: "dead", Token: "t2", Since: now.Add(-time.Hour), Until: now.Add(-59 * time.Minute)}}},
	} {
		if _, err := store.Put(ctx, "acme", c.session, strings.NewReader("files of "+c.session)); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(c.r)
		if err := store.SetRecord(ctx, "acme", c.session, data); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := l.sweepSuspended(ctx)
	if err != nil || strings.Join(gone, " ") != "acme/ended acme/old acme/stale" {
		t.Fatalf("sweep: %v, %v; want acme/ended, acme/old and acme/stale deleted", gone, err)
	}
	for _, s := range []string{"old", "ended", "stale"} {
		if _, _, err := store.Record(ctx, "acme", s); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s's record: %v, want it gone", s, err)
		}
		if infos, _ := store.List(ctx, "acme", s); len(infos) != 0 {
			t.Errorf("%s's snapshots: %v, want none", s, infos)
		}
	}
	for _, s := range []string{"young", "live", "resuming"} {
		if infos, _ := store.List(ctx, "acme", s); len(infos) != 1 {
			t.Errorf("%s's snapshots: %v, want it kept", s, infos)
		}
	}
	sus, err := l.suspendedSessions(ctx, "acme")
	if err != nil || len(sus) != 2 {
		t.Fatalf("suspended sessions after the sweep: %v, %v; want young and resuming", sus, err)
	}
	for _, k := range []string{"acme/young", "acme/resuming"} {
		if _, ok := sus[k]; !ok {
			t.Errorf("suspended sessions: %v, want %s", sus, k)
		}
	}
}

// TestHeldCallsAreBusy: a call the server holds for a session (waiting
// for an approval) makes it busy to the reaper before its command reaches
// the sandbox; the release, once, ends that.
func TestHeldCallsAreBusy(t *testing.T) {
	l, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	busy := l.busy(func(context.Context, sandbox.Sandbox) (string, error) { asked++; return "", nil })
	sb := sandbox.Sandbox{Tenant: "acme", Session: "s"}
	ctx := context.Background()
	release := l.HoldCall("acme", "s")
	second := l.HoldCall("acme", "s")
	if why, err := busy(ctx, sb); err != nil || why != "2 call(s) held by the server (waiting for an approval, or on their way)" || asked != 0 {
		t.Fatalf("with 2 calls held: %q, %v, agent asked %d times", why, err, asked)
	}
	if why, _ := busy(ctx, sandbox.Sandbox{Tenant: "other", Session: "s"}); why != "" || asked != 1 {
		t.Fatalf("another tenant's session: %q (asked %d)", why, asked)
	}
	release()
	release() // once
	if n := l.heldCalls("acme", "s"); n != 1 {
		t.Fatalf("after one release (twice): %d held, want 1", n)
	}
	second()
	if why, _ := busy(ctx, sb); why != "" || asked != 2 || len(l.held) != 0 {
		t.Fatalf("after both releases: %q, asked %d, held %v", why, asked, l.held)
	}
}

// TestSuspendRefusals: no store, the local backend and pooled names are
// refused with a class and a reason, before anything is touched.
func TestSuspendRefusals(t *testing.T) {
	ctx := context.Background()
	local, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.SuspendSession(ctx, "acme", "s"); !errors.Is(err, server.ErrInvalid) || !strings.Contains(err.Error(), "local backend") {
		t.Errorf("local backend: %v", err)
	}
	f := sandboxtest.NewFake()
	noStore, err := New(Config{Runtime: f, Owner: "o", Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noStore.ResumeSession(ctx, "acme", "s", ""); !errors.Is(err, server.ErrInvalid) || !strings.Contains(err.Error(), "no snapshot store") {
		t.Errorf("no store: %v", err)
	}
	if _, err := noStore.SuspendSession(ctx, "acme", sandbox.PoolPrefix+"x"); !errors.Is(err, server.ErrInvalid) || !strings.Contains(err.Error(), "warm pools") {
		t.Errorf("a pooled name: %v", err)
	}
}

// TestResumingIsListed: a session whose resume was claimed and whose
// server died (no sandbox, the claim stale) is listed as resuming, not
// lost from the listings.
func TestResumingIsListed(t *testing.T) {
	store, err := snapshot.NewDir(snapshot.DirOptions{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := New(Config{Runtime: sandboxtest.NewFake(), Owner: "o", Ready: func(context.Context, sandbox.Sandbox) error { return nil },
		Snapshots: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data, _ := json.Marshal(record{State: stateResuming, Snapshot: "20260101T000000.000000000Z-000000000000",
		Claim: &claim{Owner: "dead/1", Sandbox: "gone", Until: time.Now().Add(-time.Minute)}})
	if err := store.SetRecord(ctx, "acme", "half", data); err != nil {
		t.Fatal(err)
	}
	list, err := l.Suspended(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "half" || list[0].State != stateResuming {
		t.Fatalf("Suspended: %+v, %v; want acme/half, resuming", list, err)
	}
}
