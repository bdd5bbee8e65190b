package executortest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// liveRecorder is an Invocation.Live that keeps what it saw (test output is
// small) and says when every one of its markers has arrived.
type liveRecorder struct {
	mu      sync.Mutex
	got     bytes.Buffer
	markers [][]byte
	seen    chan struct{}
	once    sync.Once
}

func newLiveRecorder(markers ...string) *liveRecorder {
	l := &liveRecorder{seen: make(chan struct{})}
	for _, m := range markers {
		l.markers = append(l.markers, []byte(m))
	}
	return l
}

func (l *liveRecorder) live(c executor.Chunk) {
	l.mu.Lock()
	l.got.Write(c.Data)
	has := true
	for _, m := range l.markers {
		has = has && bytes.Contains(l.got.Bytes(), m)
	}
	l.mu.Unlock()
	if has {
		l.once.Do(func() { close(l.seen) })
	}
}

func (l *liveRecorder) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got.String()
}

// liveOutput: a foreground call's output reaches Invocation.Live while the
// command runs. The command prints, then waits for a file that only a second
// call creates, and that call is made once the output before the wait, of
// both streams, was seen live: the order is forced, no timing is assumed
// (stdout and stderr are separate pipes, each read on its own: "warn" may
// reach Live after "ready", so the release waits for both). The result is
// the same text a call without Live gets.
func liveOutput(s *session) {
	flag := s.f("live-flag")
	rec := newLiveRecorder("ready\n", "warn\n")
	cmd := fmt.Sprintf("echo ready; echo warn >&2; until [ -e %s ]; do sleep 0.02; done; rm -f %s; echo after", flag, flag)
	args := bashArgs(cmd)
	done := make(chan tools.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), callBound)
		defer cancel()
		done <- s.in.call(ctx, tools.Invocation{Session: s.id, Tool: tools.ToolBash, Args: json.RawMessage(args), Live: rec.live})
	}()
	select {
	case <-rec.seen:
	case r := <-done:
		s.t.Fatalf("the call ended before its output was seen live (live: %q); result %q", rec.text(), r.Text)
	case <-time.After(callBound):
		s.call(tools.ToolBash, bashArgs("touch "+flag))
		s.t.Fatalf("no live output within %s (live so far: %q)", callBound, rec.text())
	}
	s.want("the releasing call", s.call(tools.ToolBash, bashArgs("touch "+flag)), "(no output)")
	var r tools.Result
	select {
	case r = <-done:
	case <-time.After(callBound + 10*time.Second):
		s.t.Fatalf("the streamed call did not return")
	}
	s.checkInvariants(tools.ToolBash, args, r)
	s.want("the streamed call", r, "ready\nafter\n[stderr]\nwarn")
	got := rec.text()
	if s.suite.h.Transport != nil {
		// A transport's client may hand over its last messages just after
		// the result (the MCP SDK handles notifications on a goroutine of
		// its own): what arrived must be what was written, so far.
		if !strings.HasPrefix("ready\nwarn\nafter\n", got) && !strings.HasPrefix("warn\nready\nafter\n", got) {
			s.t.Errorf("live output %q, want a prefix of ready, warn and after, in the order written", got)
		}
		return
	}
	if got != "ready\nwarn\nafter\n" && got != "warn\nready\nafter\n" {
		s.t.Errorf("live output %q, want ready, warn and after, in the order written", got)
	}
}

// liveBackground: a background start with Live set starts the task as
// without it; its output is for bash_output, never streamed.
func liveBackground(s *session) {
	rec := newLiveRecorder("x")
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	r := s.in.call(ctx, tools.Invocation{Session: s.id, Tool: tools.ToolBash, Args: json.RawMessage(bgArgs("echo streamed-not")), Live: rec.live})
	s.checkInvariants(tools.ToolBash, "background with Live", r)
	bg, ok := r.Value.(*tools.Background)
	if !ok {
		s.t.Fatalf("background start: %T %q", r.Value, r.Text)
	}
	s.waitNotice(bg.TaskID)
	if got := rec.text(); got != "" {
		s.t.Errorf("a background task's output reached Live: %q", got)
	}
}
