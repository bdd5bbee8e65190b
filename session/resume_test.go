package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/server"
)

// testAgent is a real agent (the protocol server over a local executor)
// on a unix socket, whose workspace imports are counted and slowed.
type testAgent struct {
	ep      agentapi.Endpoint
	root    string
	imports atomic.Int32
	// asWorkspace has the agent take its root for /workspace in the
	// calls it runs (a pool's warm-up runs `true` there).
	asWorkspace atomic.Bool
}

func newTestAgent(t *testing.T, importDelay time.Duration) *testAgent {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e, err := local.New(local.Config{Root: root, SpillDir: t.TempDir(), Cgroup: local.CgroupOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	tree := &files.Tree{Root: root, UID: -1, GID: -1}
	srv, err := apiserver.NewServer(apiserver.ServerConfig{Runner: e, Agent: "test", Root: root, Home: root, Files: tree, Workspace: tree})
	if err != nil {
		t.Fatal(err)
	}
	a := &testAgent{root: root}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/workspace" {
			a.imports.Add(1)
			time.Sleep(importDelay)
		}
		if a.asWorkspace.Load() && r.Method == http.MethodPost && r.Body != nil {
			b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			b = bytes.ReplaceAll(b, []byte(`"/workspace`), []byte(`"`+root))
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
		srv.ServeHTTP(w, r)
	})
	dir, err := os.MkdirTemp("", "sbx-resume-") // a socket's path is short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	ln, err := apiserver.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	a.ep = agentapi.Endpoint{Network: "unix", Address: sock}
	return a
}

func (a *testAgent) sandbox(id string) sandbox.Sandbox {
	return sandbox.Sandbox{Tenant: "acme", Session: "s1", ID: id, Created: time.Unix(1700000000, 0).UTC(), Agent: a.ep}
}

// restored says whether the agent's workspace holds the snapshot's file.
func (a *testAgent) restored() bool {
	b, err := os.ReadFile(filepath.Join(a.root, "notes.txt"))
	return err == nil && string(b) == "from before the suspend\n"
}

// suspendedSession stores a snapshot of a workspace holding notes.txt and
// records acme/s1 suspended from it (with rec's claim, if any).
func suspendedSession(t *testing.T, store snapshot.Store, rec record) {
	t.Helper()
	src := newTestAgent(t, 0)
	if err := os.WriteFile(filepath.Join(src.root, "notes.txt"), []byte("from before the suspend\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := agentapi.DialEndpoint(ctx, src.ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exp, err := c.ExportWorkspace(ctx, agentapi.WorkspaceLimits{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := store.Put(ctx, "acme", "s1", exp)
	exp.Close()
	if err != nil {
		t.Fatal(err)
	}
	if rec.State == "" {
		rec.State = stateSuspended
	}
	rec.Snapshot, rec.Suspended = info.ID, info.Created
	data, _ := json.Marshal(rec)
	if err := store.SetRecord(ctx, "acme", "s1", data); err != nil {
		t.Fatal(err)
	}
}

// replica is a server process sharing store.
func replica(t *testing.T, store snapshot.Store, name string, claimTTL time.Duration) *Service {
	t.Helper()
	l, err := New(Config{Snapshots: store})
	if err != nil {
		t.Fatal(err)
	}
	l.process, l.claimTTL = name, claimTTL
	return l
}

func newStore(t *testing.T) snapshot.Store {
	t.Helper()
	store, err := snapshot.NewDir(snapshot.DirOptions{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func storedRecord(t *testing.T, store snapshot.Store) record {
	t.Helper()
	data, _, err := store.Record(context.Background(), "acme", "s1")
	if err != nil {
		t.Fatal(err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestResumeRaceOneRestores: two servers sharing the store are handed a
// sandbox each for one suspended session at once (servers on runtimes of
// their own): one claims and restores; the other waits for it, then fails
// naming where the session runs, its sandbox untouched. The restore takes
// three claim TTLs: the winner's renewals keep the loser from taking its
// claim for stale.
func TestResumeRaceOneRestores(t *testing.T) {
	store := newStore(t)
	suspendedSession(t, store, record{})
	const ttl = 300 * time.Millisecond
	agents := []*testAgent{newTestAgent(t, 3*ttl), newTestAgent(t, 3*ttl)}
	replicas := []*Service{replica(t, store, "replica-a/1", ttl), replica(t, store, "replica-b/1", ttl)}
	ids := []string{"sandbox-a", "sandbox-b"}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { errs[i] = replicas[i].resumeSandbox(t.Context(), agents[i].sandbox(ids[i])) })
	}
	wg.Wait()
	if n := agents[0].imports.Load() + agents[1].imports.Load(); n != 1 {
		t.Fatalf("%d restores (a: %d, b: %d), want exactly one; errors %v", n, agents[0].imports.Load(), agents[1].imports.Load(), errs)
	}
	win, lose := 0, 1
	if errs[0] != nil {
		win, lose = 1, 0
	}
	if errs[win] != nil {
		t.Fatalf("the winner's resume: %v", errs[win])
	}
	if !errors.Is(errs[lose], errdefs.ErrUnavailable) || !strings.Contains(errs[lose].Error(), "was resumed meanwhile by replica-") ||
		!strings.Contains(errs[lose].Error(), ids[win]) {
		t.Fatalf("the loser's resume: %v; want ErrUnavailable naming the winner and its sandbox %s", errs[lose], ids[win])
	}
	if !agents[win].restored() || agents[lose].restored() {
		t.Fatalf("restored: winner %v, loser %v; want the winner's workspace alone", agents[win].restored(), agents[lose].restored())
	}
	r := storedRecord(t, store)
	if r.State != stateRunning || r.Claim == nil || r.Claim.Sandbox != ids[win] || r.Claim.Owner != replicas[win].process {
		t.Fatalf("record after the race: %+v (claim %+v); want running in %s by %s", r, r.Claim, ids[win], replicas[win].process)
	}
}

// TestResumeRaceSameSandbox: two replicas handed the same sandbox (the
// pod one created and the other took over): it is restored once, and
// both calls run in it.
func TestResumeRaceSameSandbox(t *testing.T) {
	store := newStore(t)
	suspendedSession(t, store, record{})
	a := newTestAgent(t, 200*time.Millisecond)
	sb := a.sandbox("the-pod")
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, name := range []string{"replica-a/1", "replica-b/1"} {
		l := replica(t, store, name, DefaultClaimTTL)
		wg.Go(func() { errs[i] = l.resumeSandbox(t.Context(), sb) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("resumes into one sandbox: %v, %v; want both to succeed", errs[0], errs[1])
	}
	if n := a.imports.Load(); n != 1 || !a.restored() {
		t.Fatalf("%d restores into the shared sandbox (restored %v), want one", n, a.restored())
	}
}

// TestResumeStaleClaim: a claim whose process died mid-resume holds until
// its Until, then the next resume takes it over and restores.
func TestResumeStaleClaim(t *testing.T) {
	store := newStore(t)
	until := time.Now().Add(500 * time.Millisecond).UTC()
	suspendedSession(t, store, record{State: stateResuming, Claim: &claim{Owner: "dead-host/7", Token: "t", Sandbox: "gone",
		Since: time.Now().Add(-time.Minute).UTC(), Until: until}})
	a := newTestAgent(t, 0)
	l := replica(t, store, "replica-a/1", DefaultClaimTTL)
	if err := l.resumeSandbox(t.Context(), a.sandbox("sandbox-a")); err != nil {
		t.Fatalf("resume after a stale claim: %v", err)
	}
	if time.Now().Before(until) {
		t.Fatalf("the claim of a dead process was taken over before its end (%v)", until)
	}
	if a.imports.Load() != 1 || !a.restored() {
		t.Fatalf("%d restores after the stale claim, want one", a.imports.Load())
	}
	if r := storedRecord(t, store); r.State != stateRunning || r.Claim.Owner != "replica-a/1" {
		t.Fatalf("record: %+v, claim %+v", r, r.Claim)
	}
	// A caller whose time ends first hears who holds the claim.
	suspendedSession(t, store, record{State: stateResuming, Claim: &claim{Owner: "busy-host/9", Token: "u", Sandbox: "elsewhere",
		Since: time.Now().UTC(), Until: time.Now().Add(time.Hour).UTC()}})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := l.resumeSandbox(ctx, a.sandbox("sandbox-a2"))
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "being resumed by busy-host/9") {
		t.Fatalf("resume while another holds the claim, until the caller's end: %v", err)
	}
}

// TestResumeFailureReleasesClaim: a restore that fails puts the session
// back to suspended at once, for the next resume to claim.
func TestResumeFailureReleasesClaim(t *testing.T) {
	store := newStore(t)
	suspendedSession(t, store, record{})
	r := storedRecord(t, store)
	r.Snapshot = "20260101T000000.000000000Z-000000000000" // not there
	data, _ := json.Marshal(r)
	if err := store.SetRecord(context.Background(), "acme", "s1", data); err != nil {
		t.Fatal(err)
	}
	a := newTestAgent(t, 0)
	l := replica(t, store, "replica-a/1", DefaultClaimTTL)
	if err := l.resumeSandbox(t.Context(), a.sandbox("sandbox-a")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("resume from a missing snapshot: %v, want ErrNotFound", err)
	}
	if r := storedRecord(t, store); r.State != stateSuspended || r.Snapshot != "20260101T000000.000000000Z-000000000000" {
		t.Fatalf("after a failed restore the record is %+v; want suspended, from the same snapshot", r)
	}
}

// countingStore counts the record reads of the store it wraps.
type countingStore struct {
	snapshot.Store
	reads atomic.Int32
}

func (c *countingStore) Record(ctx context.Context, tenant, session string) ([]byte, string, error) {
	c.reads.Add(1)
	return c.Store.Record(ctx, tenant, session)
}

// TestResumeReadsTheRecordOnce: a suspended session's new sandbox reads
// its record once: the read for its settings is the one its resume claims
// from. A copy gone stale meanwhile loses the claim and is read again.
func TestResumeReadsTheRecordOnce(t *testing.T) {
	store := &countingStore{Store: newStore(t)}
	suspendedSession(t, store, record{Settings: &server.SessionOptions{Image: "python:3"}})
	l, err := New(Config{Runtime: sandboxtest.NewFake(), Owner: "o", Snapshots: store})
	if err != nil {
		t.Fatal(err)
	}
	a := newTestAgent(t, 0)
	if o, err := l.settings(t.Context(), "acme", "s1"); err != nil || o.Image != "python:3" {
		t.Fatalf("settings of a suspended session: %+v, %v", o, err)
	}
	if err := l.resumeSandbox(t.Context(), a.sandbox("sandbox-a")); err != nil || !a.restored() {
		t.Fatalf("resume: %v (restored %v)", err, a.restored())
	}
	if n := store.reads.Load(); n != 1 {
		t.Fatalf("%d record reads for settings and resume, want 1", n)
	}

	// Stale: another server resumed and suspended it again in between.
	suspendedSession(t, store, record{})
	if _, err := l.settings(t.Context(), "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	suspendedSession(t, store, record{Reason: "suspended again elsewhere"})
	store.reads.Store(0)
	b := newTestAgent(t, 0)
	if err := l.resumeSandbox(t.Context(), b.sandbox("sandbox-b")); err != nil || !b.restored() {
		t.Fatalf("resume from a stale copy: %v (restored %v)", err, b.restored())
	}
	if n := store.reads.Load(); n != 1 || b.imports.Load() != 1 {
		t.Fatalf("resume from a stale copy: %d reads, %d restores; want the claim lost, one read, one restore", n, b.imports.Load())
	}
	if r := storedRecord(t, store); r.State != stateRunning || r.Reason != "suspended again elsewhere" {
		t.Fatalf("record: %+v", r)
	}
}
