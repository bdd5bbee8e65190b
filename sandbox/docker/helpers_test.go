package docker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

func TestMain(m *testing.M) {
	// Leftovers of crashed runs first, so they neither leak nor confuse.
	if cli, err := docker.NewClient(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// Without an engine this fails; the tests then skip (or fail under
		// CI=true) with the reason, so say nothing here.
		if n, err := dockertest.RemoveLeftovers(ctx, cli); n > 0 || (err != nil && !client.IsErrConnectionFailed(err)) {
			fmt.Fprintf(os.Stderr, "removed %d leftover test containers (err: %v)\n", n, err)
		}
		cancel()
		cli.Close()
	}
	os.Exit(m.Run())
}

// env is one test's engine, Manager and the ingredients of its specs.
type env struct {
	t        testing.TB
	cli      *client.Client
	rt       *docker.Runtime
	m        *sandbox.Manager
	cfg      sandbox.Config
	stateDir string
	owner    string
	image    string
	agent    string
	runtime  string
	// viaSocket: the agent's socket is reachable from the host (false for
	// runsc registered without --host-uds); otherwise commands go through
	// docker exec of the stand-in's "run" mode.
	viaSocket bool
}

func newEnv(t testing.TB, runtime string, tweak ...func(*sandbox.Config)) *env {
	t.Helper()
	cli := dockertest.Engine(t)
	e := &env{
		t:         t,
		cli:       cli,
		stateDir:  dockertest.StateDir(t),
		owner:     dockertest.Owner(t),
		image:     dockertest.EnsureImage(t, cli),
		agent:     dockertest.StandIn(t),
		runtime:   runtime,
		viaSocket: true,
	}
	if runtime == sandbox.RuntimeRunsc {
		args, ok, err := dockertest.RuntimeArgs(context.Background(), cli, "runsc")
		if err != nil {
			t.Fatal(err)
		}
		dockertest.Require(t, ok, "runtime runsc (gVisor) is not registered with the Docker engine")
		e.viaSocket = hostUDS(args)
		if !e.viaSocket {
			t.Logf("runsc runtimeArgs %q lack --host-uds=all|create: the agent socket is not reachable from the host; using docker exec", args)
		}
	}
	rt, err := docker.New(cli, docker.Config{StateDir: e.stateDir, AgentBinary: e.agent})
	if err != nil {
		t.Fatal(err)
	}
	e.rt = rt
	e.cfg = sandbox.Config{
		Runtime: e.rt,
		Owner:   e.owner,
		Ready:   e.ready,
	}
	for _, f := range tweak {
		f(&e.cfg)
	}
	m, err := sandbox.NewManager(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	// Whatever a test leaves, its owner's containers go when it ends.
	t.Cleanup(func() { e.removeAll() })
	return e
}

func hostUDS(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		a = strings.TrimLeft(a, "-")
		return a == "host-uds=all" || a == "host-uds=create" || a == "fsgofer-host-uds" || a == "fsgofer-host-uds=true"
	})
}

func ociSeccomp(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		a = strings.TrimLeft(a, "-")
		return a == "oci-seccomp" || a == "oci-seccomp=true"
	})
}

// ready is the tests' Ready hook: the socket accepts, or (no host-uds) a
// docker exec of the stand-in works.
func (e *env) ready(ctx context.Context, sb sandbox.Sandbox) error {
	if e.viaSocket {
		return dockertest.WaitSocket(ctx, sb)
	}
	for {
		_, _, code, err := e.exec(ctx, sb.ID, []string{sandbox.AgentPath, "probe"})
		if err == nil && code == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("exec probe: %w (last: %v, code %d)", ctx.Err(), err, code)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// hostDir is the host directory of a session of the env's runtime.
func (e *env) hostDir(session string) string {
	return filepath.Join(e.stateDir, "sessions", tenant, session)
}

// tenant is this test process's tenant: unique on the engine, so packages
// testing at the same time never share a sandbox name.
var tenant = dockertest.Tenant("t1")

// spec returns a spec for session in tenant tenant on the env's runtime,
// labelled as a test's, with the stand-in as agent.
func (e *env) spec(session string, opts ...sandbox.Opt) sandbox.Spec {
	e.t.Helper()
	s, err := sandbox.NewSpec(tenant, session, sandbox.Compose(
		sandbox.WithImage(e.image),
		sandbox.WithRuntime(e.runtime),
		sandbox.WithLabels(dockertest.Labels()),
		sandbox.WithMemory(256*sandbox.MiB),
		sandbox.WithWorkspaceSize(32*sandbox.MiB),
		sandbox.WithTmpSize(16*sandbox.MiB),
		sandbox.WithSpillSize(8*sandbox.MiB),
		sandbox.WithPidsLimit(128),
		sandbox.WithCPUs(1),
	), sandbox.Compose(opts...))
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) ensure(spec sandbox.Spec) sandbox.Sandbox {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := e.m.Ensure(ctx, spec)
	if err != nil {
		e.t.Fatalf("Ensure(%s/%s): %v", spec.Tenant, spec.Session, err)
	}
	return sb
}

// removeAll removes every container of the env's owner.
func (e *env) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := e.rt.List(ctx, e.owner)
	if err != nil {
		e.t.Errorf("cleanup: %v", err)
		return
	}
	for _, sb := range list {
		if err := e.rt.Remove(ctx, sb.ID); err != nil {
			e.t.Errorf("cleanup: %v", err)
		}
	}
}

// run runs a bash command in sb as uid:gid and returns the stand-in's answer.
func (e *env) run(sb sandbox.Sandbox, uid int, command string, timeout time.Duration) dockertest.Response {
	e.t.Helper()
	resp, err := e.tryRun(sb, uid, command, timeout)
	if err != nil {
		e.t.Fatalf("run %q: %v", command, err)
	}
	return resp
}

func (e *env) tryRun(sb sandbox.Sandbox, uid int, command string, timeout time.Duration) (dockertest.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	if e.viaSocket {
		return dockertest.Call(ctx, sb.Agent.Address, dockertest.Request{
			Argv: []string{"bash", "-c", command}, UID: uid, GID: uid, TimeoutMs: int(timeout / time.Millisecond),
		})
	}
	argv := append([]string{sandbox.AgentPath, "exec", fmt.Sprint(uid), fmt.Sprint(uid), fmt.Sprint(int(timeout / time.Millisecond))},
		"bash", "-c", command)
	stdout, stderr, code, err := e.exec(ctx, sb.ID, argv)
	if err != nil {
		return dockertest.Response{}, err
	}
	if code != 0 {
		return dockertest.Response{}, fmt.Errorf("exec: exit %d, stderr %q", code, stderr)
	}
	var resp dockertest.Response
	if err := json.Unmarshal([]byte(stdout), &resp); err != nil {
		return dockertest.Response{}, fmt.Errorf("%v in %q", err, stdout)
	}
	return resp, nil
}

// exec runs argv in the container as root via the exec API.
func (e *env) exec(ctx context.Context, id string, argv []string) (string, string, int, error) {
	ex, err := e.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: argv, User: "0:0", AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return "", "", 0, err
	}
	att, err := e.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", "", 0, err
	}
	defer att.Close()
	// The hijacked connection ignores ctx: close it when ctx ends.
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	var so, se bytes.Buffer
	if _, err := stdcopy.StdCopy(&so, &se, att.Reader); err != nil {
		return "", "", 0, err
	}
	for {
		st, err := e.cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return "", "", 0, err
		}
		if !st.Running {
			return so.String(), se.String(), st.ExitCode, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) inspect(id string) container.InspectResponse {
	e.t.Helper()
	info, err := e.cli.ContainerInspect(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// runtimes runs f as a subtest per runtime: runc always, runsc when the
// engine has it (in CI it must).
func runtimes(t *testing.T, f func(t *testing.T, runtime string)) {
	for _, rt := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		t.Run(rt, func(t *testing.T) { f(t, rt) })
	}
}

// statusField returns a field of a /proc/<pid>/status text.
func statusField(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// parallel runs f n times concurrently and waits.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
}
