package sandboxconn

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

// fakeAgent answers Run with its name; nothing else is used here.
type fakeAgent struct{ Agent }

func (fakeAgent) Run(context.Context, executor.Spec) (executor.Result, error) {
	return executor.Result{Stdout: "ok"}, nil
}
func (fakeAgent) Close() error { return nil }

// TestRedialRunningSandbox: an agent that does not answer while the
// runtime says its sandbox runs (a new server pod not yet let through the
// sessions' NetworkPolicy) is dialled again, and its sandbox, background
// tasks and all, is never removed; a sandbox that is not running is
// replaced, as before.
func TestRedialRunningSandbox(t *testing.T) {
	defer func(f, first time.Duration) { redialFor, redialFirst = f, first }(redialFor, redialFirst)
	redialFor, redialFirst = 2*time.Second, 10*time.Millisecond

	setup := func(t *testing.T, dial Dialer) (*Executor, *sandboxtest.Fake) {
		rt := sandboxtest.NewFake()
		m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "o", Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		e, err := New(Config{Manager: m, Tenant: "t", Limits: executor.DefaultLimits(), Dial: dial,
			Spec: func(session string) (sandbox.Spec, error) {
				return sandbox.NewSpec("t", session, sandbox.WithImage("img"))
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e, rt
	}
	ctx := context.Background()

	t.Run("answers later", func(t *testing.T) {
		var dials atomic.Int32
		e, rt := setup(t, func(context.Context, sandbox.Sandbox) (Agent, error) {
			if dials.Add(1) <= 4 {
				return nil, errors.New("dial tcp: i/o timeout")
			}
			return fakeAgent{}, nil
		})
		if _, err := e.agent(ctx, "s"); err != nil {
			t.Fatalf("agent: %v", err)
		}
		if n := int(rt.Creates.Load()); n != 1 {
			t.Errorf("%d sandboxes created, want the one, kept", n)
		}
	})

	t.Run("never answers", func(t *testing.T) {
		e, rt := setup(t, func(context.Context, sandbox.Sandbox) (Agent, error) {
			return nil, errors.New("dial tcp: connection refused")
		})
		_, err := e.agent(ctx, "s")
		if !errors.Is(err, executor.ErrUnavailable) || !errors.Is(err, errStillRunning) {
			t.Fatalf("agent: %v, want unavailable: %v", err, errStillRunning)
		}
		if n := int(rt.Creates.Load()); n != 1 {
			t.Errorf("%d sandboxes created, want the one, kept", n)
		}
		if sb, err := rt.Get(ctx, "t", "s"); err != nil || sb.State != sandbox.StateRunning {
			t.Errorf("the sandbox after the refusal: %+v %v, want it running still", sb, err)
		}
	})

	t.Run("dead", func(t *testing.T) {
		var dials atomic.Int32
		var rt *sandboxtest.Fake
		e, rt := setup(t, func(_ context.Context, sb sandbox.Sandbox) (Agent, error) {
			if dials.Add(1) == 1 {
				rt.Kill("t", "s") // the agent died: the runtime says so
				return nil, errors.New("dial: connection refused")
			}
			return fakeAgent{}, nil
		})
		if _, err := e.agent(ctx, "s"); err != nil {
			t.Fatalf("agent: %v", err)
		}
		if n := int(rt.Creates.Load()); n != 2 {
			t.Errorf("%d sandboxes created, want the dead one replaced", n)
		}
	})
}

// guardlessAgent is a fakeAgent whose handshake says it checks no execs.
type guardlessAgent struct {
	fakeAgent
	why string
}

func (h guardlessAgent) Hello() agentapi.Hello { return agentapi.Hello{NoExecGuard: h.why} }

// TestUnchecked: the sessions connected to an agent that checks no execs
// (its handshake's NoExecGuard) are counted, with a reason, until their
// connection goes; agents that check them are not.
func TestUnchecked(t *testing.T) {
	rt := sandboxtest.NewFake()
	m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "o", Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(_ context.Context, sb sandbox.Sandbox) (Agent, error) {
		switch sb.Session {
		case "checked":
			return guardlessAgent{}, nil
		case "b":
			return guardlessAgent{why: "--exec-guard=false"}, nil
		}
		return guardlessAgent{why: "exec guard: not supported on linux/arm64"}, nil
	}
	e, err := New(Config{Manager: m, Tenant: "t", Limits: executor.DefaultLimits(), Dial: dial,
		Spec: func(session string) (sandbox.Spec, error) {
			return sandbox.NewSpec("t", session, sandbox.WithImage("img"))
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	if n, why := e.Unchecked(); n != 0 || why != "" {
		t.Fatalf("no connections: %d, %q", n, why)
	}
	for _, s := range []string{"checked", "a", "b"} {
		if _, err := e.agent(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if n, why := e.Unchecked(); n != 2 || why != "--exec-guard=false" {
		t.Errorf("two unchecked: %d, %q", n, why)
	}
	e.Forget("b")
	e.Forget("a")
	if n, why := e.Unchecked(); n != 0 || why != "" {
		t.Errorf("after their connections went: %d, %q", n, why)
	}
}
