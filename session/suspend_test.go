package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/sandbox/snapshot"
)

// TestSweepSuspended: suspended sessions past their suspendedTTL are
// deleted with their snapshots; younger ones, running ones and other
// tenants' within theirs stay.
func TestSweepSuspended(t *testing.T) {
	store, err := snapshot.NewDir(snapshot.DirOptions{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := New(Config{Snapshots: store, SuspendedTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UTC()
	for _, c := range []struct {
		session string
		r       record
	}{
		{"old", record{State: stateSuspended, Suspended: now.Add(-2 * time.Hour)}},
		{"young", record{State: stateSuspended, Suspended: now.Add(-10 * time.Minute)}},
		{"running", record{State: stateRunning, Suspended: now.Add(-48 * time.Hour)}},
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
	if err != nil || len(gone) != 1 || gone[0] != "acme/old" {
		t.Fatalf("sweep: %v, %v; want acme/old deleted", gone, err)
	}
	if _, err := store.Record(ctx, "acme", "old"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("old's record: %v, want it gone", err)
	}
	if infos, _ := store.List(ctx, "acme", "old"); len(infos) != 0 {
		t.Errorf("old's snapshots: %v, want none", infos)
	}
	for _, s := range []string{"young", "running"} {
		if infos, _ := store.List(ctx, "acme", s); len(infos) != 1 {
			t.Errorf("%s's snapshots: %v, want it kept", s, infos)
		}
	}
	sus, err := l.suspendedSessions(ctx, "acme")
	if err != nil || len(sus) != 1 {
		t.Fatalf("suspended sessions after the sweep: %v, %v; want young", sus, err)
	}
	if _, ok := sus["acme/young"]; !ok {
		t.Errorf("suspended sessions: %v, want young", sus)
	}
}
