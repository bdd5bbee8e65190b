package agentapi

import (
	"context"
	"net/http"

	"github.com/shellbox/shellbox/executor"
)

// Peeker is a task whose output can be read without moving its read cursor
// (executor/local's tasks): an operator watches, the model's bash_output
// still reads everything.
type Peeker interface {
	Peek(ctx context.Context) (executor.Output, error)
}

// Peek returns the tails of the task's whole output so far and its status,
// leaving the read cursor where it is. An agent older than this endpoint
// answers "no such endpoint" (ErrInvalid).
func (t *task) Peek(ctx context.Context) (executor.Output, error) {
	var o executor.Output
	err := t.c.doBounded(ctx, http.MethodPost, t.path("peek"), nil, TaskRef{Session: t.session}, &o)
	return o, err
}
