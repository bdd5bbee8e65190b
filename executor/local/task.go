package local

import (
	"context"
	"sync"

	"github.com/shellbox/shellbox/executor"
)

// task is a background task. Every handle on it is the same *task, so the
// read cursor is shared.
type task struct {
	id, session string
	out         *outputs
	p           *proc
	readMu      sync.Mutex // one Read at a time, so stdout and stderr move together
}

var _ executor.Task = (*task)(nil)

func (t *task) ID() string { return t.id }

// Read returns the output since the previous Read and the status. The status
// is taken first: when it is final, the output read after it is complete.
func (t *task) Read(context.Context) (executor.Output, error) {
	t.readMu.Lock()
	defer t.readMu.Unlock()
	st := t.p.taskStatus()
	stdout, lostOut := t.out.outRing.Read()
	stderr, lostErr := t.out.errRing.Read()
	o := executor.Output{
		Stdout: string(stdout),
		Stderr: string(stderr),
		Lost:   lostOut + lostErr,
		Status: st,
	}
	if o.Lost > 0 {
		// Normally done already, as the ring overflowed.
		t.out.spill.Materialize()
	}
	o.SpillPath = t.out.spill.Path()
	o.SpillError = t.out.spill.Err()
	if st.State != executor.Running {
		// Final: the output is drained and the spill file closed.
		o.SpillBytes = t.out.spill.Stored()
	}
	return o, nil
}

// Wait blocks until the task is over, and returns its Result (tails of the
// whole output). Giving up on ctx leaves the task running.
func (t *task) Wait(ctx context.Context) (executor.Result, error) {
	select {
	case <-t.p.done:
		return t.p.result(), nil
	case <-ctx.Done():
		return executor.Result{}, executor.Aborted()
	}
}

// Kill ends the task's whole tree and waits for it to be gone. A finished
// task reports AlreadyDone with its status. If ctx ends first, Kill returns
// executor.Aborted() and the kill completes anyway.
func (t *task) Kill(ctx context.Context) (executor.KillResult, error) {
	if t.p.kill() {
		return executor.KillResult{AlreadyDone: true, Status: t.p.taskStatus(), SpillBytes: t.out.spill.Stored()}, nil
	}
	select {
	case <-t.p.done:
		return executor.KillResult{Status: t.p.taskStatus(), SpillBytes: t.out.spill.Stored()}, nil
	case <-ctx.Done():
		return executor.KillResult{}, executor.Aborted()
	}
}
