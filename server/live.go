package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/output"
	"github.com/shellbox/shellbox/tools"
)

// Live output of a foreground call (bash, pwsh) while it runs: MCP progress
// notifications for a tools/call that carries a progress token, REST
// server-sent events for a call that asks for text/event-stream. Both go
// through an output.Feed: at most one message per LiveInterval, at most
// LiveBytes of output each; what a slow client could not take is summarized
// ("[… N bytes not streamed …]"), never queued. The result is exactly the
// one the call returns without streaming.
const (
	LiveInterval = 200 * time.Millisecond
	LiveBytes    = 16 << 10
)

// LiveMetaKey is the _meta key of an MCP progress notification that carries
// its output typed, stream by stream: a list of LiveOutput. Its message is
// the same output as text (tools.RenderLive).
const LiveMetaKey = "shellbox/output"

// LiveOutput is one piece of live output as the server sends it: the data
// of one stream as text (invalid UTF-8 replaced), after Skipped bytes of
// output (either stream) that were not streamed.
type LiveOutput struct {
	Stream  string `json:"stream"`
	Text    string `json:"text"`
	Skipped int64  `json:"skipped,omitempty"`
}

func liveOutputs(chunks []executor.Chunk) []LiveOutput {
	out := make([]LiveOutput, len(chunks))
	for i, c := range chunks {
		out[i] = LiveOutput{Stream: c.Stream, Text: strings.ToValidUTF8(string(c.Data), "\uFFFD"), Skipped: c.Skipped}
	}
	return out
}

// streams reports whether tool runs a foreground command that can stream.
func streams(tool string) bool { return tool == tools.ToolBash || tool == tools.ToolPwsh }

// liveFeed starts sending a call's live output with send, from a goroutine
// of its own, until stop is called (after the call returned) or ctx ends.
// It returns the executor.Live to call with, and stop, which waits for the
// last send: everything streamed goes out before the result.
func liveFeed(ctx context.Context, send func([]executor.Chunk) error) (live executor.Live, stop func()) {
	feed := output.NewFeed(LiveBytes)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A failed send (the client is gone) ends the sending; the feed
		// goes on dropping writes with a count, and the call runs on.
		_ = feed.Pump(ctx, LiveInterval, send)
	}()
	return feed.Write, func() {
		feed.Close()
		<-done
	}
}

// mcpLive returns the Live of an MCP tools/call that carries a progress
// token: each batch becomes one notifications/progress whose message is the
// output as text and whose progress is the bytes of output so far (sent or
// skipped). Nil when the call has no token or runs no command.
func mcpLive(ctx context.Context, req *mcp.CallToolRequest, tool string) (executor.Live, func()) {
	if !streams(tool) || req.Session == nil || req.Params == nil {
		return nil, func() {}
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil, func() {}
	}
	var progress int64
	return liveFeed(ctx, func(chunks []executor.Chunk) error {
		for _, c := range chunks {
			progress += int64(len(c.Data)) + c.Skipped
		}
		return req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token,
			Progress:      float64(progress),
			Message:       tools.RenderLive(chunks),
			Meta:          mcp.Meta{LiveMetaKey: liveOutputs(chunks)},
		})
	})
}

// wantsStream reports whether a REST tool call asks for a streamed answer:
// ?stream=1, or text/event-stream in Accept.
func wantsStream(r *http.Request) bool {
	if v := r.URL.Query().Get("stream"); v == "1" || v == "true" {
		return true
	}
	for _, v := range r.Header.Values("Accept") {
		for _, t := range strings.Split(v, ",") {
			if mt, _, _ := strings.Cut(strings.TrimSpace(t), ";"); strings.EqualFold(mt, "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// sseWriter writes a streamed REST call's events. Its header goes out with
// the first event, so a call refused before it ran (limits, shutdown)
// still answers with its plain status and error body. Its methods may be
// called from several goroutines.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex
	started bool
	last    time.Time // of the last write
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// begun reports whether the event stream's header was sent.
func (s *sseWriter) begun() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

func (s *sseWriter) event(name string, v any) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return s.write("event: " + name + "\ndata: " + b.String() + "\n")
}

func (s *sseWriter) write(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
	}
	s.last = time.Now()
	if _, err := io.WriteString(s.w, text); err != nil {
		return err
	}
	return s.rc.Flush()
}

// keepalive writes a comment whenever the stream was silent for every,
// so proxies do not cut a call whose command prints nothing for a while
// (the first one starts the stream). stop ends it and waits for it.
func (s *sseWriter) keepalive(every time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.mu.Lock()
				silent := time.Since(s.last) >= every
				s.mu.Unlock()
				if silent && s.write(": keepalive\n\n") != nil {
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
