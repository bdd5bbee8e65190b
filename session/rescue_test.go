package session

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/workspace"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
	"github.com/shellbox/shellbox/server"
)

// heard is a SessionNotifier that keeps what it hears.
type heard struct {
	server.Notifier
	mu     sync.Mutex
	events []string
}

func (h *heard) SessionChanged(tenant, session, state, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, state+": "+message)
}

func (h *heard) last(t *testing.T, state string) string {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.events) - 1; i >= 0; i-- {
		if strings.HasPrefix(h.events[i], state+": ") {
			return h.events[i]
		}
	}
	t.Fatalf("no %s event among %q", state, h.events)
	return ""
}

// oddFiles fills root with files of odd modes, a symlink and a hard link.
func oddFiles(t *testing.T, root string) {
	t.Helper()
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{"notes.txt", 0o644}, {"d/secret", 0o600}, {"d/run.sh", 0o751}, {"d/ro", 0o444}} {
		p := filepath.Join(root, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("content of "+f.name+"\n"), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("d/run.sh", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "d/secret"), filepath.Join(root, "hard")); err != nil {
		t.Fatal(err)
	}
}

// sameTree fails unless a and b hold the same entries: paths, types,
// modes, sizes, hashes, link targets and hard-link groups.
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	ma, err := workspace.Manifest(a)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := workspace.Manifest(b)
	if err != nil {
		t.Fatal(err)
	}
	strip := func(m []workspace.Entry) []string {
		var out []string
		for _, e := range m {
			if e.Path == "." {
				continue
			}
			out = append(out, strings.Join([]string{e.Path, e.Type, os.FileMode(e.Mode).String(), e.SHA256, e.Target, e.Link}, " "))
		}
		return out
	}
	if ga, gb := strings.Join(strip(ma), "\n"), strings.Join(strip(mb), "\n"); ga != gb {
		t.Fatalf("workspaces differ:\nbefore:\n%s\nafter:\n%s", ga, gb)
	}
}

// TestSaveDoomed: a sandbox deleted behind shellbox's back is snapshotted
// through its agent, the session recorded suspended from it ("snapshotted
// at pod deletion"); its next sandbox resumes every file, mode and link.
func TestSaveDoomed(t *testing.T) {
	store := newStore(t)
	h := &heard{}
	l, err := New(Config{Snapshots: store, Notifier: h})
	if err != nil {
		t.Fatal(err)
	}
	l.loses = true
	old := newTestAgent(t, 0)
	oddFiles(t, old.root)
	doomed := old.sandbox("pod-1")
	l.saveDoomed(t.Context(), doomed, time.Now().Add(time.Minute))
	r := storedRecord(t, store)
	if r.State != stateSuspended || r.Reason != reasonDeleted || r.Snapshot == "" || r.Sandbox != "pod-1" {
		t.Fatalf("record after the deletion: %+v", r)
	}
	if ev := h.last(t, stateSuspended); !strings.Contains(ev, "snapshotted at pod deletion") || !strings.Contains(ev, "pod-1") {
		t.Errorf("event %q", ev)
	}
	// The session's next sandbox (the same pod name, a new pod).
	next := newTestAgent(t, 0)
	sb := next.sandbox("pod-1")
	sb.Created = doomed.Created.Add(time.Minute)
	if err := l.resumeSandbox(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	sameTree(t, old.root, next.root)
	if ev := h.last(t, "resumed"); !strings.Contains(ev, "snapshotted at pod deletion") {
		t.Errorf("resumed event %q, want it to say the snapshot was taken at pod deletion", ev)
	}
	// A deletion told again (another replica's watch, a new leader's
	// list) of a session suspended already changes nothing.
	before := storedRecord(t, store)
	l.saveDoomed(t.Context(), doomed, time.Now().Add(time.Minute))
	if after := storedRecord(t, store); after.Snapshot != before.Snapshot || after.State != before.State {
		t.Errorf("record rewritten: %+v, was %+v", after, before)
	}
}

// TestSaveDoomedFails: an agent that does not answer within the grace
// leaves the record as it was, and the event says what the session
// resumes from.
func TestSaveDoomedFails(t *testing.T) {
	store := newStore(t)
	h := &heard{}
	l, err := New(Config{Snapshots: store, Notifier: h})
	if err != nil {
		t.Fatal(err)
	}
	gone := newTestAgent(t, 0).sandbox("pod-1")
	gone.Agent.Address = filepath.Join(t.TempDir(), "none.sock")
	l.saveDoomed(t.Context(), gone, time.Now().Add(2*time.Second))
	if ev := h.last(t, eventSnapshotFailed); !strings.Contains(ev, "no snapshot: its next sandbox starts with an empty workspace") {
		t.Errorf("event %q", ev)
	}
}

// TestLostSandboxResumesFromLast: a running session whose record names
// another sandbox (lost with no snapshot at its end) resumes its new one
// from its last snapshot, the event saying so and how old it is; the
// sandbox it runs in is left alone, and so is any sandbox on a runtime
// whose workspaces outlive their sandboxes.
func TestLostSandboxResumesFromLast(t *testing.T) {
	store := newStore(t)
	suspendedSession(t, store, record{})
	r := storedRecord(t, store)
	r.State, r.Sandbox, r.SandboxCreated = stateRunning, "pod-1", time.Unix(1700000000, 0).UTC()
	r.Snapshotted, r.Reason = r.Suspended, "periodic (limits.snapshotEvery)"
	data, _ := json.Marshal(r)
	if err := store.SetRecord(t.Context(), "acme", "s1", data); err != nil {
		t.Fatal(err)
	}
	h := &heard{}
	l, err := New(Config{Snapshots: store, Notifier: h})
	if err != nil {
		t.Fatal(err)
	}
	same := newTestAgent(t, 0)
	if err := l.resumeSandbox(t.Context(), same.sandbox("pod-1")); err != nil || same.imports.Load() != 0 {
		t.Fatalf("the sandbox it runs in: %v, %d restores", err, same.imports.Load())
	}
	other := newTestAgent(t, 0)
	sb := other.sandbox("pod-1")
	sb.Created = sb.Created.Add(time.Hour)
	if err := l.resumeSandbox(t.Context(), sb); err != nil || other.imports.Load() != 0 {
		t.Fatalf("without a DeletionWatcher (workspaces outlive sandboxes): %v, %d restores", err, other.imports.Load())
	}
	l.loses = true
	if err := l.resumeSandbox(t.Context(), sb); err != nil || !other.restored() {
		t.Fatalf("a new sandbox after a lost one: %v, restored %v", err, other.restored())
	}
	ev := h.last(t, "resumed")
	for _, want := range []string{"its sandbox pod-1 was lost with no snapshot at its end", "resumed from its last snapshot", r.Snapshot, "ago, periodic"} {
		if !strings.Contains(ev, want) {
			t.Errorf("resumed event %q, want %q in it", ev, want)
		}
	}
	if got := storedRecord(t, store); got.State != stateRunning || got.Claim == nil || got.Claim.Sandbox != "pod-1" || !got.Claim.SandboxCreated.Equal(sb.Created) {
		t.Errorf("record after: %+v", got)
	}
}

// TestSnapshotEvery: with limits.snapshotEvery, the leader snapshots a
// running session used since its last snapshot once that is a period
// old (a fake clock), recording it running from it; one not used since
// is not snapshotted again; one with a foreground call in flight waits,
// up to one more period.
func TestSnapshotEvery(t *testing.T) {
	store := newStore(t)
	e, _ := acmePolicy(t, "version: 1\ndefault: allow\nlimits:\n  snapshotEvery: 10m\n")
	f := sandboxtest.NewFake()
	h := &heard{}
	l, err := New(Config{Runtime: f, Owner: "o", Ready: func(context.Context, sandbox.Sandbox) error { return nil },
		Snapshots: store, Policies: e, Notifier: h})
	if err != nil {
		t.Fatal(err)
	}
	a := newTestAgent(t, 0)
	oddFiles(t, a.root)
	t0 := time.Now().UTC()
	sb := a.sandbox("")
	sb.Owner, sb.State, sb.Created, sb.LastUsed = "o", sandbox.StateRunning, t0, t0.Add(time.Minute)
	sb = f.Put(sb)
	ctx := t.Context()
	if done, err := l.snapshotDue(ctx, t0.Add(5*time.Minute)); err != nil || len(done) != 0 {
		t.Fatalf("before a period: %v, %v", done, err)
	}
	done, err := l.snapshotDue(ctx, t0.Add(11*time.Minute))
	if err != nil || strings.Join(done, ",") != "acme/s1" {
		t.Fatalf("a period after it was made, used since: %v, %v", done, err)
	}
	r := storedRecord(t, store)
	if r.State != stateRunning || r.Sandbox != sb.ID || r.Snapshot == "" || r.Snapshotted.IsZero() {
		t.Fatalf("record: %+v", r)
	}
	if ev := h.last(t, eventSnapshotted); !strings.Contains(ev, r.Snapshot) {
		t.Errorf("event %q", ev)
	}
	// Not used since: nothing, however late.
	if done, err := l.snapshotDue(ctx, t0.Add(time.Hour)); err != nil || len(done) != 0 {
		t.Fatalf("unused since: %v, %v", done, err)
	}
	// Another session, used since its sandbox was made, with a
	// foreground call in flight: it waits, then goes ahead a period
	// after it began waiting.
	var calls atomic.Int32
	calls.Store(1)
	b := newActivityAgent(t, &calls)
	sb2 := sandbox.Sandbox{Tenant: "acme", Session: "s2", Owner: "o", State: sandbox.StateRunning, Created: t0, LastUsed: t0.Add(time.Minute), Agent: b}
	f.Put(sb2)
	later := t0.Add(11 * time.Minute)
	if done, err := l.snapshotDue(ctx, later); err != nil || len(done) != 0 {
		t.Fatalf("with a call in flight: %v, %v", done, err)
	}
	if done, err := l.snapshotDue(ctx, later.Add(11*time.Minute)); err != nil || strings.Join(done, ",") != "acme/s2" {
		t.Fatalf("a period after it began waiting, the call still in flight: %v, %v", done, err)
	}
}

// newActivityAgent is a real agent over an empty workspace whose answer to
// GET /v1/activity says calls foreground calls are in flight.
func newActivityAgent(t *testing.T, calls *atomic.Int32) agentapi.Endpoint {
	t.Helper()
	root := t.TempDir()
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
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/activity" {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(agentapi.Activity{Calls: int(calls.Load())})
			return
		}
		srv.ServeHTTP(w, r)
	})
	dir, err := os.MkdirTemp("", "sbx-rescue-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := apiserver.Listen(filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return agentapi.Endpoint{Network: "unix", Address: filepath.Join(dir, "agent.sock")}
}

// goneRuntime is the in-memory runtime with a GoneWatcher the test feeds,
// as the API server feeds a replica's informer of the session pods.
type goneRuntime struct {
	*sandboxtest.Fake
	// watching gets the callback of each watch started.
	watching chan func(sandbox.Sandbox)
}

func (g *goneRuntime) WatchGone(ctx context.Context, owner string, gone func(sb sandbox.Sandbox)) error {
	g.watching <- gone
	<-ctx.Done()
	return nil
}

// TestGoneDropsHeld: a replica that is not the leader, told that the
// sandbox it holds for a session is gone (its pod deleted by someone
// else), drops its connection and its Manager's entry at once, so the
// session's next call gets a new sandbox instead of dialling the old one's
// address; told of a sandbox of the session it does not hold (an older pod
// of the same name, news that arrive after a resume made a new one), it
// keeps what it holds.
func TestGoneDropsHeld(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f := &goneRuntime{Fake: sandboxtest.NewFake(), watching: make(chan func(sandbox.Sandbox), 1)}
	never := &fakeLeader{terms: make(chan term), ended: make(chan struct{})}
	l, err := New(Config{Runtime: f, Owner: "o", Leader: never, Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var forgot []string
	l.tenants["acme"] = &tenant{forget: func(session string) {
		mu.Lock()
		forgot = append(forgot, session)
		mu.Unlock()
	}}
	forgotten := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(forgot)
	}
	spec, err := sandbox.NewSpec("acme", "s1", sandbox.WithImage("img"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := l.manager.Ensure(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	holds := func(sb sandbox.Sandbox) bool {
		for _, s := range l.manager.Sandboxes() {
			if s.Tenant == sb.Tenant && s.Session == sb.Session && s.ID == sb.ID && s.Created.Equal(sb.Created) {
				return true
			}
		}
		return false
	}
	l.Start(ctx)
	defer func() {
		cancel()
		l.leading.Wait()
	}()
	var tell func(sandbox.Sandbox)
	select {
	case tell = <-f.watching:
	case <-time.After(5 * time.Second):
		t.Fatal("a replica that does not lead watches no sandboxes that go")
	}

	// News of sandboxes it does not hold change nothing.
	older := held
	older.Created = held.Created.Add(-time.Minute)
	tell(older)
	tell(sandbox.Sandbox{Tenant: "acme", Session: "s2", ID: "c9", Created: held.Created})
	if !holds(held) || len(forgotten()) != 0 {
		t.Fatalf("told of sandboxes it does not hold: holds its own %v, connections dropped %q; want it kept, none", holds(held), forgotten())
	}

	// Its own sandbox, deleted behind its back.
	f.Vanish("acme", "s1")
	tell(held)
	if got := forgotten(); !slices.Equal(got, []string{"s1"}) {
		t.Errorf("connections dropped %q, want s1's", got)
	}
	eventually(t, "the Manager lets go of the sandbox told gone", func() bool { return !holds(held) })
	next, err := l.manager.Ensure(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if next.ID == held.ID {
		t.Fatalf("the next call got %s again", next.ID)
	}
	// The old one's news again, late: the new sandbox stays.
	tell(held)
	if !holds(next) || len(forgotten()) != 1 {
		t.Errorf("late news of the old sandbox: holds the new one %v, connections dropped %q", holds(next), forgotten())
	}
}
