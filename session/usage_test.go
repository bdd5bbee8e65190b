package session

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/tools"
	"github.com/shellbox/shellbox/usage"
)

// TestUsageLimitRefusesNewCommandsOnly: past its policy's daily CPU
// limit a tenant's next command is refused with the limit's text; a
// background task started before it runs on and answers.
func TestUsageLimitRefusesNewCommandsOnly(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte("default: allow\nlimits:\n  cpuSecondsPerDay: 2\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "beta.yaml"), []byte("default: allow\n"), 0o644)
	e, err := policies.Open(dir, policies.Options{NoWatch: true, NoApprover: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	store := &usage.Memory{}
	m := usage.NewMeter(store, nil)
	l, err := New(Config{Local: LocalConfig{Root: t.TempDir()}, Policies: e, Usage: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	ctx := context.Background()
	ts, err := l.Toolset(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool string, args map[string]any) tools.Result {
		raw, _ := json.Marshal(args)
		return ts.Call(ctx, tools.Invocation{Tenant: "acme", Session: "s1", Tool: tool, Args: raw})
	}
	bg := call("bash", map[string]any{"command": "sleep 120", "description": "wait", "run_in_background": true})
	task, ok := bg.Value.(*tools.Background)
	if !ok {
		t.Fatalf("background start: %q", bg.Text)
	}
	t.Cleanup(func() { call("bash_kill", map[string]any{"task_id": task.TaskID}) })

	// 2.5 CPU-seconds today, as another process of this host wrote them.
	if err := store.Add(ctx, []usage.Bucket{{Tenant: "acme", Session: "s0", Hour: time.Now().UTC().Truncate(time.Hour), Figures: usage.Figures{CPUSeconds: 2.5}}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Load(ctx); err != nil {
		t.Fatal(err)
	}
	res := call("bash", map[string]any{"command": "echo hi", "description": "print a greeting"})
	resets := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).Format("2006-01-02 15:04")
	want := "Error: tenant acme used its 2 CPU-seconds (limits.cpuSecondsPerDay) for today (resets at " + resets + " UTC)"
	if !res.IsError || res.Text != want {
		t.Errorf("a command past the limit: %q, want %q", res.Text, want)
	}
	out := call("bash_output", map[string]any{"task_id": task.TaskID})
	if out.IsError || !strings.Contains(out.Text, "status: running") {
		t.Errorf("the task started before the limit: %q, want it running", out.Text)
	}
	// Another tenant (no limits in its policy) is not limited by acme's use.
	ts2, err := l.Toolset(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	if r := ts2.Call(ctx, tools.Invocation{Tenant: "beta", Session: "s1", Tool: "bash", Args: json.RawMessage(`{"command":"true","description":"run true"}`)}); r.IsError {
		t.Errorf("beta: %q", r.Text)
	}
}
