package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// hungBound is how long a test waits for a call that must end on its own
// bounds before it calls the call hung: far past them, so that only a
// missing bound fails it.
const hungBound = time.Minute

// stoppable is an agent that answers its handshake until stop is closed,
// and never answers a run: a SIGSTOPped agent, whose kernel still accepts
// connections, once stopped.
type stoppable struct {
	stop chan struct{}
	srv  *http.Server
	ep   Endpoint
}

func newStoppable(t *testing.T) *stoppable {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	a := &stoppable{stop: make(chan struct{}), ep: Endpoint{Network: "unix", Address: sock}}
	done := make(chan struct{}) // the test is over: every handler returns
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/hello", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-a.stop:
			<-done
			return
		default:
		}
		json.NewEncoder(w).Encode(Hello{Protocol: Protocol})
	})
	mux.HandleFunc("POST /v1/run", func(w http.ResponseWriter, r *http.Request) { <-done })
	a.srv = &http.Server{Handler: mux}
	go a.srv.Serve(l)
	t.Cleanup(func() {
		close(done)
		a.srv.Close()
	})
	return a
}

// within runs fn and fails the test if it has not returned within
// hungBound.
func within[T any](t *testing.T, what string, fn func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(hungBound):
		t.Fatalf("%s: hung (no end within %s)", what, hungBound)
		panic("unreachable")
	}
}

// TestRunStoppedAgent: a foreground call whose agent stops answering ends
// on its own, with an error wrapping ErrNoAnswer (not the caller's abort),
// once a liveness check past its timeout and grace gets no answer; the
// caller set no deadline.
func TestRunStoppedAgent(t *testing.T) {
	defer func(b time.Duration) { ProbeBound = b }(ProbeBound)
	ProbeBound = 200 * time.Millisecond
	a := newStoppable(t)
	c, err := DialEndpoint(context.Background(), a.ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	close(a.stop)
	spec := executor.Spec{Session: "s", Shell: executor.Bash, Command: "true", Timeout: 100 * time.Millisecond, Grace: 100 * time.Millisecond}
	err = within(t, "Run on a stopped agent", func() error {
		_, err := c.Run(context.Background(), spec)
		return err
	})
	if !errors.Is(err, ErrNoAnswer) || !errors.Is(err, executor.ErrUnavailable) || errors.Is(err, executor.ErrAborted) {
		t.Fatalf("Run: %v, want unavailable: %v", err, ErrNoAnswer)
	}
	t.Logf("Run on a stopped agent: %v", err)
}

// TestRunSlowAnswerLiveAgent: a call whose agent answers its liveness
// checks is not ended by them; it ends at its own bound (runSlack past
// its timeout and grace), with ErrNoAnswer too.
func TestRunSlowAnswerLiveAgent(t *testing.T) {
	defer func(s time.Duration) { runSlack = s }(runSlack)
	runSlack = 3 * time.Second
	a := newStoppable(t)
	c, err := DialEndpoint(context.Background(), a.ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec := executor.Spec{Session: "s", Shell: executor.Bash, Command: "true", Timeout: 100 * time.Millisecond, Grace: 100 * time.Millisecond}
	err = within(t, "Run on an agent that never answers it", func() error {
		_, err := c.Run(context.Background(), spec)
		return err
	})
	if !errors.Is(err, ErrNoAnswer) || errors.Is(err, executor.ErrAborted) {
		t.Fatalf("Run: %v, want %v", err, ErrNoAnswer)
	}
	if probe := c.Probe(context.Background()); probe != nil {
		t.Errorf("Probe of the live agent: %v", probe)
	}
}

// TestHandshakeNoAnswer: an agent that accepts connections (the kernel
// does, for a process that never calls accept) and never answers fails
// the dial with ErrNoAnswer, and a Probe of it too; one with no socket at
// all fails with ErrNotSent.
func TestHandshakeNoAnswer(t *testing.T) {
	defer func(h, p time.Duration) { handshakeBound, ProbeBound = h, p }(handshakeBound, ProbeBound)
	handshakeBound, ProbeBound = 200*time.Millisecond, 200*time.Millisecond
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ep := Endpoint{Network: "unix", Address: sock}
	err = within(t, "a dial", func() error { _, err := DialEndpoint(context.Background(), ep); return err })
	if !errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrNotSent) {
		t.Errorf("dial of an agent that never answers: %v, want %v", err, ErrNoAnswer)
	}
	if err := within(t, "a probe", func() error { return ProbeEndpoint(context.Background(), ep) }); !errors.Is(err, ErrNoAnswer) {
		t.Errorf("probe: %v, want %v", err, ErrNoAnswer)
	}

	gone := Endpoint{Network: "unix", Address: filepath.Join(t.TempDir(), "agent.sock")}
	if _, err := DialEndpoint(context.Background(), gone); !errors.Is(err, ErrNotSent) || !errors.Is(err, executor.ErrUnavailable) {
		t.Errorf("dial of no socket: %v, want unavailable: %v", err, ErrNotSent)
	}
}

// TestRunNotSent: a Run on a client whose agent went away (the socket is
// there, nothing listens: an agent killed, its container removed) wraps
// ErrNotSent; a caller's cancellation is still executor.Aborted().
func TestRunNotSent(t *testing.T) {
	a := newStoppable(t)
	c, err := DialEndpoint(context.Background(), a.ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a.srv.Close() // its listener and connections
	spec := executor.Spec{Session: "s", Shell: executor.Bash, Command: "true", Timeout: time.Second, Grace: time.Second}
	for range 2 { // the pooled connection may be noticed closed only now
		_, err = c.Run(context.Background(), spec)
		if errors.Is(err, ErrNotSent) {
			break
		}
	}
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, executor.ErrUnavailable) {
		t.Errorf("Run after the agent went: %v, want unavailable: %v", err, ErrNotSent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Run(ctx, spec); !errors.Is(err, executor.ErrAborted) {
		t.Errorf("Run of a cancelled caller: %v, want aborted", err)
	}
}
