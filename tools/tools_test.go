package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

func call(t *testing.T, ts *Toolset, tool, args string) Result {
	t.Helper()
	return ts.Call(context.Background(), Invocation{Session: "s1", Tool: tool, Args: json.RawMessage(args)})
}

func newSet(t *testing.T, f *fakeExec, cfg Config) *Toolset {
	t.Helper()
	ts, err := New(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Close)
	return ts
}

func TestValidationMessages(t *testing.T) {
	cases := []struct {
		tool, args, want string
	}{
		{"bash", `{}`, "Error: invalid command: expected a non-empty string"},
		{"bash", ``, "Error: invalid command: expected a non-empty string"},
		{"bash", `{"command":""}`, "Error: invalid command: expected a non-empty string"},
		{"bash", `{"command":"   "}`, "Error: invalid command: expected a non-empty string"},
		{"bash", `{"command":5}`, "Error: invalid command: expected a non-empty string"},
		{"bash", `{"command":null}`, "Error: invalid command: expected a non-empty string"},
		{"bash", `{"command":"ls"}`, "Error: invalid description: expected a non-empty string"},
		{"bash", `{"command":"ls","description":["x"]}`, "Error: invalid description: expected a non-empty string"},
		{"bash", `{"command":"ls","description":"list","timeoutMs":0}`, "Error: invalid timeoutMs: expected a positive number, got 0"},
		{"bash", `{"command":"ls","description":"list","timeoutMs":-5}`, "Error: invalid timeoutMs: expected a positive number, got -5"},
		{"bash", `{"command":"ls","description":"list","timeoutMs":"100"}`, `Error: invalid timeoutMs: expected a positive number, got "100"`},
		{"bash", `{"command":"ls","description":"list","timeoutMs":true}`, "Error: invalid timeoutMs: expected a positive number, got true"},
		{"bash", `{"command":"ls","description":"list","workdir":7}`, "Error: invalid workdir: expected a string, got 7"},
		{"bash", `{"command":"rm -rf x\u0000","description":"list"}`, "Error: invalid command: contains a NUL byte"},
		{"bash", `{"command":"\u0000","description":"list"}`, "Error: invalid command: contains a NUL byte"},
		{"bash", `{"command":"ls","description":"li\u0000st"}`, "Error: invalid description: contains a NUL byte"},
		{"bash", `{"command":"ls","description":"list","workdir":"a\u0000b"}`, "Error: invalid workdir: contains a NUL byte"},
		{"bash", `{"command":"ls","description":"list","sandbox_permissions":["net\u0000"],"justification":"j"}`, "Error: invalid sandbox_permissions: contains a NUL byte"},
		{"bash", `{"command":"ls","description":"list","sandbox_permissions":["network"],"justification":"j\u0000"}`, "Error: invalid justification: contains a NUL byte"},
		{"pwsh", `{"command":"Get-Item\u0000","description":"list"}`, "Error: invalid command: contains a NUL byte"},
		{"bash", `{"command":"ls","description":"list","run_in_background":"yes"}`, `Error: invalid run_in_background: expected a boolean, got "yes"`},
		{"bash", `{"command":"ls","description":"list","sandbox_permissions":"network"}`, `Error: invalid sandbox_permissions: expected an array of strings, got "network"`},
		{"bash", `{"command":"ls","description":"list","sandbox_permissions":["network"]}`, "Error: invalid justification: expected a non-empty string with sandbox_permissions"},
		{"bash", `{"command":"ls","description":"list","cmd":"x"}`, `Error: invalid arguments: unknown argument "cmd"`},
		{"bash", `{"command":"ls"`, "Error: invalid arguments: malformed JSON: unexpected end of JSON input (at byte 15)"},
		{"bash", `[1,2]`, "Error: invalid arguments: expected a JSON object, got [1,2]"},
		{"bash", `{"command":"ls","description":"x"} {}`, "Error: invalid arguments: malformed JSON: unexpected data after the object"},
		{"pwsh", `{"command":"ls","description":"list","sandbox_permissions":["network"],"justification":"j"}`, `Error: invalid arguments: unknown argument "justification"`},
		{"bash_output", `{}`, "Error: invalid task_id: expected a non-empty string"},
		{"bash_output", `{"task_id":3}`, "Error: invalid task_id: expected a non-empty string"},
		{"bash_kill", `{"task_id":""}`, "Error: invalid task_id: expected a non-empty string"},
		{"bash_output", `{"task_id":"nope"}`, "Error: no such task: nope"},
		{"bash_kill", `{"task_id":"nope"}`, "Error: no such task: nope"},
		{"rm_rf", `{}`, "Error: unknown tool: rm_rf"},
	}
	f := newFake()
	f.pwsh = true
	ts := newSet(t, f, Config{})
	for _, c := range cases {
		r := call(t, ts, c.tool, c.args)
		if r.Text != c.want || !r.IsError {
			t.Errorf("%s %s:\n got %q (isError=%v)\nwant %q", c.tool, c.args, r.Text, r.IsError, c.want)
		}
		ev, ok := r.Value.(*ErrorValue)
		if !ok || "Error: "+ev.Message != c.want || ev.Kind != "error" {
			t.Errorf("%s %s: typed value %#v", c.tool, c.args, r.Value)
		}
	}
}

func TestForegroundRequest(t *testing.T) {
	f := newFake()
	f.result = executor.Result{Stdout: "hi\n", ExitCode: 4}
	ts := newSet(t, f, Config{Home: "/home/sandbox", Facts: map[string]string{"DSH_REGION": "eu"}})
	r := call(t, ts, "bash", `{"command":"echo hi","description":"say hi","timeoutMs":1500.2,"workdir":"sub"}`)
	if r.IsError || r.Text != "hi\n[exit code: 4]" {
		t.Fatalf("got %q", r.Text)
	}
	fg, ok := r.Value.(*Foreground)
	if !ok || fg.Kind != "foreground" || fg.ExitCode != 4 || fg.Stdout != "hi\n" {
		t.Fatalf("typed: %#v", r.Value)
	}
	s := f.last
	if s.Command != "echo hi" || s.Workdir != "/workspace/sub" || s.Timeout != 1501*time.Millisecond || s.Shell != executor.Bash {
		t.Fatalf("spec: %+v", s)
	}
	env := strings.Join(s.Env, "\n")
	for _, kv := range []string{"DSH_SHELL=1", "DSH_SESSION_ID=s1", "DSH_HOME=/home/sandbox", "DSH_REGION=eu", "PATH=/usr/bin:/bin"} {
		if !strings.Contains(env, kv) {
			t.Errorf("env lacks %s: %v", kv, s.Env)
		}
	}
	// The timeout cap and default come from the executor.
	call(t, ts, "bash", `{"command":"x","description":"d","timeoutMs":1e300}`)
	if f.last.Timeout != 600*time.Second {
		t.Fatalf("cap: %v", f.last.Timeout)
	}
	call(t, ts, "bash", `{"command":"x","description":"d","timeoutMs":null}`)
	if f.last.Timeout != 120*time.Second {
		t.Fatalf("default: %v", f.last.Timeout)
	}
}

func TestPwsh(t *testing.T) {
	f := newFake()
	ts := newSet(t, f, Config{})
	if r := call(t, ts, "pwsh", `{"command":"Get-Date","description":"show date"}`); r.Text != "Error: pwsh is not available in this session's image" {
		t.Fatalf("got %q", r.Text)
	}
	for _, d := range ts.Definitions(context.Background(), "s1") {
		if d.Name == ToolPwsh {
			t.Fatal("pwsh offered without pwsh")
		}
	}
	f.pwsh = true
	r := call(t, ts, "pwsh", `{"command":"Get-Date","description":"show date"}`)
	if r.IsError || f.last.Shell != executor.Pwsh {
		t.Fatalf("got %q, shell %q", r.Text, f.last.Shell)
	}
	if got := strings.Join(executor.Pwsh.Argv("Get-Date"), " "); got != "pwsh -NoProfile -NonInteractive -Command Get-Date" {
		t.Fatalf("argv %q", got)
	}
}

func TestSchemasGolden(t *testing.T) {
	for _, bg := range []bool{true, false} {
		ts := newSet(t, newFake(), Config{DisableRunInBackground: !bg})
		b, err := json.MarshalIndent(ts.AllDefinitions(), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		name := "schemas"
		if !bg {
			name = "schemas-nobackground"
		}
		golden(t, name, string(b)+"\n")
		for _, d := range ts.AllDefinitions() {
			var v map[string]any
			if err := json.Unmarshal(d.InputSchema, &v); err != nil {
				t.Fatalf("%s: schema is not JSON: %v", d.Name, err)
			}
			props := v["properties"].(map[string]any)
			if d.Name == ToolBashOutput || d.Name == ToolBashKill {
				continue
			}
			if _, has := props["run_in_background"]; has != bg {
				t.Errorf("%s: run_in_background present=%v with background=%v", d.Name, has, bg)
			}
			fn := d.Function()["function"].(map[string]any)
			if fn["name"] != d.Name {
				t.Errorf("function form: %v", fn)
			}
		}
	}
}

func TestBackgroundDisabled(t *testing.T) {
	ts := newSet(t, newFake(), Config{DisableRunInBackground: true})
	r := call(t, ts, "bash", `{"command":"sleep 1","description":"wait","run_in_background":true}`)
	if r.Text != "Error: run_in_background is disabled for this deployment (enableRunInBackground: false)" {
		t.Fatalf("got %q", r.Text)
	}
	if r := call(t, ts, "bash", `{"command":"true","description":"noop","run_in_background":false}`); r.IsError {
		t.Fatalf("explicit false rejected: %q", r.Text)
	}
	if r := call(t, ts, "bash_output", `{"task_id":"x"}`); r.Text != "Error: unknown tool: bash_output" {
		t.Fatalf("got %q", r.Text)
	}
}

func TestBackgroundAndNotices(t *testing.T) {
	f := newFake()
	var got []Notice
	noticed := make(chan struct{}, 4)
	ts := newSet(t, f, Config{OnNotice: func(s string, n Notice) { got = append(got, n); noticed <- struct{}{} }})
	r := call(t, ts, "bash", `{"command":"sleep 1","description":"wait","run_in_background":true}`)
	if r.Text != "started background task t1" {
		t.Fatalf("got %q", r.Text)
	}
	if bg, ok := r.Value.(*Background); !ok || bg.TaskID != "t1" || bg.Kind != "background" {
		t.Fatalf("typed: %#v", r.Value)
	}
	if f.last.Timeout != 0 || !f.last.Background {
		t.Fatalf("background spec: %+v", f.last)
	}
	// Another session cannot see it.
	other := ts.Call(context.Background(), Invocation{Session: "s2", Tool: "bash_output", Args: json.RawMessage(`{"task_id":"t1"}`)})
	if other.Text != "Error: no such task: t1" {
		t.Fatalf("cross-session: %q", other.Text)
	}
	f.tasks["t1"].out.Stdout = "partial\n"
	if r := call(t, ts, "bash_output", `{"task_id":"t1"}`); r.Text != "partial\nstatus: running" {
		t.Fatalf("got %q", r.Text)
	}
	f.tasks["t1"].end(executor.Result{ExitCode: 0}, executor.Status{State: executor.Completed})
	<-noticed
	r = call(t, ts, "bash", `{"command":"true","description":"noop"}`)
	if len(r.Notices) != 1 || r.Notices[0].Text != "background task t1 completed, exit code: 0" {
		t.Fatalf("notices: %+v", r.Notices)
	}
	if r := call(t, ts, "bash", `{"command":"true","description":"noop"}`); len(r.Notices) != 0 {
		t.Fatalf("notice delivered twice: %+v", r.Notices)
	}
	if len(got) != 1 {
		t.Fatalf("OnNotice: %+v", got)
	}
	if r := call(t, ts, "bash_kill", `{"task_id":"t1"}`); r.Text != "task t1 already completed, exit code: 0" {
		t.Fatalf("got %q", r.Text)
	}

	// A task whose end the model saw through bash_kill gets no notice.
	call(t, ts, "bash", `{"command":"sleep 1","description":"wait","run_in_background":true}`)
	if r := call(t, ts, "bash_kill", `{"task_id":"t2"}`); r.Text != "killed background task t2" {
		t.Fatalf("got %q", r.Text)
	}
	ts.Close()
	if r := call(t, ts, "bash", `{"command":"true","description":"noop"}`); len(r.Notices) != 0 {
		t.Fatalf("seen task noticed: %+v", r.Notices)
	}
}

// TestNoticeOfInstantTask: a task that ends before its start is answered
// gets its notice on the session's next result, never on the ack that
// carries its id.
func TestNoticeOfInstantTask(t *testing.T) {
	f := newFake()
	f.instant = true
	noticed := make(chan string, 1)
	ts := newSet(t, f, Config{OnNotice: func(s string, n Notice) { noticed <- n.TaskID }})
	for i := 0; i < 200; i++ {
		r := call(t, ts, "bash", `{"command":"true","description":"instant","run_in_background":true}`)
		bg, ok := r.Value.(*Background)
		if !ok {
			t.Fatalf("not a background result: %q", r.Text)
		}
		for _, n := range r.Notices {
			if n.TaskID == bg.TaskID {
				t.Fatalf("the ack of %s carries its own notice", bg.TaskID)
			}
		}
		if id := <-noticed; id != bg.TaskID {
			t.Fatalf("noticed %s, want %s", id, bg.TaskID)
		}
		r = call(t, ts, "bash", `{"command":"true","description":"noop"}`)
		if len(r.Notices) != 1 || r.Notices[0].TaskID != bg.TaskID {
			t.Fatalf("next result's notices: %+v, want %s's", r.Notices, bg.TaskID)
		}
	}
}

// TestNULNeverReachesTheGate: arguments with a NUL byte are refused in
// validation, so no policy decides on (or audits) a command that is not the
// one that would run.
func TestNULNeverReachesTheGate(t *testing.T) {
	g := &countGate{}
	f := newFake()
	f.pwsh = true
	ts := newSet(t, f, Config{Gate: g})
	for _, args := range []string{
		`{"command":"echo a\u0000; rm -rf /","description":"d"}`,
		`{"command":"ls","description":"d","workdir":"/tmp\u0000/x"}`,
	} {
		for _, tool := range []string{"bash", "pwsh"} {
			if r := call(t, ts, tool, args); !r.IsError || !strings.Contains(r.Text, "contains a NUL byte") {
				t.Errorf("%s %s: %q", tool, args, r.Text)
			}
		}
	}
	if len(g.seen) != 0 {
		t.Fatalf("the gate saw %d calls with a NUL byte", len(g.seen))
	}
}

// countGate records the RunningTasks of each call it sees.
type countGate struct{ seen []int }

func (g *countGate) Check(ctx context.Context, c Call) (executor.Request, error) {
	g.seen = append(g.seen, c.RunningTasks)
	return c.Request, nil
}

// TestGateSeesRunningTasks: the Gate is told how many of the session's
// background tasks run, for a per-session quota.
func TestGateSeesRunningTasks(t *testing.T) {
	f := newFake()
	g := &countGate{}
	ts := newSet(t, f, Config{Gate: g})
	call(t, ts, "bash", `{"command":"sleep 1","description":"a","run_in_background":true}`)
	call(t, ts, "bash", `{"command":"sleep 1","description":"b","run_in_background":true}`)
	call(t, ts, "bash", `{"command":"true","description":"c"}`)
	f.tasks["t1"].end(executor.Result{}, executor.Status{State: executor.Completed})
	for deadline := time.Now().Add(5 * time.Second); ts.running("s1") != 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	call(t, ts, "bash", `{"command":"true","description":"d"}`)
	if want := []int{0, 1, 2, 1}; !slices.Equal(g.seen, want) {
		t.Errorf("RunningTasks seen %v, want %v", g.seen, want)
	}
}

// TestWatchAdoptedTask: a task started elsewhere (a previous process) gets
// its notice once, however often it is handed to Watch.
func TestWatchAdoptedTask(t *testing.T) {
	f := newFake()
	noticed := make(chan string, 4)
	ts := newSet(t, f, Config{OnNotice: func(s string, n Notice) { noticed <- n.Text }})
	task := &fakeTask{id: "old1", session: "s1", done: make(chan struct{}),
		out: executor.Output{Status: executor.Status{State: executor.Running}}}
	ts.Watch("s1", task)
	ts.Watch("s1", task)
	task.end(executor.Result{ExitCode: 5}, executor.Status{State: executor.Completed, ExitCode: 5})
	if got := <-noticed; got != "background task old1 completed, exit code: 5" {
		t.Fatalf("notice %q", got)
	}
	r := call(t, ts, "bash", `{"command":"true","description":"noop"}`)
	if len(r.Notices) != 1 || r.Notices[0].TaskID != "old1" {
		t.Fatalf("notices %+v", r.Notices)
	}
	select {
	case n := <-noticed:
		t.Fatalf("a second notice: %q", n)
	case <-time.After(100 * time.Millisecond):
	}
}

type denyGate struct{}

func (denyGate) Check(ctx context.Context, c Call) (executor.Request, error) {
	if strings.Contains(c.Request.Command, "rm") {
		return c.Request, errors.New("denied by policy acme/no-rm: deleting files is not allowed")
	}
	c.Request.Env["LANG"] = "C"
	c.Request.Env["DSH_SESSION_ID"] = "forged"
	return c.Request, nil
}

func TestGate(t *testing.T) {
	f := newFake()
	ts := newSet(t, f, Config{Gate: denyGate{}})
	if r := call(t, ts, "bash", `{"command":"rm -rf /","description":"wipe"}`); r.Text != "Error: denied by policy acme/no-rm: deleting files is not allowed" {
		t.Fatalf("got %q", r.Text)
	}
	call(t, ts, "bash", `{"command":"ls","description":"list"}`)
	env := strings.Join(f.last.Env, "\n")
	if !strings.Contains(env, "LANG=C") || !strings.Contains(env, "DSH_SESSION_ID=s1") || strings.Contains(env, "forged") {
		t.Fatalf("env: %v", f.last.Env)
	}
}

func TestInfrastructureErrors(t *testing.T) {
	f := newFake()
	ts := newSet(t, f, Config{})
	f.err = executor.Aborted()
	if r := call(t, ts, "bash", `{"command":"sleep 9","description":"wait"}`); r.Text != "Error: tool call aborted" {
		t.Fatalf("got %q", r.Text)
	}
	f.err = executor.Errorf(executor.ErrUnavailable, "start bash: %w", errors.New("fork/exec /bin/bash: resource temporarily unavailable"))
	if r := call(t, ts, "bash", `{"command":"ls","description":"list"}`); r.Text != "Error: start bash: fork/exec /bin/bash: resource temporarily unavailable" {
		t.Fatalf("got %q", r.Text)
	}
	f.err = nil
	if r := call(t, ts, "bash", `{"command":"ls","description":"list","workdir":"../../etc"}`); r.Text != "Error: invalid workdir: ../../etc is outside the session root /workspace" {
		t.Fatalf("got %q", r.Text)
	}
}

func TestFactsValidated(t *testing.T) {
	if _, err := New(newFake(), Config{Facts: map[string]string{"PATH": "/x"}}); err == nil {
		t.Fatal("non-DSH fact accepted")
	}
	if _, err := New(newFake(), Config{Facts: map[string]string{"DSH_SESSION_ID": "x"}}); err == nil {
		t.Fatal("managed fact accepted")
	}
}

// FuzzCall feeds arbitrary tool names and arguments: no panic, and every
// error result is "Error: " plus a non-empty message.
func FuzzCall(f *testing.F) {
	for _, s := range []string{`{}`, `{"command":"ls","description":"d"}`, `{"command":"x","description":"d","timeoutMs":1e308}`,
		`{"task_id":"t1"}`, `[`, `null`, `{"command":"x","description":"d","sandbox_permissions":["a"],"justification":"j"}`,
		`{"command":"x","description":"d","run_in_background":true}`, "\x00", `{"timeoutMs":-0}`} {
		for _, tool := range []string{"bash", "bash_output", "bash_kill", "pwsh", "x"} {
			f.Add(tool, s)
		}
	}
	ex := newFake()
	ex.pwsh = true
	ts, err := New(ex, Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tool, args string) {
		r := ts.Call(context.Background(), Invocation{Session: "s1", Tool: tool, Args: json.RawMessage(args)})
		if r.IsError && (!strings.HasPrefix(r.Text, "Error: ") || len(r.Text) == len("Error: ")) {
			t.Fatalf("bad error text %q", r.Text)
		}
		if r.Value == nil {
			t.Fatalf("no typed value for %q %q", tool, args)
		}
	})
}

// TestDeliverFromAnotherReplica: a notice another process watched reaches
// the session's next result once, and never when this Toolset has it
// pending, is watching the task or reported its end.
func TestDeliverFromAnotherReplica(t *testing.T) {
	f := newFake()
	noticed := make(chan Notice, 4)
	ts := newSet(t, f, Config{OnNotice: func(s string, n Notice) { noticed <- n }})
	n := Notice{TaskID: "far1", Status: executor.Status{State: executor.Completed}, Text: RenderNotice("far1", executor.Status{State: executor.Completed})}
	ts.Deliver("s1", n)
	ts.Deliver("s1", n) // the same task again: one pending
	if r := call(t, ts, "bash", `{"command":"true","description":"noop"}`); len(r.Notices) != 1 || r.Notices[0] != n {
		t.Fatalf("notices %+v, want far1's once", r.Notices)
	}
	ts.Deliver("s1", n) // after the model saw it
	if r := call(t, ts, "bash", `{"command":"true","description":"noop"}`); len(r.Notices) != 0 {
		t.Fatalf("a reported notice delivered again: %+v", r.Notices)
	}
	if r := ts.Call(context.Background(), Invocation{Session: "s2", Tool: "bash", Args: json.RawMessage(`{"command":"true","description":"noop"}`)}); len(r.Notices) != 0 {
		t.Fatalf("another session got s1's notice: %+v", r.Notices)
	}

	// Its end read with bash_output here: a relayed copy is dropped.
	call(t, ts, "bash", `{"command":"sleep 1","description":"wait","run_in_background":true}`)
	f.tasks["t1"].end(executor.Result{}, executor.Status{State: executor.Completed})
	<-noticed
	if r := call(t, ts, "bash_output", `{"task_id":"t1"}`); !strings.Contains(r.Text, "completed") {
		t.Fatalf("bash_output: %q", r.Text)
	}
	ts.Deliver("s1", Notice{TaskID: "t1", Text: "background task t1 completed, exit code: 0"})
	if r := call(t, ts, "bash", `{"command":"true","description":"noop"}`); len(r.Notices) != 0 {
		t.Fatalf("notices %+v after bash_output reported t1's end", r.Notices)
	}

	// Watched here: the relayed copy is dropped, this Toolset's own follows.
	call(t, ts, "bash", `{"command":"sleep 1","description":"wait","run_in_background":true}`)
	ts.Deliver("s1", Notice{TaskID: "t2", Text: "background task t2 completed, exit code: 0"})
	f.tasks["t2"].end(executor.Result{}, executor.Status{State: executor.Completed})
	<-noticed
	if r := call(t, ts, "bash", `{"command":"true","description":"noop"}`); len(r.Notices) != 1 || r.Notices[0].TaskID != "t2" {
		t.Fatalf("notices %+v, want t2's once", r.Notices)
	}
}

// TestDeliverBounded: delivered notices of sessions that never call here
// stay within maxNoticeSessions sessions.
func TestDeliverBounded(t *testing.T) {
	ts := newSet(t, newFake(), Config{})
	for i := range maxNoticeSessions + 100 {
		ts.Deliver(fmt.Sprintf("s%d", i), Notice{TaskID: "x", Text: "background task x completed, exit code: 0"})
	}
	ts.mu.Lock()
	n := len(ts.notices)
	ts.mu.Unlock()
	if n != maxNoticeSessions {
		t.Fatalf("%d sessions with pending notices, want %d", n, maxNoticeSessions)
	}
}

// TestReportedAcrossReplicas: OnReported is called once per task when its
// end reaches the model here; Forget (another replica reported it) drops
// the pending notice and the one still to come from the watcher.
func TestReportedAcrossReplicas(t *testing.T) {
	f := newFake()
	var reported []string
	var mu sync.Mutex
	noticed := make(chan Notice, 4)
	ts := newSet(t, f, Config{
		OnNotice: func(s string, n Notice) { noticed <- n },
		OnReported: func(s, id string) {
			mu.Lock()
			reported = append(reported, s+"/"+id)
			mu.Unlock()
		},
	})
	call(t, ts, "bash", `{"command":"sleep 1","description":"a","run_in_background":true}`)
	f.tasks["t1"].end(executor.Result{}, executor.Status{State: executor.Completed})
	<-noticed
	call(t, ts, "bash", `{"command":"true","description":"noop"}`) // carries t1's notice
	call(t, ts, "bash_output", `{"task_id":"t1"}`)                 // reported already
	call(t, ts, "bash_kill", `{"task_id":"t1"}`)

	// Forget before the end: the watcher queues nothing.
	call(t, ts, "bash", `{"command":"sleep 1","description":"b","run_in_background":true}`)
	ts.Forget("s1", "t2")
	f.tasks["t2"].end(executor.Result{}, executor.Status{State: executor.Completed})
	for deadline := time.Now().Add(5 * time.Second); ts.running("s1") != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	// Forget of a pending notice drops it.
	ts.Deliver("s1", Notice{TaskID: "far", Text: "background task far completed, exit code: 0"})
	ts.Forget("s1", "far")
	if r := call(t, ts, "bash", `{"command":"true","description":"noop"}`); len(r.Notices) != 0 {
		t.Fatalf("forgotten notices delivered: %+v", r.Notices)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(reported, []string{"s1/t1"}) {
		t.Fatalf("OnReported %v, want [s1/t1]", reported)
	}
}
