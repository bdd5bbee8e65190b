package sandboxed_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/tools"
)

func TestMain(m *testing.M) { dockertest.Main(m) }

// The tests' shorthands.
var (
	tenant    = sandboxedtest.Tenant
	call      = sandboxedtest.Call
	bash      = sandboxedtest.Bash
	lastLines = sandboxedtest.LastLines
)

// TestTaskWithoutSandbox: bash_output and bash_kill in a session that never
// ran anything answer "no such task" and create no sandbox (a bogus task id
// must not cost a container).
func TestTaskWithoutSandbox(t *testing.T) {
	r := sandboxedtest.New(t, enginetest.Docker, sandbox.RuntimeRunc, executor.DefaultLimits())
	ts, err := tools.New(r.Exec, tools.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	for _, tool := range []string{"bash_output", "bash_kill"} {
		res := call(t, ts, "never-ran", tool, map[string]any{"task_id": "b1234"})
		if res.Text != "Error: no such task: b1234" || !res.IsError {
			t.Errorf("%s: got %q", tool, res.Text)
		}
	}
	if _, err := r.Manager.Inspect(context.Background(), tenant, "never-ran"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a sandbox was created for the session: %v", err)
	}
}
