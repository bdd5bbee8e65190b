package sandboxconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed"
	"github.com/shellbox/shellbox/sandbox"
)

// verdictFor bounds Broken's verdict on a sandbox: the runtime's look at
// it and a liveness check of its agent (agentapi.ProbeBound), and its
// removal when it is dead (the Manager's RemoveTimeout bounds that).
const verdictFor = 10 * time.Second

// Broken implements sandboxed.Connections: the session's connection is
// dropped (if it is still cn), and the sandbox it was to is judged. It is
// dead when the runtime says it no longer runs (its agent, PID 1, died;
// it was removed behind shellbox's back) or when its agent took a
// connection and did not answer a liveness check (stopped, wedged): then
// it is removed at once, so that nothing is left of it whether or not the
// session calls again, and the session's next call gets a new sandbox,
// which finds the session's workspace. A sandbox that runs and whose agent
// answers, or cannot be reached (the network's doing, for a while: see
// agent), is left to the next call. The returned error (ErrUnavailable)
// says which it was.
//
// The verdict is reached under its own bound (verdictFor), whatever ctx
// does: a caller gone does not leave a dead sandbox behind.
func (c *Connections) Broken(ctx context.Context, session string, cn sandboxed.Conn, err error) error {
	a, _ := cn.(*conn)
	c.mu.Lock()
	if c.conns[session] == a {
		delete(c.conns, session)
	}
	c.mu.Unlock()
	if a == nil {
		return executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: agent: %w", session, err)
	}
	a.close()
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), verdictFor)
	defer cancel()
	why, dead := c.dead(vctx, a.sb, err)
	if !dead {
		return executor.Errorf(executor.ErrUnavailable, "sandbox for session %s: agent: %w", session, err)
	}
	var removed string
	if rerr := c.manager.RemoveSandbox(vctx, a.sb); rerr != nil && !errors.Is(rerr, sandbox.ErrNotFound) {
		removed = fmt.Sprintf("; removing it failed (%v), the session's next call tries again", rerr)
	} else {
		removed = "; it was removed, and the session's next call gets a new one with the same workspace"
	}
	var during string
	if !errors.Is(err, agentapi.ErrNotSent) {
		// The agent had the request: a command may have started.
		during = " during the call (the command may have started)"
	}
	return executor.Errorf(executor.ErrUnavailable, "sandbox for session %s %s%s%s: %w", session, why, during, removed, err)
}

// dead judges sb, the sandbox a connection broken with err was to: whether
// it is dead, and what became of it.
func (c *Connections) dead(ctx context.Context, sb sandbox.Sandbox, err error) (why string, dead bool) {
	cur, ierr := c.manager.Inspect(ctx, sb.Tenant, sb.Session)
	switch {
	case errors.Is(ierr, sandbox.ErrNotFound):
		return "is gone (the runtime has no sandbox for it)", true
	case ierr != nil:
		return "", false // the runtime cannot say: the next call finds out
	case cur.ID != sb.ID || !cur.Created.Equal(sb.Created):
		return "", false // replaced already, by another call
	case cur.State != sandbox.StateRunning:
		return fmt.Sprintf("died (its sandbox %s is %s)", cur.ID, cur.State), true
	}
	// It runs. An agent that did not answer the call is checked once
	// more on a connection of its own; one that could not be reached is
	// left to the next call's dial (redial), as the network's doing.
	if !errors.Is(err, agentapi.ErrNoAnswer) {
		return "", false
	}
	perr := c.probe(ctx, cur)
	if errors.Is(perr, agentapi.ErrNoAnswer) {
		return fmt.Sprintf("stopped answering (sandbox %s runs, its agent answered neither the call nor a liveness check within %s)", cur.ID, agentapi.ProbeBound), true
	}
	return "", false
}
