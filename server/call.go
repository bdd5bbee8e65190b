package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// knownTools are the tool names the server routes; any other name is an
// unknown tool before it reaches a Toolset.
var knownTools = map[string]bool{
	tools.ToolBash: true, tools.ToolBashOutput: true, tools.ToolBashKill: true, tools.ToolPwsh: true,
}

// errDraining, errBusy: the call did not run.
var errDraining = errors.New("the server is shutting down: retry against the next process")

type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

// call runs one tool call of the tenant's session: the one path REST and MCP
// share. A non-nil error means the call did not run (limits, shutdown, no
// backend); otherwise the Result is the tool's, error results included.
// live, if set, receives a foreground command's output as it runs
// (tools.Invocation.Live).
func (s *Server) call(ctx context.Context, tenant, session, tool string, args json.RawMessage, live executor.Live) (tools.Result, error) {
	tl := s.limits[tenant]
	if tl != nil {
		if err := tl.acquire(); err != nil {
			s.metrics.toolCall(tool, tenant, "limited", 0)
			return tools.Result{}, &limitError{err.Error()}
		}
		defer tl.release()
	}
	if !s.beginCall(ctx) {
		return tools.Result{}, errDraining
	}
	defer s.endCall()
	ts, err := s.cfg.Backend.Toolset(ctx, tenant)
	if err != nil {
		s.metrics.toolCall(tool, tenant, "unavailable", 0)
		return tools.Result{}, err
	}
	if h, ok := s.cfg.Backend.(CallHolder); ok {
		defer h.HoldCall(tenant, session)()
	}
	start := time.Now()
	res := ts.Call(ctx, tools.Invocation{Tenant: tenant, Session: session, Tool: tool, Args: args, Live: live})
	d := time.Since(start)
	s.metrics.observeResult(tenant, tool, res, d)
	if s.cfg.Usage != nil {
		s.cfg.Usage.Call(tenant, session, d)
		if fg, ok := res.Value.(*tools.Foreground); ok && fg.Truncated {
			s.cfg.Usage.Spill(tenant, session, fg.SpillBytes)
		}
	}
	s.book.called(tenant, session, tool, args, res)
	return res, nil
}

// errorResult is a tool error result built by the server, for calls the
// transport refuses before a Toolset sees them; its text is the contract's.
func errorResult(msg string) tools.Result {
	return tools.Result{Text: tools.RenderError(msg), IsError: true, Value: &tools.ErrorValue{Kind: "error", Message: msg}}
}

// notFound reports a result whose error is the contract's unknown-task
// answer; the REST API sends it with 404.
func notFound(r tools.Result) bool {
	ev, ok := r.Value.(*tools.ErrorValue)
	return ok && strings.HasPrefix(ev.Message, "no such task: ")
}

// validSession checks a session name as the executors do.
func validSession(id string) error { return executor.ValidSession(id) }
