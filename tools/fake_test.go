package tools

import (
	"context"
	"fmt"
	"sync"

	"github.com/shellbox/shellbox/executor"
)

// fakeExec is a narrow stand-in for the seam: it records requests and answers
// with canned facts, so tools/ is tested without running anything.
type fakeExec struct {
	mu      sync.Mutex
	lim     executor.Limits
	result  executor.Result
	err     error
	pwsh    bool
	last    executor.Spec
	tasks   map[string]*fakeTask
	started int
	// instant makes started tasks end at once (exit 0), before Start returns.
	instant bool
}

var _ executor.BashExecutor = (*fakeExec)(nil)

func newFake() *fakeExec {
	return &fakeExec{lim: executor.DefaultLimits(), tasks: map[string]*fakeTask{}}
}

func (f *fakeExec) Resolve(ctx context.Context, req executor.Request) (executor.Spec, error) {
	return f.lim.Resolve(ctx, req, "/workspace", []string{"PATH=/usr/bin:/bin"})
}

func (f *fakeExec) Run(ctx context.Context, spec executor.Spec) (executor.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = spec
	if f.err != nil {
		return executor.Result{}, f.err
	}
	r := f.result
	r.TimeoutMs = spec.Timeout.Milliseconds()
	return r, nil
}

func (f *fakeExec) Start(ctx context.Context, spec executor.Spec) (executor.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = spec
	if f.err != nil {
		return nil, f.err
	}
	f.started++
	id := fmt.Sprintf("t%d", f.started)
	t := &fakeTask{id: id, session: spec.Session, done: make(chan struct{}),
		out: executor.Output{Status: executor.Status{State: executor.Running}}}
	f.tasks[id] = t
	if f.instant {
		t.end(executor.Result{}, executor.Status{State: executor.Completed})
	}
	return t, nil
}

func (f *fakeExec) Task(ctx context.Context, session, id string) (executor.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[id]
	if !ok || t.session != session {
		return nil, executor.NoSuchTask(id)
	}
	return t, nil
}

func (f *fakeExec) Has(ctx context.Context, session string, s executor.Shell) bool {
	return s == executor.Bash || f.pwsh
}

type fakeTask struct {
	id, session string
	mu          sync.Mutex
	out         executor.Output
	final       executor.Result
	done        chan struct{}
	ended       bool
}

func (t *fakeTask) ID() string { return t.id }

func (t *fakeTask) Read(ctx context.Context) (executor.Output, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.out
	t.out.Stdout, t.out.Stderr, t.out.Lost = "", "", 0
	return o, nil
}

func (t *fakeTask) Wait(ctx context.Context) (executor.Result, error) {
	select {
	case <-t.done:
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.final, nil
	case <-ctx.Done():
		return executor.Result{}, ctx.Err()
	}
}

func (t *fakeTask) Kill(ctx context.Context) (executor.KillResult, error) {
	t.mu.Lock()
	if t.ended {
		st := t.out.Status
		t.mu.Unlock()
		return executor.KillResult{AlreadyDone: true, Status: st}, nil
	}
	t.mu.Unlock()
	t.end(executor.Result{Signal: "SIGTERM"}, executor.Status{State: executor.Killed, Signal: "SIGTERM"})
	return executor.KillResult{Status: executor.Status{State: executor.Killed}}, nil
}

// end finishes the task with final and status.
func (t *fakeTask) end(final executor.Result, st executor.Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	t.ended = true
	t.final = final
	t.out.Status = st
	close(t.done)
}
