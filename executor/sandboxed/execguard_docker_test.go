package sandboxed_test

import (
	"testing"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/tools"
)

// TestUncheckedAgentReported: an agent started without its exec guard says
// so at the handshake, and the connections count its session (the
// server's warning); the calls still run.
func TestUncheckedAgentReported(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		r := sandboxedtest.New(t, e, sandbox.RuntimeRunc, executor.DefaultLimits(), sandbox.WithAgentArgs("--exec-guard=false"))
		ts, err := tools.New(r.Exec, tools.Config{Home: "/workspace"})
		if err != nil {
			t.Fatal(err)
		}
		defer ts.Close()
		if n, why := r.Exec.Unchecked(); n != 0 || why != "" {
			t.Fatalf("before any call: %d, %q", n, why)
		}
		if res := call(t, ts, "unguarded", tools.ToolBash, bash(`echo hi`)); res.IsError || res.Text != "hi" {
			t.Fatalf("call: %+v", res)
		}
		if n, why := r.Exec.Unchecked(); n != 1 || why != "--exec-guard=false" {
			t.Errorf("after a call: %d sessions unchecked, %q", n, why)
		}
	})
}
