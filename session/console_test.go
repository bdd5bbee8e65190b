package session

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/tools"
)

// TestPeekTask: on the local backend the console reads a task's output
// without moving the model's bash_output cursor.
func TestPeekTask(t *testing.T) {
	dir := t.TempDir()
	l, err := New(Config{Local: LocalConfig{Root: filepath.Join(dir, "root"), SpillDir: filepath.Join(dir, "spill"), Cgroup: "off"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { l.Close(ctx) })
	ts, err := l.Toolset(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool string, args any) tools.Result {
		raw, _ := json.Marshal(args)
		return ts.Call(ctx, tools.Invocation{Tenant: "acme", Session: "s1", Tool: tool, Args: raw})
	}
	res := call("bash", map[string]any{"command": "echo one; echo two >&2; sleep 0.3; echo three", "description": "t", "run_in_background": true})
	bg, ok := res.Value.(*tools.Background)
	if !ok {
		t.Fatalf("start: %s", res.Text)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p, err := l.PeekTask(ctx, "acme", "s1", bg.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.State == executor.Completed {
			if p.Stdout != "one\nthree\n" || p.Stderr != "two\n" {
				t.Fatalf("peek: %+v", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task never completed: %+v", p)
		}
	}
	// Peeking twice more changes nothing; the model still reads it all.
	l.PeekTask(ctx, "acme", "s1", bg.TaskID)
	if out := call("bash_output", map[string]string{"task_id": bg.TaskID}).Text; !strings.HasPrefix(out, "one\nthree\n") || !strings.Contains(out, "two") {
		t.Errorf("the model's read after peeks: %q", out)
	}
	if _, err := l.PeekTask(ctx, "acme", "other", bg.TaskID); !errors.Is(err, executor.ErrNotFound) {
		t.Errorf("another session's task: %v", err)
	}
}

// TestAllSessions: one listing answers an operator's view of every tenant,
// without another owner's sandboxes.
func TestAllSessions(t *testing.T) {
	l, f := newFakeLayer(t, nil, nil)
	ctx := context.Background()
	for _, ts := range [][2]string{{"acme", "a"}, {"beta", "x"}} {
		if _, err := l.CreateSession(ctx, ts[0], ts[1], server.SessionOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.Put(sandbox.Sandbox{Tenant: "acme", Session: "theirs", Owner: "other", State: sandbox.StateRunning})
	list, err := l.AllSessions(ctx)
	if err != nil || len(list) != 2 || list[0].Tenant != "acme" || list[0].ID != "a" || list[1].Tenant != "beta" || list[1].ID != "x" {
		t.Fatalf("AllSessions: %+v, %v", list, err)
	}
}
