package faults_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// token is the test tenant's bearer token on the servers these tests
// start.
const token = "faults-token"

var (
	serverOnce sync.Once
	serverBin  string
	serverErr  error
)

// shellboxBinary builds cmd/shellbox once per test process (removed by
// TestMain).
func shellboxBinary(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "shellbox-faults-")
		if err != nil {
			serverErr = err
			return
		}
		serverBin = filepath.Join(dir, "shellbox")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", serverBin, "github.com/shellbox/shellbox/cmd/shellbox")
		if out, err := cmd.CombinedOutput(); err != nil {
			serverErr = fmt.Errorf("build shellbox: %v\n%s", err, out)
		}
	})
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	return serverBin
}

func removeShellboxBinary() {
	if serverBin != "" {
		os.RemoveAll(filepath.Dir(serverBin))
	}
}

// served is a deployment of `shellbox serve` on one engine: its config
// (state directory, owner, policies, audit log) outlives the processes
// started on it.
type served struct {
	e        enginetest.Engine
	runtime  string
	tenant   string
	cfg      string
	stateDir string
	owner    string
	audit    string
	rt       sandbox.Runtime // the engine as the test sees it
	env      []string        // more environment of its processes (DOCKER_HOST)
	policy   string          // the tenant's policy file
}

// newServed writes the config of a server on e whose tenant's sandboxes
// run under runtime. Its state directory and audit log are on disk, a
// directory ("": fresh ones of their own).
func newServed(t *testing.T, e enginetest.Engine, runtime, disk string) *served {
	t.Helper()
	dockertest.RemoveLeftovers(context.Background(), dockertest.Engine(t))
	sandboxedtest.TestImage(t)
	stateDir, audit := filepath.Join(disk, "state"), filepath.Join(disk, "audit.log")
	if disk == "" {
		stateDir, audit = dockertest.StateDir(t), filepath.Join(t.TempDir(), "audit.log")
	}
	s := &served{e: e, runtime: runtime, tenant: dockertest.Tenant("sv"), stateDir: stateDir,
		owner: dockertest.Owner(t), audit: audit}
	s.rt = e.Runtime(t, t.TempDir(), dockertest.Agent(t), runtime)
	pols := t.TempDir()
	pids := ""
	if runtime == sandbox.RuntimeRunsc {
		pids = "  pids: 1024\n" // gVisor counts host threads against it
	}
	// 24 MiB workspaces: reserved whole on the state disk, which is
	// 96 MiB in TestStateDiskFull.
	pol := fmt.Sprintf("default: allow\nsandbox:\n  images: [%s]\n  runtime: %s\n  disk: 24MiB\n%s", dockertest.Image, runtime, pids)
	s.policy = filepath.Join(pols, s.tenant+".yaml")
	if err := os.WriteFile(s.policy, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cfg = filepath.Join(t.TempDir(), "shellbox.yaml")
	cfg := e.Config(t) + fmt.Sprintf(`policies:
  dir: %s
audit:
  file: %s
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  agent: %s
  labels:
    %s: "1"
server:
  shutdownTimeout: 10s
  tenants:
    %s:
      tokens: [%q]
`, pols, s.audit, stateDir, s.owner, dockertest.Image, dockertest.Agent(t), dockertest.LabelTest, s.tenant, server.HashToken(token))
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Whatever a failed test leaves on the engine goes (the sessions'
	// host state goes with the state directory).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		all, _ := s.rt.List(ctx, s.owner)
		for _, sb := range all {
			s.rt.Remove(ctx, sb.ID)
		}
	})
	return s
}

// serveProc is one `shellbox serve` process.
type serveProc struct {
	cmd  *exec.Cmd
	url  string
	done chan error
	mu   sync.Mutex
	logs []string
}

// start starts a server on s's config and waits until it listens.
func (s *served) start(t *testing.T) *serveProc {
	t.Helper()
	cmd := exec.Command(shellboxBinary(t), "serve", "--config", s.cfg, "--listen", "127.0.0.1:0")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, s.env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "listening" {
				addr <- l.Addr
			}
			p.mu.Lock()
			if len(p.logs) < 10000 {
				p.logs = append(p.logs, sc.Text())
			}
			p.mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	select {
	case a := <-addr:
		p.url = "http://" + a
	case err := <-p.done:
		p.done <- err
		t.Fatalf("serve exited: %v\n%s", err, p.log())
	case <-time.After(hung):
		cmd.Process.Kill()
		t.Fatal("serve did not listen")
	}
	t.Cleanup(func() { p.stop() })
	return p
}

// stop ends p (SIGTERM, then SIGKILL after a minute); it is idempotent.
func (p *serveProc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
	}
}

// kill SIGKILLs p and waits for it to be gone.
func (p *serveProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(hung):
		t.Fatal("serve did not die of SIGKILL")
	}
}

// deleteSessions ends sessions through p (their sandboxes and
// workspaces go).
func (p *serveProc) deleteSessions(t *testing.T, sessions ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New(p.url, token, nil)
	for _, s := range sessions {
		if err := c.DeleteSession(ctx, s); err != nil {
			t.Logf("deleting session %s: %v", s, err)
		}
	}
}

func (p *serveProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.logs, "\n")
}

// call makes one tool call through p's REST API, within hung; a transport
// error comes back as err.
func (p *serveProc) call(t *testing.T, session, tool, args string) (tools.Result, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	start := time.Now()
	r, err := client.New(p.url, token, nil).Call(ctx, session, tool, json.RawMessage(args))
	took := time.Since(start)
	if took >= hung {
		t.Fatalf("a %s call took %s (hung): %v %q", tool, took.Round(time.Millisecond), err, r.Text)
	}
	return r, took, err
}

// bash runs command in session and fails the test unless it succeeds.
func (p *serveProc) bash(t *testing.T, session, command string) string {
	t.Helper()
	r, _, err := p.call(t, session, tools.ToolBash, fmt.Sprintf(`{"command":%q,"description":"fault test"}`, command))
	if err != nil || r.IsError {
		t.Fatalf("%q: %v %q", command, err, r.Text)
	}
	return r.Text
}

// sandboxes are the sandboxes of s's owner on the engine, by their
// labels.
func (s *served) sandboxes(t *testing.T) []sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	all, err := s.rt.List(ctx, s.owner)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// TestServerKilledMidCall: `shellbox serve` is SIGKILLed while a
// foreground call runs and a background task of the same session prints,
// and is started again on the same state directory. The call in flight
// ends at once with a transport error (not a hang); the new server adopts
// the session's sandbox (no second one, nothing left of the owner but
// it), the background task is read to its end through the new server,
// the workspace's files are there, the audit log has the calls from
// before the kill, and the first call after the restart succeeds.
func TestServerKilledMidCall(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			t.Run(runtime, func(t *testing.T) { serverKilledMidCall(t, e, runtime) })
		}
	})
}

func serverKilledMidCall(t *testing.T, e enginetest.Engine, runtime string) {
	s := newServed(t, e, runtime, "")
	const session = "srvkill"
	first := s.start(t)
	first.bash(t, session, "echo kept > /workspace/kept")
	r, _, err := first.call(t, session, tools.ToolBash,
		`{"command":"for i in $(seq 1 12); do echo tick $i; sleep 1; done; exit 3","description":"ticks","run_in_background":true}`)
	if err != nil || r.IsError {
		t.Fatalf("starting the task: %v %q", err, r.Text)
	}
	task := r.Value.(*tools.Background).TaskID
	before := s.sandboxes(t)
	if len(before) != 1 || before[0].Session != session {
		t.Fatalf("before the kill the owner has %+v, want the session's sandbox", before)
	}

	type outcome struct {
		r   tools.Result
		err error
	}
	inflight := make(chan outcome, 1)
	go func() {
		r, _, err := first.call(t, session, tools.ToolBash,
			`{"command":"touch /workspace/started; sleep 60; echo slept","description":"in flight","timeoutMs":120000}`)
		inflight <- outcome{r, err}
	}()
	started := filepath.Join(s.stateDir, "workspaces", s.tenant, session, "started")
	for deadline := time.Now().Add(hung); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call in flight did not start")
		}
	}
	// The count of the call's `sleep 60` in the sandbox, which the
	// test reads again after the restart.
	const sleeping = `n=0; for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f 2>/dev/null | grep -q '^sleep 60' && n=$((n+1)); done; echo $n`
	if n := first.bash(t, session, sleeping); n != "1" {
		t.Fatalf("the call in flight's sleep runs %q times, want 1", n)
	}
	kill := time.Now()
	first.kill(t)
	var o outcome
	select {
	case o = <-inflight:
	case <-time.After(hung):
		t.Fatalf("the call in flight did not end %s after its server died", hung)
	}
	ended := time.Since(kill)
	if o.err == nil {
		t.Errorf("the call in flight when its server was killed: %q, want a transport error", o.r.Text)
	}

	second := s.start(t)
	listening := time.Since(kill)
	t.Cleanup(func() { second.deleteSessions(t, session) })
	next, took, err := second.call(t, session, tools.ToolBash, `{"command":"cat /workspace/kept","description":"after"}`)
	recovery := time.Since(kill)
	if err != nil || next.IsError || next.Text != "kept" {
		t.Errorf("the first call after the restart: %v %q, want the workspace's file", err, next.Text)
	}

	// The task's output, read through the new server to its end.
	var out strings.Builder
	for deadline := time.Now().Add(hung); ; time.Sleep(500 * time.Millisecond) {
		r, _, err := second.call(t, session, tools.ToolBashOutput, fmt.Sprintf(`{"task_id":%q}`, task))
		if err != nil || r.IsError {
			t.Fatalf("bash_output after the restart: %v %q", err, r.Text)
		}
		out.WriteString(r.Text + "\n")
		if strings.Contains(r.Text, "status: completed") || time.Now().After(deadline) {
			break
		}
	}
	for i := 1; i <= 12; i++ {
		if want := fmt.Sprintf("tick %d\n", i); !strings.Contains(out.String(), want) {
			t.Errorf("the task's output read after the restart lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "status: completed, exit code: 3") {
		t.Errorf("the task's status after the restart:\n%s", out.String())
	}

	// The in-flight call's command, in the adopted sandbox.
	left := second.bash(t, session, sleeping)

	after := s.sandboxes(t)
	if len(after) != 1 || !same(after[0], before[0]) || after[0].State != sandbox.StateRunning {
		t.Errorf("after the restart the owner has %+v, want the session's sandbox %s adopted, and nothing else", after, before[0].ID)
	}

	audit, err := os.ReadFile(s.audit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"echo kept > /workspace/kept", "for i in $(seq 1 12)", "touch /workspace/started; sleep 60", "cat /workspace/kept"} {
		if !strings.Contains(string(audit), strings.ReplaceAll(want, ">", `\u003e`)) && !strings.Contains(string(audit), want) {
			t.Errorf("the audit log has no line of %q:\n%s", want, audit)
		}
	}
	t.Logf("fault %s/%s/server SIGKILLed mid-call: the call in flight ended %s after the kill: %v; the new server listened at %s; the next call took %s (recovery %s); `sleep 60` of the call in flight still running: %s",
		e.Name, runtime, ended.Round(time.Millisecond), o.err, listening.Round(time.Millisecond), took.Round(time.Millisecond), recovery.Round(time.Millisecond), left)
}
