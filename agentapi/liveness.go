package agentapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// A request to an agent fails in one of three ways that tell its caller
// different things, besides the agent's own answers (errors of a class):
//
//   - ErrNotSent: no connection to the agent was made (refused, no socket,
//     a dial that timed out). The request did nothing in the sandbox: the
//     caller may send it again, to a new sandbox if this one is dead.
//   - ErrNoAnswer: a connection was made and the agent did not answer
//     within the request's bound, though the kernel (a unix socket's
//     backlog) or the network accepted it: a stopped or wedged agent.
//   - anything else (a reset, an EOF mid-answer): the agent went away while
//     it had the request, which may have started a command.
//
// Every request is bounded (requestBound, handshakeBound; a foreground
// Run by its spec's timeout, see runBound), but for the long polls a
// caller bounds itself: a task's Wait and file transfers, whose length is
// the data's.
var (
	ErrNotSent  = errors.New("no connection to the agent")
	ErrNoAnswer = errors.New("the agent did not answer")
)

// notSent is the failure to connect of a request: its text is err's, and it
// is ErrNotSent.
type notSent struct{ err error }

func (e notSent) Error() string   { return e.err.Error() }
func (e notSent) Unwrap() []error { return []error{ErrNotSent, e.err} }

// Bounds of requests, and of the liveness checks of a running foreground
// call (variables for the package's tests).
var (
	// requestBound bounds a request that makes the agent do little (start
	// a task, read its output, list, ask): a healthy agent answers in
	// milliseconds, and one loaded on a busy host in seconds.
	requestBound = 30 * time.Second
	// handshakeBound bounds the handshake of a dial.
	handshakeBound = 10 * time.Second
	// runSlack is how long past a foreground call's timeout and grace a
	// Run waits for its answer at most. The agent kills the tree at the
	// timeout, and gives up on unkillable processes 10 s after the grace.
	runSlack = 30 * time.Second
	// probeAfter is how long past a call's timeout and grace the first
	// liveness check of its agent comes; one follows every probeEvery,
	// each bounded by ProbeBound, until the call ends.
	probeAfter = time.Second
	probeEvery = 2 * time.Second
	// ProbeBound bounds one liveness check (Probe).
	ProbeBound = 3 * time.Second
)

// bounded returns ctx limited to d; its expiry is ErrNoAnswer (roundTrip
// and readError tell it from the caller's own deadline or cancellation,
// which stay executor.Aborted()).
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("%w within %s", ErrNoAnswer, d))
}

// Probe checks that the agent answers: one handshake request on a
// connection of its own, within ProbeBound (and ctx). nil: the agent
// lives. An error wrapping ErrNoAnswer: a connection was made and the agent
// did not answer (stopped, wedged); ErrNotSent: no connection (the agent
// is gone, or the network in between is).
func (c *Client) Probe(ctx context.Context) error {
	pctx, cancel := bounded(ctx, ProbeBound)
	defer cancel()
	var h Hello
	return c.do(pctx, http.MethodGet, "/v1/hello", nil, nil, &h)
}

// ProbeEndpoint is Probe of the agent at ep, with a client of its own that
// it closes: the check a caller makes of a sandbox whose connection broke.
func ProbeEndpoint(ctx context.Context, ep Endpoint) error {
	c := newClient(ep)
	defer c.Close()
	return c.Probe(ctx)
}

// watch checks, while a foreground call on rctx of spec runs past its
// timeout and grace (the agent should have answered by then), every
// probeEvery that its agent still answers, and ends the call with the
// probe's ErrNoAnswer when it does not. It returns when rctx ends.
func (c *Client) watch(rctx context.Context, spec executor.Spec, stop context.CancelCauseFunc) {
	start := time.Now()
	t := time.NewTimer(spec.Timeout + spec.Grace + probeAfter)
	defer t.Stop()
	for {
		select {
		case <-rctx.Done():
			return
		case <-t.C:
		}
		if err := c.Probe(rctx); errors.Is(err, ErrNoAnswer) && rctx.Err() == nil {
			stop(fmt.Errorf("%w: no answer %s into a call of timeout %s and grace %s, nor to a liveness check within %s",
				ErrNoAnswer, time.Since(start).Round(100*time.Millisecond), spec.Timeout, spec.Grace, ProbeBound))
			return
		}
		t.Reset(probeEvery)
	}
}

// ctxError is the error of a request whose context ended: the bound's
// ErrNoAnswer (sent tells whether a connection was made: without one, it
// is ErrNotSent), or executor.Aborted() for the caller's own end.
func (c *Client) ctxError(ctx context.Context, method, op string, sent bool) error {
	cause := context.Cause(ctx)
	if !errors.Is(cause, ErrNoAnswer) {
		return executor.Aborted()
	}
	if !sent {
		return executor.Errorf(executor.ErrUnavailable, "agent at %s: %s %s: %w (no connection within the request's bound)", c.socket, method, op, ErrNotSent)
	}
	return executor.Errorf(executor.ErrUnavailable, "agent at %s: %s %s: %w", c.socket, method, op, cause)
}
