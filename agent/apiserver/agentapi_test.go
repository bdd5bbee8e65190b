package apiserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/executor/local/localtest"
)

func TestHello(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	h := a.client.Hello()
	if h.Protocol != agentapi.Protocol || h.Agent != "test" || h.Root != a.root || h.Home == "" || h.Pwsh {
		t.Errorf("Hello() = %+v", h)
	}
	if a.client.Socket() != a.socket {
		t.Errorf("Socket() = %q, want %q", a.client.Socket(), a.socket)
	}
}

// TestHelloNoExecGuard: an agent without its exec guard says why in the
// handshake (the server warns from it); one with it says nothing.
func TestHelloNoExecGuard(t *testing.T) {
	t.Parallel()
	if h := newTestAgent(t).client.Hello(); h.NoExecGuard != "" {
		t.Errorf("an agent with no reason given: NoExecGuard %q", h.NoExecGuard)
	}
	e, err := local.New(local.Config{Root: t.TempDir(), Home: t.TempDir(), Limits: testLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	srv, err := apiserver.NewServer(apiserver.ServerConfig{Runner: e, Agent: "test", NoExecGuard: "exec guard: not supported on linux/arm64"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := agentapi.Dial(context.Background(), serve(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Hello().NoExecGuard; got != "exec guard: not supported on linux/arm64" {
		t.Errorf("NoExecGuard %q", got)
	}
}

// TestVersionMismatch: an agent of another protocol is refused, with both
// versions named.
func TestVersionMismatch(t *testing.T) {
	t.Parallel()
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(agentapi.Hello{Protocol: 2, Agent: "9.9.9"})
	}))
	_, err := agentapi.Dial(context.Background(), sock)
	want := fmt.Sprintf("agent protocol mismatch: shellbox speaks protocol 1, the agent at %s speaks 2 (agent version 9.9.9)", sock)
	if err == nil || err.Error() != want {
		t.Fatalf("Dial: %v\nwant: %s", err, want)
	}
	var ve *agentapi.VersionError
	if !errors.As(err, &ve) || !errors.Is(err, executor.ErrUnavailable) {
		t.Errorf("error %T: want a *VersionError of class ErrUnavailable", err)
	}
}

// TestVersionRefusedByAgent: a client of another protocol is refused by the
// agent on every request but the handshake.
func TestVersionRefusedByAgent(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (netConn, error) {
		return dialUnix(ctx, a.socket)
	}}}
	req, _ := http.NewRequest(http.MethodPost, "http://agent/v1/run", strings.NewReader(`{}`))
	req.Header.Set(agentapi.HeaderProtocol, "7")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e agentapi.Error
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusBadRequest || e.Class != agentapi.ClassInvalid ||
		e.Message != "agent protocol mismatch: the agent speaks protocol 1 (agent version test), the client 7" {
		t.Errorf("status %d, error %+v", resp.StatusCode, e)
	}
}

// TestRunRoundTrip: what Run returns through the protocol is what the
// executor returned, field for field.
func TestRunRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	tests := []struct {
		command string
		timeout time.Duration
	}{
		{"echo out; echo err >&2", 0},
		{"exit 3", 0},
		{"kill -TERM $$", 0},
		{"kill -KILL $$", 0},
		{"printf 'no newline'", 0},
		{"sleep 10", 300 * time.Millisecond},
		{"head -c 100000 /dev/zero | tr '\\0' x", 0},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			t.Parallel()
			spec := a.spec(t, executor.Request{Command: tt.command, Timeout: tt.timeout})
			direct, err1 := a.exec.Run(context.Background(), spec)
			remote, err2 := a.client.Run(context.Background(), spec)
			if err1 != nil || err2 != nil {
				t.Fatalf("direct %v, remote %v", err1, err2)
			}
			// Spill files are per call: compare their shape, not their name.
			if (direct.SpillPath == "") != (remote.SpillPath == "") {
				t.Errorf("spill path: direct %q, remote %q", direct.SpillPath, remote.SpillPath)
			}
			direct.SpillPath, remote.SpillPath = "", ""
			if direct != remote {
				t.Errorf("direct %+v\nremote %+v", direct, remote)
			}
		})
	}
}

// TestErrorsRoundTrip: errors keep their class and their exact text.
func TestErrorsRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ctx := context.Background()

	_, err := a.client.Task(ctx, session, "nosuchid")
	wantClass(t, err, executor.ErrNotFound, "no such task: nosuchid")

	spec := a.spec(t, executor.Request{Command: "true", Workdir: "missing"})
	_, direct := a.exec.Run(ctx, spec)
	_, remote := a.client.Run(ctx, spec)
	wantClass(t, remote, executor.ErrInvalid, direct.Error())

	bad := a.spec(t, executor.Request{Command: "true"})
	bad.Session = "../x"
	_, remote = a.client.Run(ctx, bad)
	wantClass(t, remote, executor.ErrInvalid, `invalid session id "../x": want 1-64 letters, digits, '.', '_', '@', ':' or '-', starting with a letter or digit`)

	bg := a.spec(t, executor.Request{Command: "true", Background: true})
	bg.BufferBytes = 0
	_, remote = a.client.Start(ctx, bg)
	wantClass(t, remote, executor.ErrInvalid, "invalid spec: bufferBytes must be positive, got 0")

	noShell := a.spec(t, executor.Request{Command: "true"})
	noShell.Env = []string{"PATH=/nonexistent"}
	_, remote = a.client.Run(ctx, noShell)
	wantClass(t, remote, executor.ErrUnavailable, "bash not found on the command PATH (/nonexistent)")

	// A task of another session is an unknown task.
	tk, err := a.client.Start(ctx, a.spec(t, executor.Request{Command: "true", Background: true}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.client.Task(ctx, "other", tk.ID())
	wantClass(t, err, executor.ErrNotFound, "no such task: "+tk.ID())
	if _, err := a.client.Tasks(ctx, "../bad"); !errors.Is(err, executor.ErrInvalid) {
		t.Errorf("Tasks of a bad session: %v", err)
	}
}

// TestBackgroundRoundTrip: start, read with the cursor, list, wait, kill.
func TestBackgroundRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ctx := context.Background()
	tk, err := a.client.Start(ctx, a.spec(t, executor.Request{
		Command: "echo one; echo e1 >&2; while [ ! -e go ]; do sleep 0.01; done; echo two; exit 4", Background: true}))
	if err != nil {
		t.Fatal(err)
	}
	// stdout and stderr are separate pipes: wait for both.
	o := readUntil(t, tk, func(o executor.Output) bool { return o.Stdout != "" && o.Stderr != "" })
	if o.Stdout != "one\n" || o.Stderr != "e1\n" || o.Status.State != executor.Running {
		t.Errorf("first read %+v", o)
	}
	list, err := a.client.Tasks(ctx, session)
	if err != nil || len(list) != 1 || list[0].ID != tk.ID() || list[0].Session != session ||
		list[0].Status == nil || list[0].Status.State != executor.Running {
		t.Errorf("Tasks = %+v, %v", list, err)
	}
	touch(t, filepath.Join(a.root, "go"))
	res, err := tk.Wait(ctx)
	if err != nil || res.Stdout != "one\ntwo\n" || res.Stderr != "e1\n" || res.ExitCode != 4 {
		t.Errorf("Wait = %+v, %v", res, err)
	}
	o, err = tk.Read(ctx)
	want := executor.Output{Stdout: "two\n", Stderr: "", Status: executor.Status{State: executor.Completed, ExitCode: 4}}
	if err != nil || o != want {
		t.Errorf("last read %+v, %v; want %+v", o, err, want)
	}
	k, err := tk.Kill(ctx)
	if err != nil || !k.AlreadyDone || k.Status != want.Status {
		t.Errorf("Kill of a finished task = %+v, %v", k, err)
	}

	// Killing a running one.
	tk2, err := a.client.Start(ctx, a.spec(t, executor.Request{Command: "trap '' TERM; echo $$ > trapped; sleep 300", Background: true}))
	if err != nil {
		t.Fatal(err)
	}
	localtest.ReadPid(t, filepath.Join(a.root, "trapped"))
	k, err = tk2.Kill(ctx)
	if err != nil || k.AlreadyDone || k.Status.State != executor.Killed || k.Status.Signal != "SIGKILL" {
		t.Errorf("Kill = %+v, %v", k, err)
	}
	if !a.client.Has(ctx, session, executor.Bash) || a.client.Has(ctx, session, executor.Pwsh) {
		t.Error("Has: want bash and no pwsh")
	}
}

// TestWaitAborted: a wait long poll ends when its caller gives up, and the
// task goes on.
func TestWaitAborted(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	tk, err := a.client.Start(context.Background(), a.spec(t, executor.Request{Command: "sleep 300", Background: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Kill(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = tk.Wait(ctx)
	wantClass(t, err, executor.ErrAborted, "tool call aborted")
	o, err := tk.Read(context.Background())
	if err != nil || o.Status.State != executor.Running {
		t.Errorf("after the abandoned wait: %+v, %v", o, err)
	}
}

// TestRunCancelKillsTree: a caller that cancels gets "tool call aborted"
// only once the whole tree, SIGTERM-ignoring and setsid'd parts included, is
// gone.
func TestRunCancelKillsTree(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	spec := a.spec(t, executor.Request{Command: "trap '' TERM; sleep 300 & echo $! > child; " +
		"setsid sh -c 'echo $$ > gc; exec sleep 300' & echo $$ > leader; wait"})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := a.client.Run(ctx, spec)
		errc <- err
	}()
	pids := []int{localtest.ReadPid(t, filepath.Join(a.root, "leader")), localtest.ReadPid(t, filepath.Join(a.root, "child")), localtest.ReadPid(t, filepath.Join(a.root, "gc"))}
	cancel()
	err := <-errc
	wantClass(t, err, executor.ErrAborted, "tool call aborted")
	for _, pid := range pids {
		if !dead(pid) {
			t.Errorf("process %d alive when Run returned", pid)
		}
	}
}

// TestCancelOvertakesRun: a cancel that arrives before its run still
// cancels it.
func TestCancelOvertakesRun(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (netConn, error) {
		return dialUnix(ctx, a.socket)
	}}}
	resp, err := hc.Post("http://agent/v1/calls/early1/cancel", "", nil)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("cancel: %v %v", resp, err)
	}
	resp.Body.Close()
	b, _ := json.Marshal(a.spec(t, executor.Request{Command: "sleep 300"}))
	req, _ := http.NewRequest(http.MethodPost, "http://agent/v1/run", strings.NewReader(string(b)))
	req.Header.Set(agentapi.HeaderCall, "early1")
	start := time.Now()
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e agentapi.Error
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != agentapi.StatusClientClosed || e.Class != agentapi.ClassAborted || time.Since(start) > 10*time.Second {
		t.Errorf("run after its cancel: %d %+v after %s", resp.StatusCode, e, time.Since(start))
	}
}

// TestClientVanishes: a client that goes away mid-run (its process died)
// leaves nothing running: the agent kills the tree when the connection
// drops, and would at the command's timeout anyway.
func TestClientVanishes(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	const timeout = 5 * time.Second
	b, _ := json.Marshal(a.spec(t, executor.Request{Command: "trap '' TERM; setsid sh -c 'echo $$ > gc; exec sleep 300' & echo $$ > leader; wait", Timeout: timeout}))
	c := rawConn(t, a.socket)
	fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	leader, gc := localtest.ReadPid(t, filepath.Join(a.root, "leader")), localtest.ReadPid(t, filepath.Join(a.root, "gc"))
	dropped := time.Now()
	c.Close()
	for _, pid := range []int{leader, gc} {
		if !waitDead(pid, timeout+a.lim.Grace+2*time.Second) {
			t.Errorf("process %d outlived its vanished client and its timeout", pid)
		}
	}
	t.Logf("tree gone %s after the connection dropped (timeout %s)", time.Since(dropped).Round(time.Millisecond), timeout)
}

// TestBodyLimit: an oversized spec is refused as a limit, by name.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	spec := a.spec(t, executor.Request{Command: "true"})
	spec.Command = "# " + strings.Repeat("x", agentapi.MaxSpecBytes)
	_, err := a.client.Run(context.Background(), spec)
	wantClass(t, err, executor.ErrLimit, fmt.Sprintf("agent: request body over %d bytes", agentapi.MaxSpecBytes))
}

// TestUnknownEndpoint: answered with a JSON error, not net/http's text.
func TestUnknownEndpoint(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	c := rawConn(t, a.socket)
	defer c.Close()
	fmt.Fprintf(c, "GET /v2/nothing HTTP/1.1\r\nHost: agent\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"class":"invalid"`) || !strings.Contains(string(b), "no such endpoint: GET /v2/nothing") {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
}

// TestReadopt: a background task outlives its client (a server killed with
// -9); a new client finds it, reads what the old one had not, and its final
// status.
func TestReadopt(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ctx := context.Background()
	tk, err := a.client.Start(ctx, a.spec(t, executor.Request{
		Command: "echo before; while [ ! -e go ]; do sleep 0.01; done; echo after; echo oops >&2; exit 5", Background: true}))
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, tk, func(o executor.Output) bool { return o.Stdout == "before\n" })
	a.client.Close()

	c2, err := agentapi.Dial(ctx, a.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	list, err := c2.Tasks(ctx, session)
	if err != nil || len(list) != 1 || list[0].ID != tk.ID() {
		t.Fatalf("Tasks after the restart = %+v, %v", list, err)
	}
	touch(t, filepath.Join(a.root, "go"))
	tk2, err := c2.Task(ctx, session, tk.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tk2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	o, err := tk2.Read(ctx)
	want := executor.Output{Stdout: "after\n", Stderr: "oops\n", Status: executor.Status{State: executor.Completed, ExitCode: 5}}
	if err != nil || o != want {
		t.Errorf("Read by the new client = %+v, %v; want %+v", o, err, want)
	}
}

// TestUnreachable: a socket nobody listens on is ErrUnavailable, naming it.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(socketDir(t), "none.sock")
	_, err := agentapi.Dial(context.Background(), sock)
	if !errors.Is(err, executor.ErrUnavailable) || !strings.Contains(err.Error(), "agent at "+sock+": GET /v1/hello: dial unix") {
		t.Errorf("Dial: %v", err)
	}
}

func readUntil(t *testing.T, tk executor.Task, ok func(executor.Output) bool) executor.Output {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var acc executor.Output
	for time.Now().Before(deadline) {
		o, err := tk.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		acc.Stdout += o.Stdout
		acc.Stderr += o.Stderr
		acc.Status = o.Status
		if ok(acc) {
			return acc
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("task output never matched; last %+v", acc)
	return acc
}

// TestToken: an agent with a token refuses requests without it (or with
// another), and a client dialled with it is served.
func TestToken(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	e, err := local.New(local.Config{Root: root, Home: root, SpillDir: t.TempDir(), Limits: testLimits()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	srv, err := apiserver.NewServer(apiserver.ServerConfig{Runner: e, Agent: "test", Root: root, Home: root, Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	sock := serve(t, srv)
	ctx := context.Background()
	for _, token := range []string{"", "wrong", "s3cret-but-longer"} {
		_, err := agentapi.DialEndpoint(ctx, agentapi.Endpoint{Network: "unix", Address: sock, Token: token})
		if err == nil || !strings.Contains(err.Error(), "missing or wrong token") {
			t.Errorf("token %q: %v, want the refusal", token, err)
		}
	}
	c, err := agentapi.DialEndpoint(ctx, agentapi.Endpoint{Network: "unix", Address: sock, Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec, err := e.Resolve(ctx, executor.Request{Session: "s", Command: "echo ok"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(ctx, spec)
	if err != nil || res.Stdout != "ok\n" {
		t.Errorf("Run with the token: %+v, %v", res, err)
	}
}

// TestPeekRoundTrip: peeking over the protocol reads the output so far
// without moving the cursor the model's reads use.
func TestPeekRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ctx := context.Background()
	tk, err := a.client.Start(ctx, a.spec(t, executor.Request{
		Command: "echo one; echo e1 >&2; while [ ! -e go ]; do sleep 0.01; done; echo two", Background: true}))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := tk.(agentapi.Peeker)
	if !ok {
		t.Fatal("the agent's task cannot peek")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		o, err := p.Peek(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if o.Stdout == "one\n" && o.Stderr == "e1\n" && o.Status.State == executor.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peek: %+v", o)
		}
	}
	touch(t, filepath.Join(a.root, "go"))
	if _, err := tk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if o, err := p.Peek(ctx); err != nil || o.Stdout != "one\ntwo\n" || o.Status.State != executor.Completed {
		t.Errorf("peek after the end: %+v, %v", o, err)
	}
	if o, err := tk.Read(ctx); err != nil || o.Stdout != "one\ntwo\n" || o.Stderr != "e1\n" {
		t.Errorf("the first read after peeks: %+v, %v", o, err)
	}
}

// TestLogEndpoint: GET /v1/log serves ServerConfig.Log; without it the
// endpoint is as unknown as any other.
func TestLogEndpoint(t *testing.T) {
	e, err := local.New(local.Config{Root: t.TempDir(), SpillDir: t.TempDir(), Limits: testLimits()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	for _, tc := range []struct {
		log     func() string
		want    string
		wantErr string
	}{
		{func() string { return "line 1\nline 2\n" }, "line 1\nline 2\n", ""},
		{nil, "", "no such endpoint: GET /v1/log"},
	} {
		srv, err := apiserver.NewServer(apiserver.ServerConfig{Runner: e, Agent: "test", Log: tc.log})
		if err != nil {
			t.Fatal(err)
		}
		c, err := agentapi.Dial(context.Background(), serve(t, srv))
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Log(context.Background())
		c.Close()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Log without a log: %q, %v; want an error with %q", got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Log = %q, %v; want %q", got, err, tc.want)
		}
	}
}

// TestActivity: GET /v1/activity counts what runs, for the idle reaper: a
// background task until it ends, a foreground call while it is in flight,
// and nothing once both have ended.
func TestActivity(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ctx := context.Background()
	activity := func() agentapi.Activity {
		t.Helper()
		got, err := a.client.Activity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	waitFor := func(what string, ok func(agentapi.Activity) bool) agentapi.Activity {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got := activity()
			if ok(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: activity %+v", what, got)
			}
		}
	}
	if got := activity(); got != (agentapi.Activity{}) || got.Busy() != "" {
		t.Fatalf("an agent with nothing running: %+v (%q)", got, got.Busy())
	}
	tk, err := a.client.Start(ctx, a.spec(t, executor.Request{
		Command: "echo $$ > bg; while [ ! -e bg-go ]; do sleep 0.01; done", Background: true}))
	if err != nil {
		t.Fatal(err)
	}
	localtest.ReadPid(t, filepath.Join(a.root, "bg"))
	if got := activity(); got.Commands != 1 || got.Calls != 0 || got.Busy() != "1 command(s) running" {
		t.Errorf("with a background task: %+v (%q)", got, got.Busy())
	}
	// A foreground call in flight besides.
	done := make(chan error, 1)
	go func() {
		_, err := a.client.Run(ctx, a.spec(t, executor.Request{Command: "echo $$ > fg; while [ ! -e fg-go ]; do sleep 0.01; done"}))
		done <- err
	}()
	localtest.ReadPid(t, filepath.Join(a.root, "fg"))
	if got := activity(); got.Calls != 1 || got.Commands != 2 {
		t.Errorf("with a call in flight: %+v", got)
	}
	touch(t, filepath.Join(a.root, "fg-go"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor("after the call", func(got agentapi.Activity) bool { return got.Calls == 0 && got.Commands == 1 })
	touch(t, filepath.Join(a.root, "bg-go"))
	if _, err := tk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("after the task", func(got agentapi.Activity) bool { return got == agentapi.Activity{} })
}
