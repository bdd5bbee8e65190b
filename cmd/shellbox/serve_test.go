package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// served is a `shellbox serve` running in this process.
type served struct {
	url  string
	stop func() // SIGTERM-equivalent: cancels serve's context and waits
	// first is the first line of its log.
	first string
}

// startServe runs `shellbox serve --config file` in process and waits until
// it listens.
func startServe(t *testing.T, file string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := run(ctx, []string{"serve", "--config", file, "--listen", "127.0.0.1:0"}, strings.NewReader(""), io.Discard, pw)
		pw.Close()
		done <- code
	}()
	addr, first := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default:
			}
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				addr <- line.Addr
			} else if !strings.Contains(sc.Text(), `"msg":"request"`) {
				t.Logf("serve: %s", sc.Text())
			}
		}
	}()
	var a string
	select {
	case a = <-addr:
	case code := <-done:
		t.Fatalf("serve exited with %d", code)
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not listen")
	}
	stopped := false
	s := &served{url: "http://" + a, first: <-first, stop: func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited with %d", code)
		}
	}}
	t.Cleanup(s.stop)
	return s
}

const testToken = "serve-test-token"

func writeServeConfig(t *testing.T, extra string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "shellbox.yaml")
	cfg := fmt.Sprintf("server:\n  tenants:\n    acme:\n      tokens: [%q]\n%s", server.HashToken(testToken), extra)
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestCallThroughServer: `shellbox call --server` prints and exits exactly
// as the in-process call does.
func TestCallThroughServer(t *testing.T) {
	isolateLocal(t)
	s := startServe(t, writeServeConfig(t, ""))
	t.Setenv("SHELLBOX_TOKEN", testToken)
	for _, args := range [][]string{
		{"bash", `{"command":"echo hi; echo no >&2; exit 3","description":"mixed output"}`},
		{"bash", `{"command":`},
		{"bash", `{"command":["ls"],"description":"x"}`},
		{"zsh", `{}`},
		{"bash_output", `{"task_id":"abc"}`},
		{"bash", `{"command":"sleep 5","description":"wait","timeoutMs":200}`},
		{"--json", "bash", `{"command":"echo typed","description":"json output"}`},
	} {
		wantOut, _, wantCode := cli(t, "", append([]string{"call"}, args...)...)
		gotOut, gotErr, gotCode := cli(t, "", append([]string{"call", "--server", s.url, "--session", "default"}, args...)...)
		if gotOut != wantOut || gotCode != wantCode {
			t.Errorf("call %v:\nserver: %q (exit %d, stderr %q)\nlocal:  %q (exit %d)", args, gotOut, gotCode, gotErr, wantOut, wantCode)
		}
	}
}

// TestServeInClientShell: `shellbox serve` starts in a shell where the
// client's variables are set (SHELLBOX_SERVER once stopped it with
// `config: server: logLevel ""`), answers /readyz, and a client in that
// shell reaches it. A key's own variable (SHELLBOX_BACKEND, as the compose
// file sets it) still applies beside them.
func TestServeInClientShell(t *testing.T) {
	isolate(t)
	t.Setenv(config.EnvServer, "http://127.0.0.1:1")
	t.Setenv(config.EnvToken, testToken)
	t.Setenv("SHELLBOX_BACKEND", "local")
	s := startServe(t, writeServeConfig(t, ""))
	var line struct{ Backend, Chosen string }
	if json.Unmarshal([]byte(s.first), &line) != nil || line.Backend != "local" || line.Chosen != "configured" {
		t.Errorf("SHELLBOX_BACKEND=local: first line of the log: %s", s.first)
	}
	resp, err := http.Get(s.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), `{"status":"ready"`) {
		t.Errorf("readyz: %d %s", resp.StatusCode, body)
	}
	out, errs, code := cli(t, "", "call", "--server", s.url, "--session", "s1", "bash", `{"command":"echo served","description":"reach the server"}`)
	if code != 0 || out != "served\n" {
		t.Fatalf("call: %q (exit %d, %s)", out, code, errs)
	}
}

// TestServeLocalUnsandboxed: a server on the local backend warns at start
// and in /readyz's answer that its commands run unsandboxed.
func TestServeLocalUnsandboxed(t *testing.T) {
	isolate(t)
	s := startServe(t, writeServeConfig(t, "backend: local\n"))
	var line struct{ Level, Msg, Backend string }
	if json.Unmarshal([]byte(s.first), &line) != nil || line.Level != "WARN" || line.Backend != "local" ||
		!strings.HasPrefix(line.Msg, "backend local: commands run unsandboxed on this host") {
		t.Errorf("first line of the log: %s", s.first)
	}
	resp, err := http.Get(s.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := `{"status":"ready","unsandboxed":"commands run on the server's host, unsandboxed, as the server's user"}` + "\n"
	if resp.StatusCode != 200 || string(body) != want {
		t.Errorf("readyz: %d %s, want 200 %s", resp.StatusCode, body, want)
	}
}

// TestClientCommands: sessions ls|rm, events and approvals against a server.
func TestClientCommands(t *testing.T) {
	isolateLocal(t)
	s := startServe(t, writeServeConfig(t, ""))
	t.Setenv("SHELLBOX_SERVER", s.url)
	t.Setenv("SHELLBOX_TOKEN", testToken)

	// events follows the stream until its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	evDone := make(chan int, 1)
	go func() {
		evDone <- run(ctx, []string{"events", "s1"}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	time.Sleep(200 * time.Millisecond) // let the subscription start
	out, _, code := cli(t, "", "call", "--session", "s1", "bash", `{"command":"exit 7","description":"end at once","run_in_background":true}`)
	if code != 0 || !strings.HasPrefix(out, "started background task ") {
		t.Fatalf("start: %q %d", out, code)
	}
	id := strings.TrimSpace(strings.TrimPrefix(out, "started background task "))
	select {
	case l := <-lines:
		if !strings.Contains(l, `"type":"notice"`) || !strings.Contains(l, "background task "+id+" completed, exit code: 7") {
			t.Fatalf("event line: %s", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event")
	}
	cancel()
	if c := <-evDone; c != 0 {
		t.Errorf("events exited %d", c)
	}

	out, _, code = cli(t, "", "sessions", "ls")
	if code != 0 || !strings.Contains(out, "acme    s1") {
		t.Fatalf("sessions ls: %q %d", out, code)
	}
	if out, _, code = cli(t, "", "sessions", "rm", "s1"); code != 0 || out != "removed s1\n" {
		t.Fatalf("sessions rm: %q %d", out, code)
	}
	if _, errs, code := cli(t, "", "sessions", "rm", "s1"); code != 1 || !strings.Contains(errs, "no such session: s1") {
		t.Fatalf("sessions rm again: %q %d", errs, code)
	}
	if out, _, code = cli(t, "", "approvals", "ls"); code != 0 || !strings.HasPrefix(out, "ID") {
		t.Fatalf("approvals ls: %q %d", out, code)
	}
	if _, errs, code := cli(t, "", "approvals", "approve", "nope"); code != 2 || !strings.Contains(errs, "no such approval: nope") {
		t.Fatalf("approvals approve: %q %d", errs, code)
	}
	t.Setenv("SHELLBOX_TOKEN", "wrong")
	if _, errs, code := cli(t, "", "sessions", "ls"); code != 2 || !strings.Contains(errs, "invalid bearer token") {
		t.Fatalf("wrong token: %q %d", errs, code)
	}
}

// TestExampleConfig: the commented example in deploy/ loads strictly.
func TestExampleConfig(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cfg, err := config.Load(nil, "../../deploy/shellbox.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	acme := cfg.Server.Tenants["acme"]
	if len(acme.Tokens) != 1 || acme.MaxConcurrentCalls != 16 || len(acme.Runtimes) != 2 || cfg.Server.IdleTTL != 2*time.Hour {
		t.Fatalf("%+v", cfg.Server)
	}
	if len(acme.Images) == 0 || len(acme.Runtimes) != 2 {
		t.Fatalf("acme's choices: images %v runtimes %v", acme.Images, acme.Runtimes)
	}
}

// TestMCPCommand: `shellbox mcp` serves the tools over stdin/stdout to the
// official MCP client, as the configured tenant and session. --backend
// local runs with no engine anywhere, and the first line of its log says
// that commands run unsandboxed.
func TestMCPCommand(t *testing.T) {
	isolate(t)
	noEngines(t)
	cr, sw := io.Pipe() // server's stdout → client
	sr, cw := io.Pipe() // client → server's stdin
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		done <- run(ctx, []string{"mcp", "--backend", "local", "--session", "stdio1"}, sr, sw, &stderr)
		sw.Close()
	}()
	c := mcp.NewClient(&mcp.Implementation{Name: "stdio", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) < 3 {
		t.Fatalf("tools: %v %+v", err, list)
	}
	r, err := client.CallMCP(ctx, cs, "bash", json.RawMessage(`{"command":"echo $DSH_SESSION_ID; exit 2","description":"print session"}`))
	if err != nil || r.Text != "stdio1\n[exit code: 2]" || r.IsError {
		t.Fatalf("call: %v %+v", err, r)
	}
	if fg, ok := r.Value.(*tools.Foreground); !ok || fg.ExitCode != 2 {
		t.Fatalf("typed: %#v", r.Value)
	}
	cs.Close()
	cw.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("shellbox mcp exited %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("shellbox mcp did not exit when its client left")
	}
	first, _, _ := strings.Cut(stderr.String(), "\n")
	var line struct{ Level, Msg, Backend string }
	if json.Unmarshal([]byte(first), &line) != nil || line.Level != "WARN" || line.Backend != "local" ||
		!strings.HasPrefix(line.Msg, "backend local: commands run unsandboxed on this host, as ") {
		t.Errorf("first line of the log: %s", first)
	}
}
