// Package faults holds the fault tests of one host: a session's sandbox
// dies, vanishes or stops under shellbox while the session goes on, and
// the server process itself is SIGKILLed (server_test.go) or finds its
// state directory's disk full (diskfull_test.go), the engine beneath it
// restarts with its socket gone meanwhile (engine_test.go, on private
// daemons) or pauses a sandbox (paused_test.go), on Docker and
// containerd, runc and gVisor; and the soak (soak_test.go): many sessions
// of one server for minutes, checked for leaks. Each test checks what the call
// during the fault saw (a result, or a clear error naming what failed,
// within a bound that proves it did not hang), what the call after it saw
// (its result, in a new sandbox, with the session's workspace), and what
// is left on the engine (one sandbox for the session, the dead one gone),
// and logs its recovery time: from the fault to the end of the first call
// that succeeded after it. Those times are in docs/reliability.md's fault
// section; they are figures, not pass conditions.
package faults_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/tools"
)

func TestMain(m *testing.M) {
	code := m.Run()
	removeShellboxBinary()
	dockertest.RemoveAgent()
	os.Exit(code)
}

// hung is how long a call may take before the tests call it hung: far
// beyond what any of them needs (a call's timeout, its grace, a liveness
// check and a sandbox's replacement), so that only a missing bound fails.
const hung = 90 * time.Second

// rig is a sandboxed executor on one engine and runtime, with the tools
// over it.
type rig struct {
	*sandboxedtest.Rig
	e       enginetest.Engine
	runtime string
	ts      *tools.Toolset
}

func newRig(t *testing.T, e enginetest.Engine, runtime string) *rig {
	t.Helper()
	lim := executor.DefaultLimits()
	lim.Grace = 500 * time.Millisecond
	r := &rig{Rig: sandboxedtest.New(t, e, runtime, lim), e: e, runtime: runtime}
	ts, err := tools.New(r.Exec, tools.Config{Home: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close() })
	r.ts = ts
	return r
}

// eachRuntime runs fn on every engine, under runc and gVisor.
func eachRuntime(t *testing.T, fn func(t *testing.T, r *rig)) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			t.Run(runtime, func(t *testing.T) { fn(t, newRig(t, e, runtime)) })
		}
	})
}

// bash runs command in session through the bash tool, and fails the test
// if it takes longer than hung.
func (r *rig) bash(t *testing.T, session, command string, extra ...any) (tools.Result, time.Duration) {
	t.Helper()
	start := time.Now()
	res := sandboxedtest.Call(t, r.ts, session, tools.ToolBash, sandboxedtest.Bash(command, extra...))
	took := time.Since(start)
	if took > hung {
		t.Fatalf("a call took %s (hung): %q", took.Round(time.Millisecond), res.Text)
	}
	return res, took
}

// write leaves a file named name in the session's workspace, and starts
// the session's sandbox if it has none.
func (r *rig) write(t *testing.T, session, name string) {
	t.Helper()
	if res, _ := r.bash(t, session, "echo "+name+" > /workspace/"+name+" && echo ok"); res.Text != "ok" {
		t.Fatalf("writing %s: %q", name, res.Text)
	}
}

// sandboxOf is the session's sandbox as the engine has it now.
func (r *rig) sandboxOf(t *testing.T, session string) sandbox.Sandbox {
	t.Helper()
	sb, err := r.get(session)
	if err != nil {
		t.Fatalf("the sandbox of %s: %v", session, err)
	}
	return sb
}

// get is the session's sandbox as the engine has it now, asked within
// hung.
func (r *rig) get(session string) (sandbox.Sandbox, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	return r.Runtime.Get(ctx, sandboxedtest.Tenant, session)
}

// same tells one sandbox from its successor (containerd's ids are the
// session's).
func same(a, b sandbox.Sandbox) bool { return a.ID == b.ID && a.Created.Equal(b.Created) }

// recovered checks, after a fault that took dead, that the session's next
// call runs in a new sandbox and finds the files written (write) before,
// and that the engine has nothing left of dead.
func (r *rig) recovered(t *testing.T, session string, dead sandbox.Sandbox, names ...string) {
	t.Helper()
	res, _ := r.bash(t, session, "cd /workspace && cat "+strings.Join(names, " "))
	if res.IsError || res.Text != strings.Join(names, "\n") {
		t.Errorf("the call after the fault: %q, want the workspace's files %v", res.Text, names)
	}
	if now := r.sandboxOf(t, session); same(now, dead) || now.State != sandbox.StateRunning {
		t.Errorf("after the fault the session has sandbox %s (%s), want a new one running (the dead one was %s)", now.ID, now.State, dead.ID)
	}
	r.noLeftovers(t, session, dead)
}

// noLeftovers checks that the engine has one sandbox of the session, not
// dead.
func (r *rig) noLeftovers(t *testing.T, session string, dead sandbox.Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	all, err := r.Runtime.List(ctx, r.Owner)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sb := range all {
		if sb.Session != session {
			continue
		}
		n++
		if same(sb, dead) {
			t.Errorf("the dead sandbox %s is still on the engine (%s)", sb.ID, sb.State)
		}
	}
	if n > 1 {
		t.Errorf("%d sandboxes of session %s on the engine, want one", n, session)
	}
}

// gone waits until the engine says sb no longer runs.
func (r *rig) gone(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	for deadline := time.Now().Add(hung); ; time.Sleep(20 * time.Millisecond) {
		cur, err := r.get(sb.Session)
		if err != nil || !same(cur, sb) || cur.State != sandbox.StateRunning {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still runs %s after its fault", sb.ID, hung)
		}
	}
}

// signal sends sig to the first process of sb (its agent; under gVisor
// the sentry, which holds every process of the sandbox).
func (r *rig) signal(t *testing.T, sb sandbox.Sandbox, sig syscall.Signal) int {
	t.Helper()
	pid := r.e.Pid(t, sb.ID)
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("%s to pid %d of sandbox %s: %v", sig, pid, sb.ID, err)
	}
	return pid
}

// TestSandboxGoneBetweenCalls: a session's sandbox dies between two calls
// — its agent SIGKILLed, or its container removed through the engine
// behind shellbox's back — and the session's next call, which finds it
// dead, runs at once in a new sandbox with the session's workspace; the
// dead sandbox is gone from the engine.
func TestSandboxGoneBetweenCalls(t *testing.T) {
	eachRuntime(t, func(t *testing.T, r *rig) {
		for _, fault := range []struct {
			name   string
			inject func(t *testing.T, sb sandbox.Sandbox)
		}{
			{"agent killed", func(t *testing.T, sb sandbox.Sandbox) { r.signal(t, sb, syscall.SIGKILL) }},
			{"removed behind", func(t *testing.T, sb sandbox.Sandbox) { r.e.RemoveBehind(t, sb.ID) }},
		} {
			t.Run(fault.name, func(t *testing.T) {
				s := strings.ReplaceAll(fault.name, " ", "-")
				r.write(t, s, "before")
				dead := r.sandboxOf(t, s)
				start := time.Now()
				fault.inject(t, dead)
				// The next call comes once the engine has seen the death
				// (a call racing a death it finds a connection the dying
				// agent may still have read: TestAgentKilledMidCall).
				r.gone(t, dead)
				res, took := r.bash(t, s, "cat /workspace/before")
				if res.IsError || res.Text != "before" {
					t.Errorf("the call that found the sandbox dead: %q, want it run in a new sandbox", res.Text)
				}
				t.Logf("fault %s/%s/%s: the next call took %s (recovery %s): %q",
					r.e.Name, r.runtime, fault.name, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), res.Text)
				r.recovered(t, s, dead, "before")
			})
		}
	})
}

// TestAgentKilledMidCall: a session's agent is SIGKILLed while a call
// runs. The call ends at once with an error that says the sandbox died
// during the call and the command may have started; the dead sandbox is
// removed by then, without another call; the next call runs in a new
// sandbox with the session's workspace.
func TestAgentKilledMidCall(t *testing.T) {
	eachRuntime(t, func(t *testing.T, r *rig) {
		const s = "midcall"
		r.write(t, s, "before")
		dead := r.sandboxOf(t, s)
		started := filepath.Join(r.StateDir, "workspaces", sandboxedtest.Tenant, s, "started")
		type outcome struct {
			res  tools.Result
			took time.Duration
		}
		done := make(chan outcome, 1)
		go func() {
			res, took := r.bash(t, s, "touch /workspace/started; sleep 60", "timeoutMs", 120000)
			done <- outcome{res, took}
		}()
		for deadline := time.Now().Add(hung); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(started); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the call's command did not start")
			}
		}
		start := time.Now()
		r.signal(t, dead, syscall.SIGKILL)
		var o outcome
		select {
		case o = <-done:
		case <-time.After(hung):
			t.Fatalf("the call was not ended %s after its sandbox died", hung)
		}
		failed := time.Since(start)
		if !o.res.IsError || !strings.Contains(o.res.Text, "during the call (the command may have started)") {
			t.Errorf("the call during the fault: %q, want an error saying its sandbox died during it", o.res.Text)
		}
		// No other call came: the dead sandbox is gone already.
		if sb, err := r.get(s); err == nil && same(sb, dead) {
			t.Errorf("the dead sandbox %s is still on the engine (%s) after the call reported it", sb.ID, sb.State)
		}
		res, took := r.bash(t, s, "cat /workspace/before")
		t.Logf("fault %s/%s/agent killed mid-call: the call ended %s after the kill: %q; the next call took %s (recovery %s)",
			r.e.Name, r.runtime, failed.Round(time.Millisecond), o.res.Text, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		if res.IsError || res.Text != "before" {
			t.Errorf("the next call: %q", res.Text)
		}
		r.recovered(t, s, dead, "before")
	})
}

// TestAgentStopped (runc): a session's agent is SIGSTOPped (the kernel still
// accepts connections to its socket, nothing answers them). A call with
// timeoutMs 3000 ends with a clear error soon after its timeout and grace
// — once a liveness check of the agent gets no answer — and the stopped
// sandbox is declared dead and removed; the next call runs in a new
// sandbox with the session's workspace. That on the connection the
// session had; on a first dial (a server that has not talked to the agent
// yet) the handshake gets no answer, no command was sent, and the call
// runs in a new sandbox once the handshake's bound is over — or, where the
// handshake was still answered (seen on containerd: the stop took effect
// after it), ends with the same error as on a connection.
//
// Not under gVisor: from the host only the sentry can be stopped (the
// agent is PID 1 of its namespace, which no process of the sandbox can
// stop), and a stopped sentry wedges the engine itself: `runsc kill`
// waits on the sentry's control socket for ever, and Docker's inspect of
// the container hangs behind it (seen on Docker 28 with runsc
// 2026-07-01: 10 minutes, until the sentry was sent SIGCONT).
func TestAgentStopped(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		r := newRig(t, e, sandbox.RuntimeRunc)
		for _, tc := range []struct {
			name  string
			fresh bool // dial anew: the executor has no connection
		}{{"connected", false}, {"at dial", true}} {
			t.Run(tc.name, func(t *testing.T) {
				s := "stopped-" + strings.ReplaceAll(tc.name, " ", "-")
				r.write(t, s, "before")
				dead := r.sandboxOf(t, s)
				if tc.fresh {
					r.Exec.Forget(s)
				}
				start := time.Now()
				pid := r.signal(t, dead, syscall.SIGSTOP)
				// A test that fails midway leaves no stopped process.
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
				res, took := r.bash(t, s, "echo ran", "timeoutMs", 3000)
				clear := res.IsError && strings.Contains(res.Text, "stopped answering")
				if ran := !res.IsError && res.Text == "ran"; !clear && !(tc.fresh && ran) {
					t.Errorf("the call to the stopped agent: %q, want an error saying it stopped answering (or, at dial, the command run in a new sandbox)", res.Text)
				}
				if sb, err := r.get(s); err == nil && same(sb, dead) {
					t.Errorf("the stopped sandbox %s is still on the engine (%s) after the call reported it", sb.ID, sb.State)
				}
				next, nextTook := r.bash(t, s, "cat /workspace/before")
				t.Logf("fault %s/%s/agent stopped (%s): the call (timeoutMs 3000) ended after %s: %q; the next call took %s (recovery %s)",
					r.e.Name, r.runtime, tc.name, took.Round(time.Millisecond), res.Text, nextTook.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
				if next.IsError || next.Text != "before" {
					t.Errorf("the next call: %q", next.Text)
				}
				r.recovered(t, s, dead, "before")
			})
		}
	})
}

// TestRunscWithoutOptions (containerd): gVisor's shim given no options
// file starts runsc without host-uds, so the host could never reach the
// sandbox's agent (before, a call waited in the readiness check until the
// creation's timeout, 2 minutes, with nothing in the log). The session's
// first call fails at once with an error that names the missing setting,
// and leaves nothing on the engine.
func TestRunscWithoutOptions(t *testing.T) {
	addr := containerdtest.Address(t)
	e := enginetest.Containerd
	e.Runtime = func(t testing.TB, stateDir, agent, runtime string) sandbox.Runtime {
		cfg := containerdtest.Config(t, addr)
		cfg.StateDir, cfg.AgentBinary = stateDir, agent
		delete(cfg.RuntimeConfigs, sandbox.RuntimeRunsc)
		rt, err := containerd.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		return rt
	}
	r := newRig(t, e, sandbox.RuntimeRunsc)
	const s = "no-options"
	res, took := r.bash(t, s, "echo ran")
	t.Logf("fault containerd/runsc/no options file: the first call ended after %s: %q", took.Round(time.Millisecond), res.Text)
	if !res.IsError || !strings.Contains(res.Text, "host-uds") {
		t.Errorf("the first call: %q, want an error naming the shim's missing options (host-uds)", res.Text)
	}
	if sb, err := r.get(s); err == nil {
		t.Errorf("a sandbox is left on the engine: %s (%s)", sb.ID, sb.State)
	}
}
