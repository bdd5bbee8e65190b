package tools

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/executor"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/<name>.golden, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s: text differs from golden\n--- got ---\n%s\n--- want ---\n%s", name, got, want)
	}
}

// TestRenderForegroundGolden pins every combination of sections and markers.
func TestRenderForegroundGolden(t *testing.T) {
	outputs := []struct {
		name           string
		stdout, stderr string
	}{
		{"empty", "", ""},
		{"stdout", "hello\nworld\n", ""},
		{"stderr", "", "oops\n"},
		{"both", "out line\n", "err line\n"},
		{"nonl", "no newline", "no newline either"},
		{"newline", "\n", ""},
		{"invalid", "bad \xff byte\n", "ok\n"},
		{"invalid-stderr", "ok\n", "\xc3 cut\n"},
		// A tail kept from the middle of "é" (c3 a9) starts with a9: cut by
		// the truncation, not invalid output.
		{"cut-start", "\xa9t\u00e9\n", ""},
	}
	truncs := []struct {
		name string
		mod  func(*executor.Result)
	}{
		{"full", func(*executor.Result) {}},
		{"trunc", func(r *executor.Result) {
			r.Truncated, r.SpillPath = true, "/spill/s1/c1.log"
		}},
		{"unavail", func(r *executor.Result) {
			r.Truncated, r.SpillError = true, "open /spill/s1/c1.log: no space left on device"
		}},
		{"capped", func(r *executor.Result) {
			r.Truncated, r.SpillPath = true, "/spill/s1/c1.log"
			r.SpillError = "spill limit of 1048576 bytes reached; the first 1048576 bytes are in /spill/s1/c1.log"
		}},
	}
	ends := []struct {
		name string
		mod  func(*executor.Result)
	}{
		{"exit0", func(*executor.Result) {}},
		{"exit2", func(r *executor.Result) { r.ExitCode = 2 }},
		{"sigterm", func(r *executor.Result) { r.Signal = "SIGTERM" }},
		{"sigkill", func(r *executor.Result) { r.Signal = "SIGKILL" }},
	}
	var all strings.Builder
	for _, o := range outputs {
		for _, tr := range truncs {
			for _, timedOut := range []bool{false, true} {
				for _, e := range ends {
					r := executor.Result{Stdout: o.stdout, Stderr: o.stderr, TimeoutMs: 1500, TimedOut: timedOut}
					tr.mod(&r)
					e.mod(&r)
					name := fmt.Sprintf("%s-%s-timeout=%v-%s", o.name, tr.name, timedOut, e.name)
					fmt.Fprintf(&all, "=== %s\n%s\n", name, RenderForeground(r))
				}
			}
		}
	}
	golden(t, "foreground", all.String())
}

func TestRenderForegroundOrder(t *testing.T) {
	r := executor.Result{Stdout: "a\n", Stderr: "b\n", Truncated: true, SpillPath: "/p",
		TimedOut: true, TimeoutMs: 10, Signal: "SIGKILL"}
	want := "a\n[stderr]\nb\n[output truncated; full output: /p]\n[timed out after 10ms]\n[killed by signal: SIGKILL]"
	if got := RenderForeground(r); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// A clean exit adds no marker; a non-zero exit is a marker, not an error.
	if got := RenderForeground(executor.Result{Stdout: "x\n"}); got != "x" {
		t.Fatalf("clean exit: got %q", got)
	}
	if got := RenderForeground(executor.Result{ExitCode: 1}); got != "(no output)\n[exit code: 1]" {
		t.Fatalf("exit 1: got %q", got)
	}
	// Timed out, trapped TERM, exited 0: the timeout is still reported.
	if got := RenderForeground(executor.Result{TimedOut: true, TimeoutMs: 500}); got != "(no output)\n[timed out after 500ms]" {
		t.Fatalf("trapped: got %q", got)
	}
}

func TestRenderOutputGolden(t *testing.T) {
	statuses := []executor.Status{
		{State: executor.Running},
		{State: executor.Completed, ExitCode: 0},
		{State: executor.Completed, ExitCode: 7},
		{State: executor.Killed, Signal: "SIGKILL"},
	}
	outs := []struct {
		name string
		o    executor.Output
	}{
		{"nothing", executor.Output{}},
		{"stdout", executor.Output{Stdout: "tick 1\ntick 2\n"}},
		{"stderr", executor.Output{Stderr: "warn\n"}},
		{"both", executor.Output{Stdout: "o\n", Stderr: "e\n"}},
		{"lost", executor.Output{Stdout: "tail\n", Lost: 4096, SpillPath: "/spill/s1/t1.log"}},
		{"lost-unavail", executor.Output{Stdout: "tail\n", Lost: 10, SpillError: "open /spill: read-only file system"}},
		{"invalid", executor.Output{Stdout: "a\xffb\n"}},
		// Reads cut "é" (c3 a9) at either end: not invalid output; the end
		// cut counts only while the task runs.
		{"cut-edges", executor.Output{Stdout: "\xa9x\xc3"}},
	}
	var all strings.Builder
	for _, o := range outs {
		for _, st := range statuses {
			o.o.Status = st
			fmt.Fprintf(&all, "=== %s-%s-%d\n%s\n", o.name, st.State, st.ExitCode, RenderOutput(o.o))
		}
	}
	golden(t, "output", all.String())
}

// TestValidText: invalid bytes become U+FFFD one by one, as encoding/json
// makes them, and valid text is returned unchanged.
func TestValidText(t *testing.T) {
	cases := []struct {
		in, out          string
		cutStart, cutEnd bool
		bad              bool
	}{
		{"plain", "plain", false, false, false},
		{"h\u00e9\u2603\U0001F600", "h\u00e9\u2603\U0001F600", false, false, false},
		{"\uFFFD as printed", "\uFFFD as printed", false, false, false},
		{"a\xff\xfeb", "a\uFFFD\uFFFDb", false, false, true},
		{"\xa9x", "\uFFFDx", true, false, false},
		{"\xa9x", "\uFFFDx", false, false, true},
		{"\x80\x80\x80\x80x", "\uFFFD\uFFFD\uFFFD\uFFFDx", true, false, true},
		{"x\xf0\x9f\x98", "x\uFFFD\uFFFD\uFFFD", false, true, false},
		{"x\xf0\x9f\x98", "x\uFFFD\uFFFD\uFFFD", false, false, true},
		{"x\xffy\xc3", "x\uFFFDy\uFFFD", false, true, true},
	}
	for _, c := range cases {
		out, bad := validText(c.in, c.cutStart, c.cutEnd)
		if out != c.out || bad != c.bad {
			t.Errorf("validText(%q, %v, %v) = %q, %v; want %q, %v", c.in, c.cutStart, c.cutEnd, out, bad, c.out, c.bad)
		}
		var viaJSON string
		j, _ := json.Marshal(c.in)
		json.Unmarshal(j, &viaJSON)
		if viaJSON != out {
			t.Errorf("validText(%q) = %q, JSON makes %q", c.in, out, viaJSON)
		}
	}
}

func TestRenderFixedTexts(t *testing.T) {
	cases := []struct{ got, want string }{
		{RenderBackground("ab12"), "started background task ab12"},
		{RenderKill("ab12", executor.KillResult{}), "killed background task ab12"},
		{RenderKill("ab12", executor.KillResult{AlreadyDone: true, Status: executor.Status{State: executor.Completed, ExitCode: 3}}),
			"task ab12 already completed, exit code: 3"},
		{RenderKill("ab12", executor.KillResult{AlreadyDone: true, Status: executor.Status{State: executor.Killed}}),
			"task ab12 already killed"},
		{RenderNotice("ab12", executor.Status{State: executor.Completed}), "background task ab12 completed, exit code: 0"},
		{RenderNotice("ab12", executor.Status{State: executor.Killed}), "background task ab12 killed"},
		{RenderError("tool call aborted"), "Error: tool call aborted"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestRenderLive(t *testing.T) {
	for _, tt := range []struct {
		chunks []executor.Chunk
		want   string
	}{
		{nil, ""},
		{[]executor.Chunk{{Stream: executor.Stdout, Data: []byte("a\n")}, {Stream: executor.Stderr, Data: []byte("b")}}, "a\nb"},
		{[]executor.Chunk{{Stream: executor.Stdout, Data: []byte("partial")}, {Stream: executor.Stdout, Data: []byte("next\n"), Skipped: 1234}},
			"partial\n[… 1234 bytes not streamed …]\nnext\n"},
		{[]executor.Chunk{{Stream: executor.Stdout, Skipped: 7}}, "[… 7 bytes not streamed …]\n"},
		{[]executor.Chunk{{Stream: executor.Stdout, Data: []byte("\xff\xfeok")}}, "\uFFFDok"},
	} {
		if got := RenderLive(tt.chunks); got != tt.want {
			t.Errorf("RenderLive(%+v) = %q, want %q", tt.chunks, got, tt.want)
		}
	}
}
