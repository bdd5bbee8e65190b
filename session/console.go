package session

import (
	"context"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/server"
)

var _ server.TaskPeeker = (*Service)(nil)

// peeker is a task whose output can be read without moving the model's
// bash_output cursor (executor/local's tasks).
type peeker interface {
	Peek(ctx context.Context) (executor.Output, error)
}

// PeekTask implements server.TaskPeeker for the operator console: local
// tasks peek in process, sandboxed ones through their agent (POST
// /v1/tasks/{id}/peek; an agent older than that answers an error).
func (l *Service) PeekTask(ctx context.Context, tenant, session, id string) (server.TaskPeek, error) {
	tb, err := l.tenant(tenant)
	if err != nil {
		return server.TaskPeek{}, server.Errorf(server.ErrUnavailable, "tenant %s: %v", tenant, err)
	}
	task, err := tb.exec.Task(ctx, session, id)
	if err != nil {
		return server.TaskPeek{}, err
	}
	p, ok := task.(peeker)
	if !ok {
		return server.TaskPeek{}, server.Errorf(server.ErrUnavailable,
			"task %s cannot be read without consuming the model's cursor: status only", id)
	}
	o, err := p.Peek(ctx)
	if err != nil {
		return server.TaskPeek{}, err
	}
	return server.TaskPeek{Stdout: o.Stdout, Stderr: o.Stderr, Status: o.Status}, nil
}

var _ server.AllSessionsLister = (*Service)(nil)

// AllSessions implements server.AllSessionsLister: every tenant's sessions
// in one engine listing (an operator's console view), or, on the local
// backend, those of the tenants this process has served.
func (l *Service) AllSessions(ctx context.Context) ([]server.SessionInfo, error) {
	if l.manager == nil {
		l.mu.Lock()
		names := make([]string, 0, len(l.tenants))
		for name := range l.tenants {
			names = append(names, name)
		}
		l.mu.Unlock()
		var out []server.SessionInfo
		for _, name := range names {
			list, err := l.Sessions(ctx, name)
			if err != nil {
				return nil, err
			}
			out = append(out, list...)
		}
		return out, nil
	}
	list, err := l.Sandboxes(ctx)
	if err != nil {
		return nil, server.Errorf(server.ErrUnavailable, "%v", err)
	}
	out := make([]server.SessionInfo, 0, len(list))
	for _, sb := range list {
		out = append(out, sessionInfo(sb))
	}
	return out, nil
}
