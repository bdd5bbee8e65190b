package sandboxed_test

import (
	"context"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/session/sandboxconn"
	"github.com/shellbox/shellbox/tools"
)

// TestReapSparesBusySandbox: the idle reaper asks a real agent whether its
// sandbox is busy (sandboxconn.Busy, GET /v1/activity) and keeps a session
// whose background task runs, however long since its last call; once the
// task has ended, the session is reaped at its TTL.
func TestReapSparesBusySandbox(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		r := sandboxedtest.New(t, e, sandbox.RuntimeRunc, executor.DefaultLimits())
		ts, err := tools.New(r.Exec, tools.Config{Home: "/workspace"})
		if err != nil {
			t.Fatal(err)
		}
		defer ts.Close()
		ctx := context.Background()
		res := call(t, ts, "busy", tools.ToolBash, bash(`while [ ! -e /tmp/go ]; do sleep 0.05; done`, "run_in_background", true))
		if res.IsError {
			t.Fatal(res.Text)
		}
		sbs := r.Manager.Sandboxes()
		if len(sbs) != 1 {
			t.Fatalf("sandboxes: %+v", sbs)
		}
		if why, err := sandboxconn.Busy(ctx, sbs[0]); err != nil || why != "1 command(s) running" {
			t.Fatalf("Busy with a background task = %q, %v", why, err)
		}
		time.Sleep(10 * time.Millisecond)
		if reaped, err := r.Manager.Reap(ctx, time.Millisecond); err != nil || len(reaped) != 0 {
			t.Fatalf("reaped %+v, %v while its background task runs", reaped, err)
		}
		if got := r.Manager.Sandboxes(); len(got) != 1 || got[0].ID != sbs[0].ID {
			t.Fatalf("after the reap: %+v, want %s kept", got, sbs[0].ID)
		}
		// The task ends (the call's own result comes after: so the reap
		// below may find that call still in flight, and tries again).
		if res := call(t, ts, "busy", tools.ToolBash, bash(`touch /tmp/go`)); res.IsError {
			t.Fatal(res.Text)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			why, err := sandboxconn.Busy(ctx, sbs[0])
			if err != nil {
				t.Fatal(err)
			}
			if why == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still busy 30 s after its task was told to end: %s", why)
			}
		}
		time.Sleep(10 * time.Millisecond)
		if reaped, err := r.Manager.Reap(ctx, time.Millisecond); err != nil || len(reaped) != 1 || reaped[0].ID != sbs[0].ID {
			t.Fatalf("reaped %+v, %v once idle; want %s", reaped, err, sbs[0].ID)
		}
	})
}
