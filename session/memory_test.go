package session

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
	"github.com/shellbox/shellbox/sandbox/snapshot"
)

// checkpointing is a Fake runtime that checkpoints: its sandboxes'
// agent is a test agent, and an image is restored when it reads, whole,
// as goodImage. It counts the sandboxes each way makes.
type checkpointing struct {
	*sandboxtest.Fake
	agent             *testAgent
	creates, restores atomic.Int32
	restoreAttempts   atomic.Int32
}

const goodImage = "a memory image"

func (c *checkpointing) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := c.Fake.Create(ctx, spec)
	if err == nil {
		c.creates.Add(1)
		sb.Agent = c.agent.ep
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
		sb.Agent = c.agent.ep
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
