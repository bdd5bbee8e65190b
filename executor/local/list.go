package local

import (
	"context"
	"slices"
	"strings"

	"github.com/shellbox/shellbox/executor"
)

// ListTasks returns the background tasks of session the executor keeps,
// running and finished (up to MaxFinishedTasks), ordered by id. The agent
// serves it so a restarted server can find the tasks it started.
func (e *Executor) ListTasks(_ context.Context, session string) ([]executor.Task, error) {
	e.mu.Lock()
	var out []executor.Task
	for _, t := range e.tasks {
		if t.session == session {
			out = append(out, t)
		}
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b executor.Task) int { return strings.Compare(a.ID(), b.ID()) })
	return out, nil
}

// Status returns the task's status without moving its read cursor.
func (t *task) Status() executor.Status { return t.p.taskStatus() }
