package agentapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// MaxResponseBytes bounds what the client reads of one answer. Answers are
// bounded by the spec's tail and buffer sizes; this only keeps a broken
// agent from making the server read without end.
const MaxResponseBytes = 256 << 20

// abortSlack is how long, beyond the spec's grace, a cancelled Run waits for
// the agent to report the tree gone before it closes the connection (which
// kills the tree too) and returns. The agent's kill loop gives up on
// unkillable processes after 10 s.
const abortSlack = 15 * time.Second

// Client speaks the protocol to one agent. It implements Runner: everything
// of executor.BashExecutor but Resolve, which the caller does (see Runner).
// It is safe for concurrent use; calls share a pool of keep-alive
// connections.
type Client struct {
	socket string // the endpoint, for errors
	token  string
	tr     *http.Transport
	hc     *http.Client
	hello  Hello
}

var _ Runner = (*Client)(nil)

// Dial connects to the agent listening on the unix socket socketPath (see
// DialEndpoint).
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	return DialEndpoint(ctx, Endpoint{Network: "unix", Address: socketPath})
}

// DialEndpoint connects to the agent at ep and does the handshake: an agent
// of another protocol version is refused with a *VersionError naming both
// versions. Every request carries ep.Token, if set, as a bearer token. ctx
// bounds the handshake only, which has a bound of its own besides
// (handshakeBound): an agent that accepts the connection and never answers
// fails the dial with ErrNoAnswer.
func DialEndpoint(ctx context.Context, ep Endpoint) (*Client, error) {
	c := newClient(ep)
	var h Hello
	hctx, cancel := bounded(ctx, handshakeBound)
	defer cancel()
	if err := c.do(hctx, http.MethodGet, "/v1/hello", nil, nil, &h); err != nil {
		// do's errors name the socket and the endpoint already.
		c.Close()
		return nil, err
	}
	if h.Protocol != Protocol {
		c.Close()
		return nil, &VersionError{Socket: ep.Address, Agent: h}
	}
	c.hello = h
	return c, nil
}

// newClient returns a client of the agent at ep, without a handshake.
func newClient(ep Endpoint) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return ep.Dial(ctx)
		},
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		// File transfers stream megabytes: fewer, larger reads and writes
		// (128 KiB of buffers per connection, 4x the default; 3x the
		// download throughput of a 100 MB file).
		WriteBufferSize: 64 << 10,
		ReadBufferSize:  64 << 10,
	}
	return &Client{socket: ep.Address, token: ep.Token, tr: tr, hc: &http.Client{Transport: tr}}
}

// Hello returns the agent's handshake answer: its version, root and home.
func (c *Client) Hello() Hello { return c.hello }

// Socket returns the address the client dials (a socket path, or
// host:port).
func (c *Client) Socket() string { return c.socket }

// Close closes the idle connections. Calls in flight go on; the agent's
// tasks are not affected.
func (c *Client) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// Run runs spec in the foreground in the agent. ctx belongs to the caller:
// when it is cancelled, the client asks the agent to kill the command's tree
// and waits until the agent reports it gone before returning
// executor.Aborted() (a command that ended on its own meanwhile reports its
// result, as with local.Executor). If the agent does not answer within the
// grace period plus 15 s, the client closes the connection, which makes the
// agent kill the tree too, and returns. The command's timeout is enforced by
// the agent whatever becomes of the client.
//
// The caller need not bound ctx for a stopped or wedged agent: once the
// call is past its timeout and grace (when the agent has killed the tree
// and should be answering), its agent is checked every few seconds (Probe)
// on a connection of its own, and the call ends with an error wrapping
// ErrNoAnswer when a check gets no answer; in any case it ends runSlack
// past its timeout and grace. A Run that could not reach the agent at all
// wraps ErrNotSent: no command started.
func (c *Client) Run(ctx context.Context, spec executor.Spec) (executor.Result, error) {
	if ctx.Err() != nil {
		return executor.Result{}, executor.Aborted()
	}
	call := newCallName()
	// The request runs under its own context: cancelling ctx must not drop
	// the connection before the agent has reported the tree gone.
	rctx, stopCause := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := func() { stopCause(nil) }
	if spec.Timeout > 0 {
		limit := spec.Timeout + spec.Grace + runSlack
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeoutCause(rctx, limit,
			fmt.Errorf("%w within %s of a call of %s (its timeout, grace and %s)", ErrNoAnswer, limit, spec.Timeout, runSlack))
		defer cancel()
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			c.watch(rctx, spec, stopCause)
		}()
		defer func() { <-watched }()
	}
	defer stop()
	unwatch := context.AfterFunc(ctx, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if c.do(cctx, http.MethodPost, "/v1/calls/"+call+"/cancel", nil, nil, nil) != nil {
			stop() // the agent kills the tree when the connection drops
			return
		}
		time.AfterFunc(spec.Grace+abortSlack, stop)
	})
	defer unwatch()
	var res executor.Result
	var err error
	if spec.Live != nil {
		res, err = c.runStreamed(rctx, call, spec)
	} else {
		err = c.do(rctx, http.MethodPost, "/v1/run", map[string]string{HeaderCall: call}, spec, &res)
	}
	if err != nil {
		if ctx.Err() != nil {
			return executor.Result{}, executor.Aborted()
		}
		return executor.Result{}, err
	}
	return res, nil
}

// runStreamed runs spec asking for a streamed answer, and hands each output
// frame to spec.Live as it is read. An agent that answers with a plain
// Result (one that predates streaming) is a run without live output.
func (c *Client) runStreamed(ctx context.Context, call string, spec executor.Spec) (executor.Result, error) {
	const op = "/v1/run"
	resp, err := c.send(ctx, http.MethodPost, op, op, map[string]string{HeaderCall: call, "Accept": ContentTypeStream}, spec)
	if err != nil {
		return executor.Result{}, err
	}
	defer resp.Body.Close()
	mt, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	if resp.StatusCode/100 != 2 || !strings.EqualFold(strings.TrimSpace(mt), ContentTypeStream) {
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
		switch {
		case err != nil:
			return executor.Result{}, c.readError(ctx, http.MethodPost, op, err)
		case len(b) > MaxResponseBytes:
			return executor.Result{}, executor.Errorf(executor.ErrUnavailable, "agent at %s: POST %s: answer over %d bytes", c.socket, op, MaxResponseBytes)
		case resp.StatusCode/100 != 2:
			return executor.Result{}, c.statusError(http.MethodPost, op, resp, b)
		}
		var res executor.Result
		if err := json.Unmarshal(b, &res); err != nil {
			return executor.Result{}, executor.Errorf(executor.ErrUnavailable, "agent at %s: POST %s: bad answer: %w", c.socket, op, err)
		}
		return res, nil
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(br, MaxResponseBytes)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // a stream ends with its result
			}
			return executor.Result{}, c.readError(ctx, http.MethodPost, op, err)
		}
		var f Frame
		if err := json.Unmarshal(line, &f); err != nil {
			return executor.Result{}, executor.Errorf(executor.ErrUnavailable, "agent at %s: POST %s: bad frame: %w", c.socket, op, err)
		}
		switch {
		case f.Output != nil:
			spec.Live(*f.Output)
		case f.Result != nil:
			return *f.Result, nil
		case f.Error != nil:
			return executor.Result{}, decodeError(*f.Error)
		}
	}
}

// errLongLine is a frame over the client's bound.
var errLongLine = errors.New("frame over the size bound")

// readLine reads one line of at most limit bytes, without its newline.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > limit+1 {
			return nil, errLongLine
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}

// Start starts spec as a background task in the agent. The task belongs to
// the agent: it outlives ctx, the client and the server.
func (c *Client) Start(ctx context.Context, spec executor.Spec) (executor.Task, error) {
	var st Started
	if err := c.doBounded(ctx, http.MethodPost, "/v1/start", nil, spec, &st); err != nil {
		return nil, err
	}
	return &task{c: c, session: spec.Session, id: st.ID}, nil
}

// Task finds a task of session by id in the agent: a restarted server
// re-adopts the tasks it started before with it.
func (c *Client) Task(ctx context.Context, session, id string) (executor.Task, error) {
	var ti TaskInfo
	if err := c.doBounded(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id)+"?session="+url.QueryEscape(session), nil, nil, &ti); err != nil {
		return nil, err
	}
	return &task{c: c, session: session, id: id}, nil
}

// Tasks lists the background tasks of session the agent keeps, running and
// finished, ordered by id.
func (c *Client) Tasks(ctx context.Context, session string) ([]TaskInfo, error) {
	var l TaskList
	if err := c.doBounded(ctx, http.MethodGet, "/v1/tasks?session="+url.QueryEscape(session), nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Tasks, nil
}

// Has reports whether the agent can run shell; false when it cannot be
// asked.
func (c *Client) Has(ctx context.Context, session string, shell executor.Shell) bool {
	var h HasAnswer
	q := url.Values{"session": {session}, "shell": {string(shell)}}
	return c.doBounded(ctx, http.MethodGet, "/v1/has?"+q.Encode(), nil, nil, &h) == nil && h.Has
}

// Activity returns what runs in the sandbox now (GET /v1/activity).
func (c *Client) Activity(ctx context.Context) (Activity, error) {
	var a Activity
	err := c.doBounded(ctx, http.MethodGet, "/v1/activity", nil, nil, &a)
	return a, err
}

// ExitEndpoint asks the agent at ep to end now (POST /v1/exit), without a
// handshake: the server is done with its sandbox, which is being deleted,
// and its agent need not serve through the rest of the termination grace
// (a pod's agent with --serve-through-grace does until told). An agent
// without the endpoint (404) or gone already is left to the grace's end;
// the error says which.
func ExitEndpoint(ctx context.Context, ep Endpoint) error {
	c := newClient(ep)
	defer c.Close()
	return c.doBounded(ctx, http.MethodPost, "/v1/exit", nil, nil, nil)
}

// Log returns the agent's recent log lines (GET /v1/log).
func (c *Client) Log(ctx context.Context) (string, error) {
	var l LogAnswer
	if err := c.doBounded(ctx, http.MethodGet, "/v1/log", nil, nil, &l); err != nil {
		return "", err
	}
	return l.Log, nil
}

// task is a handle on a background task in the agent.
type task struct {
	c           *Client
	session, id string
}

var _ executor.Task = (*task)(nil)

func (t *task) ID() string { return t.id }

func (t *task) path(op string) string { return "/v1/tasks/" + url.PathEscape(t.id) + "/" + op }

// Read returns the output since the previous Read (of any handle, in any
// server) and the status.
func (t *task) Read(ctx context.Context) (executor.Output, error) {
	var o executor.Output
	err := t.c.doBounded(ctx, http.MethodPost, t.path("read"), nil, TaskRef{Session: t.session}, &o)
	return o, err
}

// Wait blocks until the task ends or ctx is done (executor.Aborted()).
func (t *task) Wait(ctx context.Context) (executor.Result, error) {
	var r executor.Result
	err := t.c.do(ctx, http.MethodPost, t.path("wait"), nil, TaskRef{Session: t.session}, &r)
	return r, err
}

// Kill kills the task's tree. The request is sent under its own context, so
// a caller that goes away once Kill was called still gets the kill done; it
// gets executor.Aborted() back.
func (t *task) Kill(ctx context.Context) (executor.KillResult, error) {
	type outcome struct {
		k   executor.KillResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		kctx, cancel := bounded(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		var k executor.KillResult
		err := t.c.do(kctx, http.MethodPost, t.path("kill"), nil, TaskRef{Session: t.session}, &k)
		done <- outcome{k, err}
	}()
	select {
	case o := <-done:
		return o.k, o.err
	case <-ctx.Done():
		return executor.KillResult{}, executor.Aborted()
	}
}

// do sends one request and decodes its answer into out (nil: none). An
// error answer becomes an error of its class with the agent's text; a
// failure to reach the agent is executor.ErrUnavailable, or
// executor.Aborted() when ctx ended.
func (c *Client) do(ctx context.Context, method, path string, header map[string]string, in, out any) error {
	resp, err := c.send(ctx, method, path, path, header, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return c.readError(ctx, method, path, err)
	}
	if len(b) > MaxResponseBytes {
		return executor.Errorf(executor.ErrUnavailable, "agent at %s: %s %s: answer over %d bytes", c.socket, method, path, MaxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		return c.statusError(method, path, resp, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return executor.Errorf(executor.ErrUnavailable, "agent at %s: %s %s: bad answer: %w", c.socket, method, path, err)
	}
	return nil
}

// doBounded is do within requestBound (and ctx): for requests that make
// the agent do little, whose answer is due at once.
func (c *Client) doBounded(ctx context.Context, method, path string, header map[string]string, in, out any) error {
	ctx, cancel := bounded(ctx, requestBound)
	defer cancel()
	return c.do(ctx, method, path, header, in, out)
}

// send sends one request for target (a path and query) and returns the
// response, whatever its status; op names the request in errors (target
// without its query, when that could be long). A failure to reach the agent
// is executor.ErrUnavailable, or executor.Aborted() when ctx ended.
func (c *Client) send(ctx context.Context, method, target, op string, header map[string]string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("agentapi: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return c.roundTrip(ctx, req, method, op)
}

// request is a request to the agent for target with the protocol's and
// the token's headers.
func (c *Client) request(ctx context.Context, method, target string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+target, body)
	if err != nil {
		return nil, fmt.Errorf("agentapi: %w", err)
	}
	req.Header.Set(HeaderProtocol, strconv.Itoa(Protocol))
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// roundTrip sends req and returns the response, whatever its status; a
// failure of an upload's body (bodyError) is returned as it is, one to
// reach the agent is ErrUnavailable, or executor.Aborted() when ctx ended.
//
// A request that got no connection is ErrNotSent; one whose bound
// (bounded) ran out after it got one is ErrNoAnswer.
func (c *Client) roundTrip(ctx context.Context, req *http.Request, method, op string) (*http.Response, error) {
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { sent.Store(true) },
	}))
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, c.ctxError(ctx, method, op, sent.Load())
		}
		var be *bodyError
		if errors.As(err, &be) {
			return nil, be
		}
		if !sent.Load() {
			return nil, executor.Errorf(executor.ErrUnavailable, "agent at %s: %s %s: %w", c.socket, method, op, notSent{unwrapURL(err)})
		}
		return nil, executor.Errorf(executor.ErrUnavailable, "agent at %s: %s %s: %w", c.socket, method, op, unwrapURL(err))
	}
	return resp, nil
}

// readError is a failure to read an answer's body.
func (c *Client) readError(ctx context.Context, method, op string, err error) error {
	if ctx.Err() != nil {
		return c.ctxError(ctx, method, op, true)
	}
	return executor.Errorf(executor.ErrUnavailable, "agent at %s: %s %s: read answer: %w", c.socket, method, op, err)
}

// statusError is the error of a non-2xx answer whose body is b: the agent's
// error, of its class, or ErrUnavailable naming the status when the body is
// not one.
func (c *Client) statusError(method, op string, resp *http.Response, b []byte) error {
	var e Error
	if json.Unmarshal(b, &e) != nil || e.Class == "" {
		return executor.Errorf(executor.ErrUnavailable, "agent at %s: %s %s: %s", c.socket, method, op, resp.Status)
	}
	return decodeError(e)
}

// unwrapURL drops net/http's `Post "http://agent/v1/run":` prefix: the
// socket is the useful address.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// newCallName returns a random name for a foreground call.
func newCallName() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
