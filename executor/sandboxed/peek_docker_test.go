package sandboxed_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/tools"
)

// TestPeekInSandbox: the operator console's peek reaches a sandboxed task
// through the agent and leaves the model's bash_output cursor alone.
func TestPeekInSandbox(t *testing.T) {
	r := sandboxedtest.New(t, enginetest.Docker, sandbox.RuntimeRunc, executor.DefaultLimits())
	ts, err := tools.New(r.Exec, tools.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	res := call(t, ts, "peek", "bash", map[string]any{"command": "echo one; sleep 0.5; echo two", "description": "t", "run_in_background": true})
	bg, ok := res.Value.(*tools.Background)
	if !ok {
		t.Fatalf("start: %s", res.Text)
	}
	ctx := context.Background()
	task, err := r.Exec.Task(ctx, "peek", bg.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := task.(agentapi.Peeker)
	if !ok {
		t.Fatalf("a sandboxed task (%T) cannot peek", task)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		o, err := p.Peek(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status.State == executor.Completed {
			if o.Stdout != "one\ntwo\n" {
				t.Errorf("peek: %+v", o)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peek: %+v", o)
		}
	}
	if out := call(t, ts, "peek", "bash_output", map[string]any{"task_id": bg.TaskID}).Text; !strings.HasPrefix(out, "one\ntwo\n") {
		t.Errorf("the model's read after peeks: %q", out)
	}
}
