package session

import (
	"context"
	"encoding/json"
	"errors"
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

// byIDRuntime measures workspaces by sandbox (as kube.Runtime does) and
// by session (as Docker does), to see which one Workspace asks.
type byIDRuntime struct{ sessionRuntime }

func (byIDRuntime) SandboxWorkspaceUsage(_ context.Context, id string) (int64, time.Time, error) {
	if id != "pool-7" {
		return 0, time.Time{}, errors.New("no such pod")
	}
	return 5 << 20, time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC), nil
}

// sessionRuntime measures by session only.
type sessionRuntime struct{}

func (sessionRuntime) Usage(context.Context, string) (usage.Counters, error) {
	return usage.Counters{}, nil
}

func (sessionRuntime) WorkspaceUsage(_ context.Context, tenant, session string) (int64, error) {
	return 3 << 20, nil
}

// TestUsageWorkspaceBySandbox: a runtime that measures a workspace by its
// sandbox is asked by the sandbox's id (a claimed warm-pool pod is not
// named after its session) and its time is kept; one that measures by
// session is asked by session and measured now (the zero time); one with
// neither is unsupported.
func TestUsageWorkspaceBySandbox(t *testing.T) {
	ctx := context.Background()
	sb := usage.Sandbox{Tenant: "acme", Session: "s1", ID: "pool-7"}
	n, at, err := usageSource{r: byIDRuntime{}}.Workspace(ctx, sb)
	if err != nil || n != 5<<20 || !at.Equal(time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("by sandbox: %d at %v, %v", n, at, err)
	}
	n, at, err = usageSource{r: sessionRuntime{}}.Workspace(ctx, sb)
	if err != nil || n != 3<<20 || !at.IsZero() {
		t.Errorf("by session: %d at %v, %v", n, at, err)
	}
	if _, _, err := (usageSource{r: cpuOnly{}}).Workspace(ctx, sb); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("neither: %v, want unsupported", err)
	}
}

// cpuOnly reads counters and measures no workspace.
type cpuOnly struct{}

func (cpuOnly) Usage(context.Context, string) (usage.Counters, error) { return usage.Counters{}, nil }
