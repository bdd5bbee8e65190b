// Package client is the Go client of `shellbox serve`: the REST API (tool
// calls, sessions, approvals, events) and helpers for its MCP endpoint. The
// CLI's client mode is built on it.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/tools"
)

// Client talks to one server as one tenant (its token's). Every POST
// carries a new Idempotency-Key: the server runs it once however often it
// arrives, so net/http's transport may, and does, resend it on a new
// connection when a kept-alive one was closed under it (a server going
// away behind a load balancer).
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the server at baseURL (e.g. http://host:8080)
// authenticating with token. hc nil means http.DefaultClient.
func New(baseURL, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimSuffix(baseURL, "/"), token: token, http: hc}
}

// Error is a non-2xx answer: its status and the server's error object.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("server answered %d", e.Status)
	}
	return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Code)
}

// maxResponse bounds what the client reads of one answer.
const maxResponse = 64 << 20

func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	resp, err := c.send(ctx, method, path, rd)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return errorOf(resp.StatusCode, b)
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method == http.MethodPost {
		req.Header.Set(server.IdempotencyHeader, rand.Text())
	}
	return c.http.Do(req)
}

func errorOf(status int, b []byte) error {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error.Code == "" {
		return &Error{Status: status, Message: strings.TrimSpace(string(b))}
	}
	return &Error{Status: status, Code: e.Error.Code, Message: e.Error.Message}
}

// Call runs one tool call in the session. The Result is exactly what an
// in-process Toolset.Call returns (typed Value included), error results too;
// the error is non-nil only when the call did not run (auth, limits, the
// server going away).
func (c *Client) Call(ctx context.Context, session, tool string, args json.RawMessage) (tools.Result, error) {
	path := "/v1/sessions/" + url.PathEscape(session) + "/tools/" + url.PathEscape(tool)
	resp, err := c.send(ctx, http.MethodPost, path, bytes.NewReader(args))
	if err != nil {
		return tools.Result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return tools.Result{}, err
	}
	return decodeToolResponse(resp.StatusCode, b)
}

// CallStream is Call with the output of a foreground command (bash, pwsh)
// while it runs: the server answers with server-sent events, and live is
// called with each "output" event, in order, on this goroutine, before
// CallStream returns the result, which is exactly Call's. Output the
// server could not send in time is counted in LiveOutput.Skipped. Tools
// that run no command just return their result.
func (c *Client) CallStream(ctx context.Context, session, tool string, args json.RawMessage, live func(server.LiveOutput)) (tools.Result, error) {
	path := "/v1/sessions/" + url.PathEscape(session) + "/tools/" + url.PathEscape(tool) + "?stream=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(args))
	if err != nil {
		return tools.Result{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(server.IdempotencyHeader, rand.Text())
	resp, err := c.http.Do(req)
	if err != nil {
		return tools.Result{}, err
	}
	defer resp.Body.Close()
	if mt, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";"); mt != "text/event-stream" {
		// Refused before it ran: the plain answer.
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
		if err != nil {
			return tools.Result{}, err
		}
		return decodeToolResponse(resp.StatusCode, b)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var event string
	var data []byte
	for {
		line, err := readLine(br, maxResponse)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the call's event stream ended without a result")
			}
			return tools.Result{}, err
		}
		switch {
		case len(line) == 0:
			switch event {
			case "output":
				var o server.LiveOutput
				if err := json.Unmarshal(data, &o); err != nil {
					return tools.Result{}, fmt.Errorf("malformed output event: %w", err)
				}
				if live != nil {
					live(o)
				}
			case "result":
				return decodeToolResponse(http.StatusOK, data)
			case "error":
				return tools.Result{}, errorOf(http.StatusOK, data)
			}
			event, data = "", nil
		case bytes.HasPrefix(line, []byte("event:")):
			event = strings.TrimSpace(string(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(line[len("data:"):], []byte(" "))...)
		}
	}
}

// readLine reads one line of at most limit bytes, without its line ending.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, fmt.Errorf("an event line over %d bytes", limit)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(line[:len(line)-1], []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
		default:
			return nil, err
		}
	}
}

// decodeToolResponse is the Result of a tool call's answer body b.
func decodeToolResponse(status int, b []byte) (tools.Result, error) {
	var body struct {
		Text    *string         `json:"text"`
		IsError bool            `json:"isError"`
		Result  json.RawMessage `json:"result"`
		Notices []tools.Notice  `json:"notices"`
	}
	if err := json.Unmarshal(b, &body); err != nil || body.Text == nil {
		if status/100 == 2 {
			return tools.Result{}, fmt.Errorf("malformed tool response: %q", clip(b))
		}
		return tools.Result{}, errorOf(status, b)
	}
	v, err := DecodeValue(body.Result)
	if err != nil {
		return tools.Result{}, err
	}
	return tools.Result{Text: *body.Text, IsError: body.IsError, Value: v, Notices: body.Notices}, nil
}

// DecodeValue turns a tool result's JSON "result" into its typed value
// (*tools.Foreground, *tools.Background, *tools.TaskOutput, *tools.TaskKill
// or *tools.ErrorValue) by its kind.
func DecodeValue(raw json.RawMessage) (any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var k struct{ Kind string }
	if err := json.Unmarshal(raw, &k); err != nil {
		return nil, fmt.Errorf("tool result: %w", err)
	}
	var v any
	switch k.Kind {
	case "foreground":
		v = new(tools.Foreground)
	case "background":
		v = new(tools.Background)
	case "output":
		v = new(tools.TaskOutput)
	case "kill":
		v = new(tools.TaskKill)
	case "error":
		v = new(tools.ErrorValue)
	default:
		return nil, fmt.Errorf("tool result of unknown kind %q", k.Kind)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("tool result: %w", err)
	}
	return v, nil
}

// Tools lists the tool definitions.
func (c *Client) Tools(ctx context.Context) ([]tools.Definition, error) {
	var out struct{ Tools []tools.Definition }
	err := c.do(ctx, http.MethodGet, "/v1/tools", nil, &out)
	return out.Tools, err
}

// Sessions lists the tenant's sessions.
func (c *Client) Sessions(ctx context.Context) ([]server.SessionInfo, error) {
	var out struct{ Sessions []server.SessionInfo }
	err := c.do(ctx, http.MethodGet, "/v1/sessions", nil, &out)
	return out.Sessions, err
}

// CreateSession creates a session now, with options within the policy.
func (c *Client) CreateSession(ctx context.Context, id string, opts server.SessionOptions) (server.SessionInfo, error) {
	var out server.SessionInfo
	err := c.do(ctx, http.MethodPost, "/v1/sessions", server.CreateSessionRequest{ID: id, SessionOptions: opts}, &out)
	return out, err
}

// Session returns one session.
func (c *Client) Session(ctx context.Context, id string) (server.SessionInfo, error) {
	var out server.SessionInfo
	err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, &out)
	return out, err
}

// DeleteSession removes a session, its sandbox and its tasks.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, nil)
}

// SuspendSession suspends the session: its background tasks killed, its
// workspace stored, its sandbox removed (POST /v1/sessions/{id}/suspend).
func (c *Client) SuspendSession(ctx context.Context, id string) (server.SessionInfo, error) {
	var out server.SessionInfo
	err := c.do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/suspend", nil, &out)
	return out, err
}

// ResumeSession gives a suspended session its sandbox back now, from
// snapshot when not "" (POST /v1/sessions/{id}/resume).
func (c *Client) ResumeSession(ctx context.Context, id, snapshot string) (server.SessionInfo, error) {
	var out server.SessionInfo
	err := c.do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/resume", server.ResumeRequest{Snapshot: snapshot}, &out)
	return out, err
}

// Approvals lists the tenant's approvals; state "" means all.
func (c *Client) Approvals(ctx context.Context, state string) ([]approval.Approval, error) {
	var out struct{ Approvals []approval.Approval }
	path := "/v1/approvals"
	if state != "" {
		path += "?state=" + url.QueryEscape(state)
	}
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out.Approvals, err
}

// Approval returns one of the tenant's approvals, as the server holds it.
func (c *Client) Approval(ctx context.Context, id string) (approval.Approval, error) {
	var out approval.Approval
	err := c.do(ctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(id), nil, &out)
	return out, err
}

// Decide approves or denies an approval.
func (c *Client) Decide(ctx context.Context, id string, approve bool, approver, reason string) (approval.Approval, error) {
	verb := "deny"
	if approve {
		verb = "approve"
	}
	var out approval.Approval
	err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/"+verb,
		server.DecisionRequest{Approver: approver, Reason: reason}, &out)
	return out, err
}

// ErrDropped: the server dropped the stream because the reader fell behind.
var ErrDropped = errors.New("event stream dropped by the server: the reader fell behind")

// Events follows the event stream of a session (all the tenant's sessions
// when session is "") and calls fn with each event until ctx is done, fn
// returns an error, or the stream ends. It returns ErrDropped after the
// server's "dropped" event, and nil when the server closed the stream.
func (c *Client) Events(ctx context.Context, session string, fn func(eventstream.Event) error) error {
	es, err := c.Subscribe(ctx, session)
	if err != nil {
		return err
	}
	defer es.Close()
	for {
		e, err := es.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}

// Subscribe opens the event stream of a session (all the tenant's sessions
// when session is ""). It returns once the server has subscribed the
// stream: every event published after it returns is read by Next, which a
// caller that must not miss an event (a background task's notice) needs
// before it starts the task. ctx bounds the whole stream; Close ends it.
func (c *Client) Subscribe(ctx context.Context, session string) (*EventStream, error) {
	path := "/v1/events"
	if session != "" {
		path = "/v1/sessions/" + url.PathEscape(session) + "/events"
	}
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, errorOf(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &EventStream{ctx: ctx, body: resp.Body, sc: sc}, nil
}

// EventStream is an open event stream (Client.Subscribe). It is read by
// one goroutine; Close may be called from any.
type EventStream struct {
	ctx  context.Context
	body io.ReadCloser
	sc   *bufio.Scanner
}

// Next returns the next event. It returns ErrDropped after the server's
// "dropped" event, io.EOF when the server closed the stream, and ctx's
// error once ctx is done.
func (s *EventStream) Next() (eventstream.Event, error) {
	for s.sc.Scan() {
		data, ok := strings.CutPrefix(s.sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e eventstream.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return eventstream.Event{}, fmt.Errorf("event: %w", err)
		}
		if e.Type == eventstream.EventDropped {
			return eventstream.Event{}, ErrDropped
		}
		return e, nil
	}
	if s.ctx.Err() != nil {
		return eventstream.Event{}, s.ctx.Err()
	}
	if err := s.sc.Err(); err != nil {
		return eventstream.Event{}, err
	}
	return eventstream.Event{}, io.EOF
}

// Close ends the stream.
func (s *EventStream) Close() error { return s.body.Close() }

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// Usage returns what sessions used (GET /v1/usage): q holds from, to,
// session and tenant as the route takes them.
func (c *Client) Usage(ctx context.Context, q url.Values) (server.UsageReport, error) {
	var rep server.UsageReport
	err := c.do(ctx, http.MethodGet, "/v1/usage?"+q.Encode(), nil, &rep)
	return rep, err
}

// UsageCSV copies GET /v1/usage as CSV to w.
func (c *Client) UsageCSV(ctx context.Context, q url.Values, w io.Writer) error {
	q = maps.Clone(q)
	if q == nil {
		q = url.Values{}
	}
	q.Set("format", "csv")
	resp, err := c.send(ctx, http.MethodGet, "/v1/usage?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
		return errorOf(resp.StatusCode, b)
	}
	_, err = io.Copy(w, io.LimitReader(resp.Body, maxResponse))
	return err
}
