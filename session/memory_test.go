package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/server"
)

// checkpointing is a Fake runtime that checkpoints: its sandboxes'
// agent is a test agent, and an image is restored when it reads, whole,
// as goodImage. It counts the sandboxes each way makes.
type checkpointing struct {
	*sandboxtest.Fake
	agent             *testAgent
	creates, restores atomic.Int32
	restoreAttempts   atomic.Int32
	// newAgent, if set, gives each sandbox made an agent of its own (a
	// warm pool's sandboxes each keep a connection to theirs); agents
	// are those, and imports counts their files snapshots loaded.
	newAgent func() *testAgent
	mu       sync.Mutex
	agents   []*testAgent
}

// endpoint is the agent of a sandbox made now.
func (c *checkpointing) endpoint() agentapi.Endpoint {
	if c.newAgent == nil {
		return c.agent.ep
	}
	a := c.newAgent()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.agents = append(c.agents, a)
	return a.ep
}

// imports counts the files snapshots loaded into the sandboxes made.
func (c *checkpointing) imports() int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.agent.imports.Load()
	for _, a := range c.agents {
		n += a.imports.Load()
	}
	return n
}

const goodImage = "a memory image"

func (c *checkpointing) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := c.Fake.Create(ctx, spec)
	if err == nil {
		c.creates.Add(1)
		sb.Agent = c.endpoint()
	}
	return sb, err
}

func (c *checkpointing) Checkpoint(ctx context.Context, sb sandbox.Sandbox, commit func(ctx context.Context, image io.Reader) error) error {
	return commit(ctx, strings.NewReader(goodImage))
}

func (c *checkpointing) Restore(ctx context.Context, spec sandbox.Spec, image io.Reader) (sandbox.Sandbox, error) {
	c.restoreAttempts.Add(1)
	b, err := io.ReadAll(io.LimitReader(image, 1<<20))
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("the image: %w", err)
	}
	if string(b) != goodImage {
		return sandbox.Sandbox{}, fmt.Errorf("%w: not an image", sandbox.ErrInvalid)
	}
	sb, err := c.Fake.Create(ctx, spec)
	if err == nil {
		c.restores.Add(1)
		sb.Agent = c.endpoint()
	}
	return sb, err
}

// memorySession records acme/s1 suspended with a files snapshot and a
// memory image, and returns the image's file in the store.
func memorySession(t *testing.T) (snapshot.Store, string) {
	t.Helper()
	dir := t.TempDir()
	store, err := snapshot.NewDir(snapshot.DirOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	info, err := store.Put(t.Context(), "acme", "s1", bytes.NewReader([]byte(goodImage)))
	if err != nil {
		t.Fatal(err)
	}
	suspendedSession(t, store, record{Memory: info.ID})
	files, _ := filepath.Glob(filepath.Join(dir, "acme", "s1", info.ID+".*.snap"))
	if len(files) != 1 {
		t.Fatalf("the image's file in the store: %v", files)
	}
	return store, files[0]
}

// TestMemoryResumeMakesOneSandbox: a memory resume makes the session's
// one sandbox from its image (no sandbox created, no files snapshot
// loaded); where the image cannot be restored (corrupt in the store), one
// fresh sandbox is made, the files snapshot loaded into it, and the event
// says why.
func TestMemoryResumeMakesOneSandbox(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt bool
	}{{"restored", false}, {"corrupt-image", true}} {
		t.Run(tc.name, func(t *testing.T) {
			store, image := memorySession(t)
			if tc.corrupt {
				if err := os.WriteFile(image, []byte("a memory imagf"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rt := &checkpointing{Fake: sandboxtest.NewFake(), agent: newTestAgent(t, 0)}
			h := &heard{}
			l, err := New(Config{Runtime: rt, Owner: "o", Snapshots: store, Notifier: h})
			if err != nil {
				t.Fatal(err)
			}
			spec := sandbox.DefaultSpec("acme", "s1")
			spec.Image, spec.Runtime = "img:a", sandbox.RuntimeRunsc
			sb, err := l.manager.Ensure(t.Context(), spec)
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			made, restored, imports := rt.creates.Load(), rt.restores.Load(), rt.agent.imports.Load()
			ev := h.last(t, "resumed")
			t.Logf("created %d, restored %d, files snapshots loaded %d; %s", made, restored, imports, ev)
			if made+restored != 1 {
				t.Errorf("%d sandboxes made (%d created, %d restored), want 1", made+restored, made, restored)
			}
			r := storedRecord(t, store)
			if r.State != stateRunning || r.Claim == nil || r.Claim.Sandbox != sb.ID || !r.Claim.SandboxCreated.Equal(sb.Created) {
				t.Errorf("record: %+v (claim %+v), want running in %s", r, r.Claim, sb.ID)
			}
			if rt.restoreAttempts.Load() != 1 {
				t.Errorf("%d restores tried, want 1", rt.restoreAttempts.Load())
			}
			if !tc.corrupt {
				if restored != 1 || imports != 0 || !strings.Contains(ev, "restored from memory image "+r.Memory) {
					t.Errorf("restored %d, files snapshots loaded %d, event %q: want the image restored, no files snapshot", restored, imports, ev)
				}
				return
			}
			if made != 1 || imports != 1 || !rt.agent.restored() {
				t.Errorf("created %d, files snapshots loaded %d (workspace restored %v): want a fresh sandbox with the files snapshot", made, imports, rt.agent.restored())
			}
			if !strings.Contains(ev, "could not be read") || !strings.Contains(ev, "corrupt") || !strings.Contains(ev, "resumed from its files snapshot "+r.Snapshot) {
				t.Errorf("the resumed event: %q, want the image refused as corrupt and the files snapshot named", ev)
			}
		})
	}
}

// TestPruneKeepsAnOlderFilesSnapshot: after a memory suspend, pruning
// keeps the image, its files snapshot and the files snapshot before
// (offered when the newest is corrupt), and drops the image the record
// named before, which restores nothing now; a files suspend keeps the two
// newest, as ever.
func TestPruneKeepsAnOlderFilesSnapshot(t *testing.T) {
	infos := func(ids ...string) []snapshot.Info {
		var out []snapshot.Info
		for _, id := range ids {
			out = append(out, snapshot.Info{ID: id})
		}
		return out
	}
	for _, tc := range []struct {
		name                    string
		list                    []string
		newest, image, oldImage string
		want                    string
	}{
		{"first memory suspend", []string{"M1", "F1", "F0"}, "F1", "M1", "", ""},
		{"memory again", []string{"M2", "F2", "M1", "F1", "F0"}, "F2", "M2", "M1", "M1 F0"},
		{"files after memory", []string{"F2", "M1", "F1", "F0"}, "F2", "", "M1", "M1 F0"},
		{"files only", []string{"F2", "F1", "F0"}, "F2", "", "", "F0"},
	} {
		if got := strings.Join(pruned(infos(tc.list...), tc.newest, tc.image, tc.oldImage), " "); got != tc.want {
			t.Errorf("%s: %v pruned to drop %q, want %q", tc.name, tc.list, got, tc.want)
		}
	}
}

// TestMemoryResumeBypassesThePool: with a warm pool of the session's
// template, a session suspended with a memory image is not handed a
// pooled sandbox (one already running a fresh process tree, which the
// image cannot go into): its one sandbox is restored from the image, and
// the pool keeps its sandboxes.
func TestMemoryResumeBypassesThePool(t *testing.T) {
	store, _ := memorySession(t)
	e, _ := acmePolicy(t, "sandbox:\n  runtime: runsc\n  suspend: memory\n  pool: {size: 2}\n")
	claims, err := sandbox.NewDirClaims(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rt := &checkpointing{Fake: sandboxtest.NewFake(), agent: newTestAgent(t, 0), newAgent: func() *testAgent {
		a := newTestAgent(t, 0)
		a.asWorkspace.Store(true)
		return a
	}}
	h := &heard{}
	l, err := New(Config{Runtime: rt, Owner: "o", Snapshots: store, Notifier: h, Defaults: DefaultsFor("img:default"),
		Policies: e, Claims: claims, PoolInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	l.Start(ctx)
	waitPool(t, l, "")
	pooled := rt.creates.Load()
	spec, err := l.spec(ctx, "acme", "s1")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := l.manager.Ensure(ctx, spec)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	ev := h.last(t, "resumed")
	t.Logf("pool name %q, restored %d, files snapshots loaded %d; %s", sb.PoolName, rt.restores.Load(), rt.imports(), ev)
	if sb.PoolName != "" || rt.restores.Load() != 1 || rt.imports() != 0 || !strings.Contains(ev, "restored from memory image") {
		t.Errorf("the session's sandbox: pool name %q, %d restored, %d files snapshots loaded, event %q: want it restored from its image, no pooled sandbox",
			sb.PoolName, rt.restores.Load(), rt.imports(), ev)
	}
	if ps := l.manager.Pools(); len(ps) != 1 || ps[0].Ready != 2 || rt.creates.Load() != pooled {
		t.Errorf("pools %+v, %d created since they filled: want both pooled sandboxes kept, none made", ps, rt.creates.Load()-pooled)
	}
}

// TestMemoryResumeAdoptedMidRestore: a server that stopped during a
// memory resume left the session's one sandbox behind; its next start
// adopts it and ends the resume in that sandbox, with no second one:
//   - restored: the sandbox its claim on the image named (made from the
//     image, not yet probed) is kept once its agent answers and recorded
//     running, at once (the dead claim is not waited out); nothing is
//     restored again, no files snapshot loaded;
//   - unnamed: the same, stopped before the claim named the sandbox: an
//     adopted sandbox made since the claim is the image's;
//   - fresh: a sandbox made for a files resume (a files claim names it,
//     waited out: it may be a live replica's) gets the files snapshot,
//     and the event says why the image was not used;
//   - silent: an image's sandbox whose agent does not answer is removed,
//     the session left suspended, and its next call restores it from the
//     image;
//   - gone: the server stopped before the restore had a running sandbox
//     (none is adopted): the next call takes the dead claim over at once
//     and restores the image into one sandbox.
func TestMemoryResumeAdoptedMidRestore(t *testing.T) {
	for _, tc := range []string{"restored", "unnamed", "fresh", "silent", "gone"} {
		t.Run(tc, func(t *testing.T) {
			store, _ := memorySession(t)
			r := storedRecord(t, store)
			rt := &checkpointing{Fake: sandboxtest.NewFake(), agent: newTestAgent(t, 0)}
			since := time.Now().Add(-2 * time.Second).UTC()
			ep := rt.agent.ep
			if tc == "silent" {
				ep.Address += ".gone"
			}
			old := rt.Put(sandbox.Sandbox{Tenant: "acme", Session: "s1", Owner: "o", Runtime: sandbox.RuntimeRunsc, Image: "img:a",
				State: sandbox.StateRunning, Created: since.Add(time.Second), Agent: ep})
			c := &claim{Owner: "this-host/1", Token: "t", Sandbox: old.ID, SandboxCreated: old.Created, SandboxOwner: "o", Image: r.Memory,
				Since: since, Until: time.Now().Add(time.Hour).UTC()}
			switch tc {
			case "unnamed":
				c.Sandbox, c.SandboxCreated = "", time.Time{}
			case "fresh":
				c.Image, c.Until = "", time.Now().Add(time.Second).UTC()
			}
			r.State, r.Claim = stateResuming, c
			if tc == "gone" {
				rt.Vanish("acme", "s1") // not running at the stop: removed at the start
			}
			data, _ := json.Marshal(r)
			if err := store.SetRecord(t.Context(), "acme", "s1", data); err != nil {
				t.Fatal(err)
			}
			h := &heard{}
			l, err := New(Config{Runtime: rt, Owner: "o", Snapshots: store, Notifier: h})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close(context.Background()) })
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			l.Start(ctx)
			if ctx.Err() != nil {
				t.Fatalf("the start waited out the dead process's claim")
			}
			got := storedRecord(t, store)
			restored, imports := rt.restores.Load(), rt.agent.imports.Load()
			switch tc {
			case "restored", "unnamed", "fresh":
				ev := h.last(t, "resumed")
				t.Logf("restored %d, created %d, files snapshots loaded %d; %s", restored, rt.creates.Load(), imports, ev)
				if got.State != stateRunning || got.Claim == nil || got.Claim.Sandbox != old.ID || !got.Claim.SandboxCreated.Equal(old.Created) {
					t.Errorf("record %+v (claim %+v), want running in the adopted %s", got, got.Claim, old.ID)
				}
				if restored != 0 || rt.creates.Load() != 0 || rt.Removes.Load() != 0 {
					t.Errorf("%d restored, %d created, %d removed: want the adopted sandbox the session's one", restored, rt.creates.Load(), rt.Removes.Load())
				}
				if tc != "fresh" && (imports != 0 || !strings.Contains(ev, "restored from memory image "+r.Memory) || !strings.Contains(ev, "adopted")) {
					t.Errorf("%d files snapshots loaded, event %q: want the adopted sandbox taken as the image's", imports, ev)
				}
				if tc == "fresh" && (imports != 1 || !strings.Contains(ev, "memory image "+r.Memory+" not restored") || !strings.Contains(ev, "adopted")) {
					t.Errorf("%d files snapshots loaded, event %q: want the files snapshot, and why not the image", imports, ev)
				}
			case "silent", "gone":
				if tc == "silent" {
					if got.State != stateSuspended || rt.Removes.Load() != 1 {
						t.Fatalf("record %+v, %d removed: want the silent sandbox removed, the session suspended", got, rt.Removes.Load())
					}
					t.Logf("%s", h.last(t, "resume-failed"))
				}
				spec := sandbox.DefaultSpec("acme", "s1")
				spec.Image, spec.Runtime = "img:a", sandbox.RuntimeRunsc
				if _, err := l.manager.Ensure(ctx, spec); err != nil {
					t.Fatalf("the next call: %v", err)
				}
				if rt.restores.Load() != 1 || rt.creates.Load() != 0 || !strings.Contains(h.last(t, "resumed"), "restored from memory image") {
					t.Errorf("%d restored, %d created: want the next call's sandbox restored from the image", rt.restores.Load(), rt.creates.Load())
				}
				if got := storedRecord(t, store); got.State != stateRunning {
					t.Errorf("record %+v after the next call, want running", got)
				}
			}
		})
	}
}

// agentFake is a runtime that cannot checkpoint (the Fake standing for
// Docker, the Recording fake for Kubernetes pods: neither Runtime is a
// sandbox.Checkpointer), whose sandboxes' agent is a test agent.
type agentFake struct {
	sandbox.Runtime
	ep agentapi.Endpoint
}

func (f agentFake) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := f.Runtime.Create(ctx, spec)
	sb.Agent = f.ep
	return sb, err
}

// TestMemorySuspendFallsBack: Docker and Kubernetes pods take no memory
// image (only containerd with gVisor does): a session on runsc whose
// policy says sandbox.suspend: memory is suspended to a files snapshot,
// the suspended event saying why, and resumes from it.
func TestMemorySuspendFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend sandbox.Runtime // the real one, for its abilities
		fake    sandbox.Runtime
	}{
		{"docker", (*docker.Runtime)(nil), sandboxtest.NewFake()},
		{"kube", (*kube.Runtime)(nil), sandboxtest.NewRecording()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := tc.backend.(sandbox.Checkpointer); ok {
				t.Fatalf("%T checkpoints: this test's fake no longer stands for it", tc.backend)
			}
			e, _ := acmePolicy(t, "sandbox:\n  runtime: runsc\n  suspend: memory\n")
			store := newStore(t)
			a := newTestAgent(t, 0)
			h := &heard{}
			l, err := New(Config{Runtime: agentFake{Runtime: tc.fake, ep: a.ep}, Owner: "o", Snapshots: store, Notifier: h,
				Defaults: DefaultsFor("img:default"), Policies: e})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close(context.Background()) })
			ctx := t.Context()
			if _, err := l.CreateSession(ctx, "acme", "s1", server.SessionOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(a.root, "notes.txt"), []byte("from before the suspend\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := l.SuspendSession(ctx, "acme", "s1"); err != nil {
				t.Fatalf("suspend: %v", err)
			}
			ev := h.last(t, "suspended")
			t.Logf("%s", ev)
			if !strings.Contains(ev, "no memory image (this backend cannot checkpoint a sandbox (only containerd with gVisor can))") {
				t.Errorf("the suspended event: %q, want the files fallback and why", ev)
			}
			if r := storedRecord(t, store); r.State != stateSuspended || r.Memory != "" || r.Snapshot == "" {
				t.Errorf("record %+v: want suspended with a files snapshot, no image", r)
			}
			if err := os.Remove(filepath.Join(a.root, "notes.txt")); err != nil {
				t.Fatal(err)
			}
			spec, err := l.spec(ctx, "acme", "s1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.manager.Ensure(ctx, spec); err != nil {
				t.Fatalf("resume: %v", err)
			}
			if ev := h.last(t, "resumed"); !strings.HasPrefix(ev, "resumed: from snapshot") || !a.restored() {
				t.Errorf("the resumed event: %q, workspace restored %v: want the files snapshot", ev, a.restored())
			}
		})
	}
}
