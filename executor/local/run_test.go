package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

func TestRunStatus(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	tests := []struct {
		name           string
		command        string
		stdout, stderr string
		exit           int
		signal         string
	}{
		{"stdout", "echo hi", "hi\n", "", 0, ""},
		{"stderr and exit code", "echo out; echo err >&2; exit 3", "out\n", "err\n", 3, ""},
		{"no output", "true", "", "", 0, ""},
		{"exit code above 128 is a code", "exit 200", "", "", 200, ""},
		{"SIGKILL by name", "kill -9 $$", "", "", -1, "SIGKILL"},
		{"SIGTERM by name", "echo before; kill -TERM $$; echo after", "before\n", "", -1, "SIGTERM"},
		{"child killed is an exit code of the shell", "exec 2>/dev/null; sh -c 'kill -9 $$'; exit $?", "", "", 137, ""},
		{"stdin is /dev/null", "cat; echo done", "done\n", "", 0, ""},
		{"not a login shell", "shopt -q login_shell && echo login || echo plain", "plain\n", "", 0, ""},
		{"own process group", `read -r _ _ _ _ pgrp _ < /proc/$$/stat; [ "$pgrp" = "$$" ] && echo leader`, "leader\n", "", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, e, executor.Request{Command: tt.command})
			if res.Stdout != tt.stdout || res.Stderr != tt.stderr || res.ExitCode != tt.exit || res.Signal != tt.signal {
				t.Errorf("got stdout %q stderr %q exit %d signal %q; want %q %q %d %q",
					res.Stdout, res.Stderr, res.ExitCode, res.Signal, tt.stdout, tt.stderr, tt.exit, tt.signal)
			}
			if res.TimedOut || res.Truncated || res.SpillPath != "" || res.SpillError != "" {
				t.Errorf("unexpected markers: %+v", res)
			}
			if res.TimeoutMs != 20000 {
				t.Errorf("TimeoutMs = %d, want the default 20000", res.TimeoutMs)
			}
		})
	}
}

// TestRunEnvironment checks that a command sees exactly the spec's
// environment (plus PWD and what bash itself sets), never the server's.
func TestRunEnvironment(t *testing.T) {
	t.Setenv("SHELLBOX_SERVER_SECRET", "leak")
	e := newExec(t, CgroupAuto)
	res := run(t, e, executor.Request{
		Command: "env -0",
		Env:     map[string]string{"DSH_SHELL": "1", "FOO": "bar baz"},
	})
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(res.Stdout, "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	root := e.cfg.Root
	want := map[string]string{
		"PATH":      DefaultPath,
		"HOME":      root,
		"DSH_HOME":  root,
		"LANG":      "C.UTF-8",
		"DSH_SHELL": "1",
		"FOO":       "bar baz",
		"PWD":       root,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	// bash adds SHLVL and _ on its own; nothing else may appear.
	for k := range got {
		if _, ok := want[k]; !ok && k != "SHLVL" && k != "_" {
			t.Errorf("unexpected variable %s=%q", k, got[k])
		}
	}
}

func TestRunTimeout(t *testing.T) {
	t.Parallel()
	for _, mode := range modes(t) {
		e := newExec(t, mode)
		// Commands that set a trap get a longer timeout, so that even a
		// loaded machine sets it before the timer fires.
		tests := []struct {
			name    string
			command string
			timeout time.Duration
			exit    int
			signal  string
		}{
			{"plain sleep dies of SIGTERM", "sleep 100", 300 * time.Millisecond, -1, "SIGTERM"},
			{"trap exit 0 exits 0", "trap 'exit 0' TERM; sleep 100", time.Second, 0, ""},
			{"ignored SIGTERM ends in SIGKILL", "trap '' TERM; sleep 100", time.Second, -1, "SIGKILL"},
			{"exit code from a trap", "trap 'exit 7' TERM; sleep 100 & wait", time.Second, 7, ""},
			// Every process gets SIGTERM once: twice would run the trap twice.
			{"trap runs once", "trap 'echo caught; exit 0' TERM; sleep 100 & wait", time.Second, 0, ""},
		}
		for _, tt := range tests {
			t.Run(string(mode)+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				res := run(t, e, executor.Request{Command: tt.command, Timeout: tt.timeout})
				if !res.TimedOut || res.TimeoutMs != tt.timeout.Milliseconds() {
					t.Errorf("TimedOut %v TimeoutMs %d, want true %d", res.TimedOut, res.TimeoutMs, tt.timeout.Milliseconds())
				}
				if res.ExitCode != tt.exit || res.Signal != tt.signal {
					t.Errorf("exit %d signal %q, want %d %q", res.ExitCode, res.Signal, tt.exit, tt.signal)
				}
				if strings.Contains(tt.command, "echo caught") && res.Stdout != "caught\n" {
					t.Errorf("stdout %q, want the trap's output once", res.Stdout)
				}
			})
		}
	}
}

// TestRunLeftovers checks that when the leader exits, whatever it left
// running is ended and the call returns with every byte the leader wrote,
// without waiting for the leftovers.
func TestRunLeftovers(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	tests := []struct {
		name    string
		command string
		stdout  string
	}{
		{"background job holding the pipe", "sleep 100 & echo done", "done\n"},
		{"subshell that would print later", "(sleep 5; echo late) & echo early", "early\n"},
		{"job ignoring SIGTERM", "(trap '' TERM; sleep 100) & echo ok", "ok\n"},
		{"last output before exit is kept", "sleep 100 & for i in 1 2 3; do echo $i; done", "1\n2\n3\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			done := make(chan executor.Result)
			go func() { done <- run(t, e, executor.Request{Command: tt.command}) }()
			select {
			case res := <-done:
				if res.Stdout != tt.stdout || res.ExitCode != 0 || res.Signal != "" || res.TimedOut {
					t.Errorf("got %+v, want stdout %q and a clean exit", res, tt.stdout)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Run still waiting on a leftover process")
			}
		})
	}
}

func TestRunAborted(t *testing.T) {
	t.Parallel()
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, mode)
			pidFile := filepath.Join(e.cfg.Root, "pid")
			spec, err := e.Resolve(context.Background(), executor.Request{
				Session: session,
				Command: "trap '' TERM; sleep 100 & echo $! > pid; wait",
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error)
			go func() {
				_, err := e.Run(ctx, spec)
				errc <- err
			}()
			pid := readPid(t, pidFile)
			cancel()
			err = <-errc
			if !errors.Is(err, executor.ErrAborted) || err.Error() != "tool call aborted" {
				t.Fatalf("Run = %v, want tool call aborted", err)
			}
			if !dead(pid) {
				t.Errorf("child %d outlived the aborted call", pid)
			}
		})
	}
}

func TestRunCancelledBeforeStart(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	spec, err := e.Resolve(context.Background(), executor.Request{Session: session, Command: "touch ran"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Run(ctx, spec); !errors.Is(err, executor.ErrAborted) {
		t.Fatalf("Run = %v, want aborted", err)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.Root, "ran")); err == nil {
		t.Error("the command ran")
	}
}

func TestRunRejectsBadSpecs(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupOff)
	good, err := e.Resolve(context.Background(), executor.Request{Session: session, Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mut  func(*executor.Spec)
		want string
	}{
		{"bad session", func(s *executor.Spec) { s.Session = "../x" }, "invalid session id"},
		{"relative root", func(s *executor.Spec) { s.Root = "x" }, "root must be"},
		{"relative workdir", func(s *executor.Spec) { s.Workdir = "x" }, "workdir must be"},
		{"no tail", func(s *executor.Spec) { s.TailBytes = 0 }, "tailBytes"},
		{"background spec", func(s *executor.Spec) { s.Background = true }, "Start"},
		{"unknown shell", func(s *executor.Spec) { s.Shell = "zsh" }, "unknown shell"},
		{"interpreter missing", func(s *executor.Spec) { s.Env = []string{"PATH=/nonexistent"} }, "bash not found on the command PATH (/nonexistent)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := good
			spec.Env = slices.Clone(good.Env)
			tt.mut(&spec)
			_, err := e.Run(context.Background(), spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestHas(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "pwsh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := newExec(t, CgroupOff)
	withPwsh := newExec(t, CgroupOff, func(c *Config) {
		c.BaseEnv = []string{"PATH=" + bin + ":" + DefaultPath}
	})
	ctx := context.Background()
	if !plain.Has(ctx, session, executor.Bash) {
		t.Error("bash not found")
	}
	if _, err := os.Stat("/usr/bin/pwsh"); err != nil && plain.Has(ctx, session, executor.Pwsh) {
		t.Error("pwsh reported without a pwsh on the PATH")
	}
	if !withPwsh.Has(ctx, session, executor.Pwsh) {
		t.Error("pwsh on the command PATH not found")
	}
}

// TestCredential runs a command as nobody, as the in-sandbox agent does.
func TestCredential(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	e := newExec(t, CgroupAuto, func(c *Config) {
		c.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
	})
	// t.TempDir's parent is 0700; the command's user must reach its root.
	os.Chmod(filepath.Dir(e.cfg.Root), 0o755)
	res := run(t, e, executor.Request{Command: "id -u; id -g; pwd"})
	if want := "65534\n65534\n" + e.cfg.Root + "\n"; res.Stdout != want {
		t.Errorf("stdout %q stderr %q, want %q", res.Stdout, res.Stderr, want)
	}
}

// TestOOMScoreAdj checks that each command's score is raised right after it
// starts.
func TestOOMScoreAdj(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto, func(c *Config) { c.OOMScoreAdj = 500 })
	tk := start(t, e, executor.Request{Command: "sleep 100"})
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tk.(*task).p.pid) + "/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(b)) != "500" {
		t.Errorf("oom_score_adj = %q, want 500", b)
	}
	tk.Kill(context.Background())
}
