package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// readUntil reads tk until cond holds for everything read so far, and
// returns that.
func readUntil(t *testing.T, tk executor.Task, acc *executor.Output, cond func(executor.Output) bool) {
	t.Helper()
	for range 2000 {
		o, err := tk.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		acc.Stdout += o.Stdout
		acc.Stderr += o.Stderr
		acc.Lost += o.Lost
		acc.Status = o.Status
		acc.SpillPath, acc.SpillError = o.SpillPath, o.SpillError
		if cond(*acc) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("condition never met; read so far: %+v", *acc)
}

func touch(t *testing.T, path string) { must(t, os.WriteFile(path, nil, 0o644)) }

// TestBackgroundCursor: each Read returns what arrived since the previous
// one, nothing twice, and the final Read everything that is left.
func TestBackgroundCursor(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	root := e.cfg.Root
	wait := func(f string) string { return "while [ ! -e " + f + " ]; do sleep 0.01; done" }
	tk := start(t, e, executor.Request{Command: "echo one; " + wait("go1") + "; echo two >&2; " + wait("go2") + "; echo three; exit 5"})
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(tk.ID()) {
		t.Errorf("task id %q is not 12 hex characters", tk.ID())
	}

	var acc executor.Output
	readUntil(t, tk, &acc, func(o executor.Output) bool { return o.Stdout == "one\n" })
	if acc.Status.State != executor.Running || acc.Stderr != "" {
		t.Errorf("after one: %+v", acc)
	}
	touch(t, filepath.Join(root, "go1"))
	readUntil(t, tk, &acc, func(o executor.Output) bool { return o.Stderr == "two\n" })
	if acc.Stdout != "one\n" {
		t.Errorf("stdout read twice or lost: %q", acc.Stdout)
	}
	touch(t, filepath.Join(root, "go2"))
	readUntil(t, tk, &acc, func(o executor.Output) bool { return o.Status.State != executor.Running })
	want := executor.Output{Stdout: "one\nthree\n", Stderr: "two\n", Status: executor.Status{State: executor.Completed, ExitCode: 5}}
	if acc != want {
		t.Errorf("read %+v, want %+v", acc, want)
	}
	o, _ := tk.Read(context.Background())
	if o != (executor.Output{Status: want.Status}) {
		t.Errorf("read after the end: %+v", o)
	}
	res, err := tk.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "one\nthree\n" || res.Stderr != "two\n" || res.ExitCode != 5 || res.Signal != "" || res.TimedOut || res.Truncated {
		t.Errorf("Wait = %+v", res)
	}
}

// TestBackgroundLossy: a reader that falls behind a small buffer gets the
// newest bytes, the count of the lost ones, and a spill file with everything.
func TestBackgroundLossy(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	tests := []struct {
		name           string
		command        string
		stdout, stderr string
	}{
		{"stdout", "seq 1 100", seq(1, 100), ""},
		{"both streams", "seq 1 100; seq 1 50 >&2", seq(1, 100), seq(1, 50)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tk := start(t, e, executor.Request{Command: tt.command}, func(s *executor.Spec) { s.BufferBytes = 10 })
			if _, err := tk.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			o, _ := tk.Read(context.Background())
			if o.Stdout != tail(tt.stdout, 10) || o.Stderr != tail(tt.stderr, 10) {
				t.Errorf("read %q %q, want the last 10 bytes of each stream", o.Stdout, o.Stderr)
			}
			lost := int64(len(tt.stdout) + len(tt.stderr) - len(o.Stdout) - len(o.Stderr))
			if o.Lost != lost {
				t.Errorf("Lost %d, want %d", o.Lost, lost)
			}
			b, err := os.ReadFile(o.SpillPath)
			if err != nil || len(b) != len(tt.stdout)+len(tt.stderr) || !strings.Contains(string(b), tt.stdout) {
				t.Errorf("spill file %q (%v) does not hold everything", o.SpillPath, err)
			}
			if o.Status != (executor.Status{State: executor.Completed}) {
				t.Errorf("status %+v", o.Status)
			}
		})
	}
}

// TestBackgroundLossWhileRunning: the spill file exists as soon as bytes are
// lost, while the task still runs.
func TestBackgroundLossWhileRunning(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	tk := start(t, e, executor.Request{Command: "seq 1 100; sleep 100"}, func(s *executor.Spec) { s.BufferBytes = 10 })
	var acc executor.Output
	readUntil(t, tk, &acc, func(o executor.Output) bool { return strings.HasSuffix(o.Stdout, "100\n") })
	if acc.Status.State != executor.Running || acc.Lost+int64(len(acc.Stdout)) != int64(len(seq(1, 100))) {
		t.Errorf("read %+v", acc)
	}
	if acc.Lost > 0 {
		b, err := os.ReadFile(acc.SpillPath)
		if err != nil || string(b) != seq(1, 100) {
			t.Errorf("spill %q (%v) holds %q", acc.SpillPath, err, b)
		}
	}
	tk.Kill(context.Background())
}

func TestBackgroundKill(t *testing.T) {
	t.Parallel()
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, mode)
			tests := []struct {
				name    string
				command string
				status  executor.Status
			}{
				// Each prints "started" once its traps are set.
				{"sleep", "echo started; sleep 100", executor.Status{State: executor.Killed, ExitCode: -1, Signal: "SIGTERM"}},
				{"ignores SIGTERM", "trap '' TERM; echo started; sleep 100", executor.Status{State: executor.Killed, ExitCode: -1, Signal: "SIGKILL"}},
				{"exits 0 on SIGTERM", "trap 'exit 0' TERM; echo started; sleep 100 & wait", executor.Status{State: executor.Killed}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					tk := start(t, e, executor.Request{Command: tt.command})
					var acc executor.Output
					readUntil(t, tk, &acc, func(o executor.Output) bool { return o.Stdout == "started\n" })
					kr, err := tk.Kill(context.Background())
					if err != nil || kr != (executor.KillResult{Status: tt.status}) {
						t.Fatalf("Kill = %+v, %v; want status %+v", kr, err, tt.status)
					}
					kr, err = tk.Kill(context.Background())
					if err != nil || kr != (executor.KillResult{AlreadyDone: true, Status: tt.status}) {
						t.Errorf("second Kill = %+v, %v", kr, err)
					}
					if o, _ := tk.Read(context.Background()); o.Status != tt.status {
						t.Errorf("Read status %+v", o.Status)
					}
				})
			}
			t.Run("setsid grandchild", func(t *testing.T) {
				t.Parallel()
				tk := start(t, e, executor.Request{Command: "setsid sh -c 'trap \"\" TERM; echo $$ > bgpid; exec sleep 100' & wait"})
				pid := readPid(t, filepath.Join(e.cfg.Root, "bgpid"))
				if _, err := tk.Kill(context.Background()); err != nil {
					t.Fatal(err)
				}
				if mode == CgroupOff {
					killIfAlive(pid) // escapes without a cgroup: see the package doc
					return
				}
				if !dead(pid) {
					t.Errorf("grandchild %d survived Kill", pid)
					killIfAlive(pid)
				}
			})
		})
	}
}

func TestBackgroundEnds(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	tests := []struct {
		name    string
		command string
		status  executor.Status
	}{
		{"exit code", "exit 4", executor.Status{State: executor.Completed, ExitCode: 4}},
		{"clean", "true", executor.Status{State: executor.Completed}},
		{"killed by a signal of its own", "kill -9 $$", executor.Status{State: executor.Killed, ExitCode: -1, Signal: "SIGKILL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tk := start(t, e, executor.Request{Command: tt.command})
			if _, err := tk.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			kr, err := tk.Kill(context.Background())
			if err != nil || kr != (executor.KillResult{AlreadyDone: true, Status: tt.status}) {
				t.Errorf("Kill = %+v, %v; want already done with %+v", kr, err, tt.status)
			}
			if o, _ := tk.Read(context.Background()); o.Status != tt.status {
				t.Errorf("Read status %+v", o.Status)
			}
		})
	}
}

// TestBackgroundOutlivesStart: the ctx of Start bounds the start only, and a
// background task has no timeout.
func TestBackgroundOutlivesStart(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	spec, err := e.Resolve(context.Background(), executor.Request{Session: session, Command: "sleep 0.6; echo ok", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	spec.Timeout = 100 * time.Millisecond // ignored for a background task
	ctx, cancel := context.WithCancel(context.Background())
	tk, err := e.Start(ctx, spec)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	res, err := tk.Wait(context.Background())
	if err != nil || res.Stdout != "ok\n" || res.ExitCode != 0 || res.Signal != "" || res.TimedOut {
		t.Errorf("Wait = %+v, %v", res, err)
	}
}

func TestTaskLookup(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupOff)
	tk := start(t, e, executor.Request{Command: "echo hi; sleep 100"})
	defer tk.Kill(context.Background())
	ctx := context.Background()

	for _, c := range []struct{ session, id string }{{session, "0123456789ab"}, {"other", tk.ID()}, {session, ""}} {
		_, err := e.Task(ctx, c.session, c.id)
		if !errors.Is(err, executor.ErrNotFound) || err.Error() != "no such task: "+c.id {
			t.Errorf("Task(%q, %q) = %v", c.session, c.id, err)
		}
	}
	same, err := e.Task(ctx, session, tk.ID())
	if err != nil {
		t.Fatal(err)
	}
	// The cursor is the task's, shared by every handle.
	var acc executor.Output
	readUntil(t, same, &acc, func(o executor.Output) bool { return o.Stdout == "hi\n" })
	if o, _ := tk.Read(ctx); o.Stdout != "" {
		t.Errorf("second handle re-read %q", o.Stdout)
	}
}

func TestBackgroundConcurrent(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	const n = 20
	tasks := make([]executor.Task, n)
	ids := map[string]bool{}
	for i := range n {
		tasks[i] = start(t, e, executor.Request{Command: fmt.Sprintf("echo start %d; sleep 0.3; echo end %d >&2", i, i)})
		ids[tasks[i].ID()] = true
	}
	if len(ids) != n {
		t.Fatalf("%d distinct ids for %d tasks", len(ids), n)
	}
	var wg sync.WaitGroup
	for i, tk := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := tk.Wait(context.Background())
			if err != nil || res.Stdout != fmt.Sprintf("start %d\n", i) || res.Stderr != fmt.Sprintf("end %d\n", i) || res.ExitCode != 0 {
				t.Errorf("task %d: %+v, %v", i, res, err)
			}
			o, _ := tk.Read(context.Background())
			if o.Status != (executor.Status{State: executor.Completed}) || o.Stdout != fmt.Sprintf("start %d\n", i) {
				t.Errorf("task %d read %+v", i, o)
			}
		}()
	}
	wg.Wait()
}

func TestFinishedTasksEvicted(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupOff, func(c *Config) { c.MaxFinishedTasks = 2 })
	var ids []string
	for range 3 {
		tk := start(t, e, executor.Request{Command: "true"})
		tk.Wait(context.Background())
		ids = append(ids, tk.ID())
	}
	other := start(t, e, executor.Request{Session: "s2", Command: "true"})
	other.Wait(context.Background())
	ctx := context.Background()
	if _, err := e.Task(ctx, session, ids[0]); !errors.Is(err, executor.ErrNotFound) {
		t.Errorf("oldest finished task still kept: %v", err)
	}
	for _, id := range ids[1:] {
		if _, err := e.Task(ctx, session, id); err != nil {
			t.Errorf("task %s evicted: %v", id, err)
		}
	}
	if _, err := e.Task(ctx, "s2", other.ID()); err != nil {
		t.Errorf("another session's task evicted: %v", err)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	tk := start(t, e, executor.Request{Command: "sleep 100"})
	fg := make(chan executor.Result)
	go func() { fg <- run(t, e, executor.Request{Command: "echo up > fg; sleep 100"}) }()
	for {
		if _, err := os.Stat(filepath.Join(e.cfg.Root, "fg")); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res := <-fg; res.Signal != "SIGTERM" {
		t.Errorf("foreground call after Close: %+v", res)
	}
	if o, _ := tk.Read(context.Background()); o.Status.State != executor.Killed {
		t.Errorf("background task after Close: %+v", o.Status)
	}
	_, err := runErr(t, e, executor.Request{Command: "true"})
	if !errors.Is(err, executor.ErrUnavailable) {
		t.Errorf("Run after Close = %v", err)
	}
}

func killIfAlive(pid int) {
	if !dead(pid) {
		p, err := os.FindProcess(pid)
		if err == nil {
			p.Kill()
		}
	}
}
