package local

import (
	"context"

	"github.com/shellbox/shellbox/executor"
)

// Peek returns the tails of the task's whole output so far (each stream's
// last TailBytes) and its status, without moving the read cursor that
// bash_output uses: for an operator watching the task, never the model.
// Lost is always 0; SpillPath is set, once written, when the output
// outgrew the tails.
func (t *task) Peek(context.Context) (executor.Output, error) {
	st := t.p.taskStatus()
	o := executor.Output{
		Stdout: t.out.outTail.String(),
		Stderr: t.out.errTail.String(),
		Status: st,
	}
	if t.out.truncated() {
		o.SpillPath = t.out.spill.Path()
	}
	return o, nil
}
