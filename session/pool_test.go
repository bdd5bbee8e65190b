package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
	"github.com/shellbox/shellbox/server"
)

func poolPolicy(data, memory string) string {
	return fmt.Sprintf("sandbox:\n  memory: %s\n  pool: {size: 2}\n  mounts:\n    - {source: %s, target: /data}\nlimits:\n  sessions: 2\n", memory, data)
}

// waitPool waits until the Service keeps one pool, with 2 ready, other than
// not, and returns its hash.
func waitPool(t *testing.T, l *Service, not string) string {
	t.Helper()
	for {
		if ps := l.manager.Pools(); len(ps) == 1 && ps[0].Ready == 2 && ps[0].Creating == 0 && ps[0].Hash != not {
			return ps[0].Hash
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// acmePolicy returns a policy engine over one policy file, tenant acme's,
// without watching or approvers (closed when t ends), and the file's
// directory, for a test that edits it.
func acmePolicy(t *testing.T, body string) (*policies.Engine, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := policies.Open(dir, policies.Options{NoWatch: true, NoApprover: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, dir
}

func TestWarmPoolFromPolicy(t *testing.T) {
	data := t.TempDir()
	e, dir := acmePolicy(t, poolPolicy(data, "1GiB"))
	claims, err := sandbox.NewDirClaims(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := sandboxtest.NewFake()
	l, err := New(Config{Runtime: f, Owner: "srv", Defaults: DefaultsFor("img:default"), Policies: e, Claims: claims, PoolInterval: 10 * time.Millisecond,
		Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.Start(ctx)
	first := waitPool(t, l, "")

	// A session with no options claims a pooled sandbox: nothing is
	// created for it.
	if _, err := l.CreateSession(ctx, "acme", "s1", server.SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := f.Creates.Load(); n < 2 || n > 3 {
		t.Fatalf("%d creates after the claim, want the pool's 2 (and perhaps its refill)", n)
	}
	waitPool(t, l, "")
	list, err := l.Sessions(ctx, "acme")
	if err != nil || len(list) != 1 || list[0].ID != "s1" || len(list[0].Mounts) != 1 {
		t.Fatalf("sessions: %+v, %v; want s1 only, with the policy's mount", list, err)
	}
	// A session asking for other mounts than the template's (none) gets a
	// sandbox of its own (a cold start).
	if _, err := l.CreateSession(ctx, "acme", "s2", server.SessionOptions{Mounts: []server.Mount{}}); err != nil {
		t.Fatal(err)
	}
	sbs, err := l.manager.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if (sb.Session == "s1") != (sb.PoolName != "") {
			t.Errorf("%s: pool name %q; want s1 claimed and s2 created", sb.Session, sb.PoolName)
		}
	}
	// Pooled sandboxes are nobody's session: the quota counts s1 and s2.
	if _, err := l.CreateSession(ctx, "acme", "s3", server.SessionOptions{}); !errors.Is(err, server.ErrNotAllowed) {
		t.Fatalf("a third session past limits.sessions 2: %v", err)
	}
	if _, err := l.CreateSession(ctx, "acme", sandbox.PoolPrefix+"x", server.SessionOptions{}); !errors.Is(err, server.ErrInvalid) ||
		!strings.Contains(err.Error(), "reserved for warm pools") {
		t.Fatalf("a session named like a pooled sandbox: %v", err)
	}
	if err := l.DeleteSession(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if list, _ := l.Sessions(ctx, "acme"); len(list) != 1 || list[0].ID != "s2" {
		t.Fatalf("after deleting s1: %+v", list)
	}

	// A template change rolls the pool.
	if err := os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(poolPolicy(data, "2GiB")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	second := waitPool(t, l, first)
	names, _ := f.List(ctx, "srv")
	for _, sb := range names {
		if strings.Contains(sb.Session, first) {
			t.Errorf("a sandbox of the old template survived the roll: %s", sb.Session)
		}
	}
	if _, err := l.CreateSession(ctx, "acme", "s4", server.SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := l.manager.Inspect(ctx, "acme", "s4")
	if err != nil || !strings.Contains(got.PoolName, second) || got.Mounts[0].Source != data {
		t.Fatalf("s4: %+v, %v; want a sandbox of the new template", got, err)
	}
}
