// Package sandboxedtest wires a sandboxed executor on a real engine for
// the tests of executor/sandboxed and its suite packages: a Manager over
// the engine's runtime with a per-test owner and state directory, the test
// image, and removal of every sandbox the test made when it ends. The
// tests live in several packages so that each test binary (minutes: every
// case starts containers) runs under its own timeout, beside the others.
package sandboxedtest

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/images"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/session/sandboxconn"
	"github.com/shellbox/shellbox/tools"
)

// Conformance runs the executor conformance suite, unchanged, with every
// session in its own sandbox of engine e under runtime. Its callers are
// three packages (conformance/runc: both engines; conformance/runscdocker;
// conformance/runsccontainerd) so that each test binary runs under its own
// timeout: as one package it ran into go test's timeout on the 2-core CI
// machine, gVisor on both engines alone taking over 11 minutes there. The
// suite keeps go test's parallelism (GOMAXPROCS): with 4 cases at a time
// on 2 cores, a case whose command must print 100 lines within a 500 ms
// timeout printed none.
func Conformance(t *testing.T, e enginetest.Engine, runtime string) {
	var rigs sync.Map // executor.BashExecutor → *Rig
	executortest.Run(t, executortest.Harness{
		New: func(t *testing.T, lim executor.Limits) executor.BashExecutor {
			// Room for the suite's 100 MB spill in one session.
			r := New(t, e, runtime, lim, sandbox.WithSpillSize(256*sandbox.MiB))
			rigs.Store(r.Exec, r)
			return r.Exec
		},
		Root: executortest.FixedRoot("/workspace"),
		// DSH_HOME differs from the root so the suite can tell them apart.
		Home: "/home/sandbox",
		EndSession: func(e executor.BashExecutor, session string) {
			if r, ok := rigs.Load(e); ok {
				r.(*Rig).EndSession(session)
			}
		},
	})
}

// Tenant is this test process's tenant: unique on the engine, so packages
// testing at the same time never share a sandbox name.
var Tenant = dockertest.Tenant("t1")

// Rig is a sandboxed executor on a real engine and what it is made of.
type Rig struct {
	// StateDir is the runtime's state directory (the sessions' host
	// directories are below it).
	StateDir string
	Owner    string
	Runtime  sandbox.Runtime
	Manager  *sandbox.Manager
	Exec     *sandboxconn.Executor
	// Opts make every session's spec (image, runtime, test labels, then
	// the caller's).
	Opts []sandbox.Opt
}

var imageOnce sync.Once

// TestImage makes sure the test image exists (it builds in seconds).
func TestImage(t testing.TB) {
	t.Helper()
	var err error
	imageOnce.Do(func() { err = images.BuildTest(context.Background(), nil) })
	if err != nil {
		t.Fatalf("test image: %v", err)
	}
}

// New wires a sandboxed executor on engine e with runtime (runc or runsc)
// and limits lim; every sandbox it creates is removed when t ends.
func New(t testing.TB, e enginetest.Engine, runtime string, lim executor.Limits, opts ...sandbox.Opt) *Rig {
	t.Helper()
	return NewWith(t, e, runtime, lim, nil, opts...)
}

// NewWith is New with the executor's config adjusted by with.
func NewWith(t testing.TB, e enginetest.Engine, runtime string, lim executor.Limits, with func(*sandboxconn.Config), opts ...sandbox.Opt) *Rig {
	t.Helper()
	cli := dockertest.Engine(t)
	dockertest.RemoveLeftovers(context.Background(), cli)
	TestImage(t)
	stateDir := dockertest.StateDir(t)
	rt := e.Runtime(t, stateDir, dockertest.Agent(t), runtime)
	owner := dockertest.Owner(t)
	m, err := sandbox.NewManager(sandbox.Config{
		Runtime: rt,
		Owner:   owner,
		Ready:   sandboxconn.WaitAgent,
		Busy:    sandboxconn.Busy, // as session.Service sets it
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &Rig{StateDir: stateDir, Owner: owner, Runtime: rt, Manager: m}
	r.Opts = append([]sandbox.Opt{
		sandbox.WithImage(dockertest.Image),
		sandbox.WithRuntime(runtime),
		sandbox.WithLabels(dockertest.Labels()),
	}, opts...)
	if runtime == sandbox.RuntimeRunsc {
		// gVisor counts host threads against the pids limit (~40 for the
		// sandbox, ~10 per process): size it for that.
		r.Opts = append(r.Opts, sandbox.WithPidsLimit(1024))
	}
	cfg := sandboxconn.Config{
		Manager: m,
		Tenant:  Tenant,
		Spec:    func(session string) (sandbox.Spec, error) { return sandbox.NewSpec(Tenant, session, r.Opts...) },
		Limits:  lim,
	}
	if with != nil {
		with(&cfg)
	}
	r.Exec, err = sandboxconn.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Exec.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, sb := range m.Sandboxes() {
			if err := m.Remove(ctx, sb.Tenant, sb.Session); err != nil {
				t.Errorf("remove sandbox %s/%s: %v", sb.Tenant, sb.Session, err)
			}
		}
	})
	return r
}

// EndSession forgets session and removes its sandbox, as the server does
// when a session is deleted.
func (r *Rig) EndSession(session string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.Exec.Forget(session)
	r.Manager.Remove(ctx, Tenant, session)
}

// Call runs one tool call of the test tenant's session through ts, with
// three minutes to answer.
func Call(t testing.TB, ts *tools.Toolset, session, tool string, args any) tools.Result {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatalf("tool arguments: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return ts.Call(ctx, tools.Invocation{Tenant: Tenant, Session: session, Tool: tool, Args: b})
}

// Bash is the arguments of a bash call: command, then name, value pairs.
func Bash(command string, extra ...any) map[string]any {
	m := map[string]any{"command": command, "description": "hostile workload"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

// LastLines is the last n lines of s, for messages about long outputs.
func LastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
