package client_test

// Interop: clients nobody here wrote, at both MCP revisions, over streamable
// HTTP and stdio, against a real server on the local backend (no engine).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	m3client "github.com/mark3labs/mcp-go/client"
	m3transport "github.com/mark3labs/mcp-go/client/transport"
	m3 "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
)

// interopResult is a tool result as any client reports it.
type interopResult struct {
	texts      []string
	isError    bool
	structured json.RawMessage
	meta       json.RawMessage
}

// interopClient is one MCP client library, connected.
type interopClient interface {
	revision() string
	tools(ctx context.Context) (map[string]json.RawMessage, error)
	// call calls a tool; meta is added to the request's _meta.
	call(ctx context.Context, tool string, args, meta map[string]any) (interopResult, error)
	// notices are the notifications/message of logger "shellbox" received.
	notices() <-chan json.RawMessage
	close()
}

// --- github.com/modelcontextprotocol/go-sdk ---

type sdkClient struct {
	cs    *mcp.ClientSession
	notes chan json.RawMessage
}

func newSDKClient(t *testing.T, tr mcp.Transport, version string) *sdkClient {
	t.Helper()
	c := &sdkClient{notes: make(chan json.RawMessage, 16)}
	cl := mcp.NewClient(&mcp.Implementation{Name: "interop-go-sdk", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			if req.Params.Logger == server.NoticeLogger {
				b, _ := json.Marshal(req.Params.Data)
				c.notes <- b
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := cl.Connect(ctx, tr, opts)
	if err != nil {
		t.Fatalf("go-sdk connect (%q): %v", version, err)
	}
	c.cs = cs
	if c.revision() < server.Revision20260728 {
		if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.close)
	return c
}

func (c *sdkClient) revision() string                { return c.cs.InitializeResult().ProtocolVersion }
func (c *sdkClient) notices() <-chan json.RawMessage { return c.notes }
func (c *sdkClient) close()                          { c.cs.Close() }

func (c *sdkClient) tools(ctx context.Context) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for tl, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		out[tl.Name], _ = json.Marshal(tl.InputSchema)
	}
	return out, nil
}

func (c *sdkClient) call(ctx context.Context, tool string, args, meta map[string]any) (interopResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if len(meta) > 0 {
		p.Meta = mcp.Meta{}
		for k, v := range meta {
			p.Meta[k] = v
		}
	}
	res, err := c.cs.CallTool(ctx, p)
	if err != nil {
		return interopResult{}, err
	}
	r := interopResult{isError: res.IsError}
	for _, ct := range res.Content {
		r.texts = append(r.texts, ct.(*mcp.TextContent).Text)
	}
	r.structured, _ = json.Marshal(res.StructuredContent)
	r.meta, _ = json.Marshal(res.Meta)
	return r, nil
}

// --- github.com/mark3labs/mcp-go ---

type m3Client struct {
	c     *m3client.Client
	rev   string
	notes chan json.RawMessage
}

func newM3Client(t *testing.T, tr m3transport.Interface) *m3Client {
	t.Helper()
	c := &m3Client{c: m3client.NewClient(tr), notes: make(chan json.RawMessage, 16)}
	c.c.OnNotification(func(n m3.JSONRPCNotification) {
		if n.Method != "notifications/message" || n.Params.AdditionalFields["logger"] != server.NoticeLogger {
			return
		}
		b, _ := json.Marshal(n.Params.AdditionalFields["data"])
		c.notes <- b
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.c.Start(ctx); err != nil {
		t.Fatalf("mcp-go start: %v", err)
	}
	ir, err := c.c.Initialize(ctx, m3.InitializeRequest{})
	if err != nil {
		t.Fatalf("mcp-go initialize: %v", err)
	}
	c.rev = ir.ProtocolVersion
	// Per request on 2026-07-28, logging/setLevel before.
	if err := c.c.SetLevel(ctx, m3.SetLevelRequest{Params: m3.SetLevelParams{Level: m3.LoggingLevelInfo}}); err != nil {
		t.Fatalf("mcp-go set level: %v", err)
	}
	t.Cleanup(c.close)
	return c
}

func (c *m3Client) revision() string                { return c.rev }
func (c *m3Client) notices() <-chan json.RawMessage { return c.notes }
func (c *m3Client) close()                          { c.c.Close() }

func (c *m3Client) tools(ctx context.Context) (map[string]json.RawMessage, error) {
	res, err := c.c.ListTools(ctx, m3.ListToolsRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]json.RawMessage{}
	for _, tl := range res.Tools {
		if len(tl.RawInputSchema) > 0 {
			out[tl.Name] = tl.RawInputSchema
		} else {
			out[tl.Name], _ = json.Marshal(tl.InputSchema)
		}
	}
	return out, nil
}

func (c *m3Client) call(ctx context.Context, tool string, args, meta map[string]any) (interopResult, error) {
	req := m3.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	if len(meta) > 0 {
		req.Params.Meta = &m3.Meta{AdditionalFields: meta}
	}
	res, err := c.c.CallTool(ctx, req)
	if err != nil {
		return interopResult{}, err
	}
	r := interopResult{isError: res.IsError}
	for _, ct := range res.Content {
		tc, ok := ct.(m3.TextContent)
		if !ok {
			return r, fmt.Errorf("content %T, want text", ct)
		}
		r.texts = append(r.texts, tc.Text)
	}
	r.structured, _ = json.Marshal(res.StructuredContent)
	r.meta, _ = json.Marshal(res.Meta)
	return r, nil
}

// --- the clients over each transport ---

// interopCase connects one client library at one revision; session names
// the sandbox session (the Shellbox-Session header over HTTP; over stdio
// the server's own, given to ServeStdio).
type interopCase struct {
	name    string
	want    string // the revision the client must end up on
	connect func(t *testing.T, session string) interopClient
}

func httpCases(url string) []interopCase {
	headers := func(session string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + servertest.TokenAcme, server.SessionHeader: session}
	}
	return []interopCase{
		{"go-sdk/default", server.Revision20260728, func(t *testing.T, session string) interopClient {
			return newSDKClient(t, client.MCPTransport(url, servertest.TokenAcme, session, nil), "")
		}},
		{"go-sdk/2025-11-25", "2025-11-25", func(t *testing.T, session string) interopClient {
			return newSDKClient(t, client.MCPTransport(url, servertest.TokenAcme, session, nil), "2025-11-25")
		}},
		{"mcp-go/default", server.Revision20260728, func(t *testing.T, session string) interopClient {
			tr, err := m3transport.NewStreamableHTTP(url, m3transport.WithHTTPHeaders(headers(session)))
			if err != nil {
				t.Fatal(err)
			}
			return newM3Client(t, tr)
		}},
	}
}

// stdioServer serves MCP over pipes as `shellbox mcp` does, as session s.
func stdioServer(t *testing.T, srv *server.Server, session string) (io.Reader, io.WriteCloser) {
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeStdio(ctx, "acme", session, sr, sw)
		sw.Close()
	}()
	t.Cleanup(func() {
		cw.Close()
		cancel()
		<-done
	})
	return cr, cw
}

func stdioCases(srv *server.Server) []interopCase {
	return []interopCase{
		{"go-sdk/default", server.Revision20260728, func(t *testing.T, session string) interopClient {
			r, w := stdioServer(t, srv, session)
			return newSDKClient(t, &mcp.IOTransport{Reader: io.NopCloser(r), Writer: w}, "")
		}},
		{"go-sdk/2025-11-25", "2025-11-25", func(t *testing.T, session string) interopClient {
			r, w := stdioServer(t, srv, session)
			return newSDKClient(t, &mcp.IOTransport{Reader: io.NopCloser(r), Writer: w}, "2025-11-25")
		}},
		{"mcp-go/default", server.Revision20260728, func(t *testing.T, session string) interopClient {
			r, w := stdioServer(t, srv, session)
			return newM3Client(t, m3transport.NewIO(r, w, io.NopCloser(strings.NewReader(""))))
		}},
	}
}

func TestInteropHTTP(t *testing.T) {
	b := servertest.NewLocalBackend(t)
	srv := servertest.Start(t, b, nil)
	for i, c := range httpCases(srv.URL + "/mcp") {
		t.Run(c.name, func(t *testing.T) { interop(t, b, c, fmt.Sprintf("http-%d", i)) })
	}
}

func TestInteropStdio(t *testing.T) {
	b := servertest.NewLocalBackend(t)
	srv, err := server.New(server.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	b.Notify = srv.Notify
	for i, c := range stdioCases(srv) {
		t.Run(c.name, func(t *testing.T) { interop(t, b, c, fmt.Sprintf("stdio-%d", i)) })
	}
}

var taskRE = regexp.MustCompile(`^started background task (\S+)$`)

// interop runs the whole exchange with one client.
func interop(t *testing.T, b *servertest.LocalBackend, c interopCase, session string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.connect(t, session)
	if cl.revision() != c.want {
		t.Fatalf("negotiated revision %q, want %q", cl.revision(), c.want)
	}
	must := func(tool string, args, meta map[string]any) interopResult {
		t.Helper()
		r, err := cl.call(ctx, tool, args, meta)
		if err != nil {
			t.Fatalf("%s %v: %v", tool, args, err)
		}
		return r
	}

	// Tools, with the schemas the Toolset defines.
	got, err := cl.tools(ctx)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	ts, _ := b.Toolset(ctx, "acme")
	var names []string
	for _, d := range ts.Definitions(ctx, session) {
		names = append(names, d.Name)
		if !sameJSON(got[d.Name], d.InputSchema) {
			t.Errorf("%s schema:\n%s\nwant\n%s", d.Name, got[d.Name], d.InputSchema)
		}
	}
	gotNames := slices.Sorted(func(yield func(string) bool) {
		for n := range got {
			if !yield(n) {
				return
			}
		}
	})
	slices.Sort(names)
	if !slices.Equal(gotNames, names) {
		t.Errorf("tools %v, want %v", gotNames, names)
	}

	// Results: text exact, isError only for errors, structured content.
	r := must("bash", map[string]any{"command": "echo hi; echo oops >&2; exit 2", "description": "say hi"}, nil)
	if r.isError || len(r.texts) != 1 || r.texts[0] != "hi\n[stderr]\noops\n[exit code: 2]" {
		t.Fatalf("bash: %+v", r)
	}
	if !strings.Contains(string(r.structured), `"exitCode":2`) {
		t.Errorf("structuredContent: %s", r.structured)
	}
	r = must("bash", map[string]any{"command": "echo $DSH_SESSION_ID", "description": "which session"}, nil)
	if r.texts[0] != session {
		t.Errorf("session: %q, want %q", r.texts[0], session)
	}
	r = must("bash_output", map[string]any{"task_id": "nope"}, nil)
	if !r.isError || r.texts[0] != "Error: no such task: nope" {
		t.Fatalf("unknown task: %+v", r)
	}
	r = must("bash", map[string]any{"description": "no command"}, nil)
	if !r.isError || !strings.HasPrefix(r.texts[0], "Error: ") {
		t.Fatalf("missing command: %+v", r)
	}

	// Background: run, read, kill; its completion notice as a
	// notification while a call runs, and in the next result's _meta.
	// The task ends once the waiting call runs (gates are files).
	dir := t.TempDir()
	start, gate := filepath.Join(dir, "start"), filepath.Join(dir, "gate")
	r = must("bash", map[string]any{"command": fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; echo started; exit 5", start), "description": "finish soon", "run_in_background": true}, nil)
	m := taskRE.FindStringSubmatch(r.texts[0])
	if m == nil || r.isError {
		t.Fatalf("background: %+v", r)
	}
	done := m[1]
	waiting := make(chan interopResult, 1)
	go func() {
		// Holds its request (and on 2026-07-28, its stream) open until the
		// notice has arrived.
		r, err := cl.call(ctx, "bash", map[string]any{"command": fmt.Sprintf("touch %s; while [ ! -e %s ]; do sleep 0.05; done; echo in", start, gate), "description": "wait"},
			map[string]any{"io.modelcontextprotocol/logLevel": "info"})
		if err != nil {
			r.texts = []string{err.Error()}
		}
		waiting <- r
	}()
	select {
	case n := <-cl.notices():
		if !strings.Contains(string(n), "background task "+done+" completed, exit code: 5") {
			t.Errorf("notification: %s", n)
		}
	case <-time.After(60 * time.Second):
		t.Error("no notification of the completed task")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r = <-waiting
	if len(r.texts) < 1 || r.texts[0] != "in" {
		t.Fatalf("waiting call: %+v", r)
	}
	if !strings.Contains(string(r.meta), `"`+server.NoticesMetaKey+`"`) || !strings.Contains(string(r.meta), done) ||
		!slices.Contains(r.texts, "background task "+done+" completed, exit code: 5") {
		t.Errorf("notice with the next result: texts %q _meta %s", r.texts, r.meta)
	}
	r = must("bash_output", map[string]any{"task_id": done}, nil)
	if r.isError || r.texts[0] != "started\nstatus: completed, exit code: 5" {
		t.Errorf("bash_output: %+v", r)
	}
	r = must("bash", map[string]any{"command": "sleep 600", "description": "long", "run_in_background": true}, nil)
	long := taskRE.FindStringSubmatch(r.texts[0])[1]
	r = must("bash_output", map[string]any{"task_id": long}, nil)
	if r.texts[0] != "status: running" {
		t.Errorf("running task: %+v", r)
	}
	r = must("bash_kill", map[string]any{"task_id": long}, nil)
	if r.isError || r.texts[0] != "killed background task "+long {
		t.Errorf("bash_kill: %+v", r)
	}
	r = must("bash_kill", map[string]any{"task_id": long}, nil)
	if r.texts[0] != "task "+long+" already killed" {
		t.Errorf("bash_kill again: %+v", r)
	}

	// The same sandbox session again, by name, from a new connection; another
	// name does not see it.
	cl.close()
	again := c.connect(t, session)
	r, err = again.call(ctx, "bash_output", map[string]any{"task_id": done}, nil)
	if err != nil || r.isError || !strings.HasSuffix(r.texts[0], "status: completed, exit code: 5") {
		t.Errorf("reconnected: %+v %v", r, err)
	}
	other := c.connect(t, session+"-other")
	r, err = other.call(ctx, "bash_output", map[string]any{"task_id": done}, nil)
	if err != nil || !r.isError || r.texts[0] != "Error: no such task: "+done {
		t.Errorf("another session read the task: %+v %v", r, err)
	}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// post sends one JSON-RPC message to /mcp at the revision and returns the
// status and the JSON-RPC response (an SSE body's data line).
func post(t *testing.T, url, revision, session, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+servertest.TokenAcme)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if revision != "" {
		req.Header.Set("Mcp-Protocol-Version", revision)
	}
	var msg struct {
		Method string
		Params struct{ Name string }
	}
	json.Unmarshal([]byte(body), &msg)
	req.Header.Set("Mcp-Method", msg.Method)
	if msg.Params.Name != "" {
		req.Header.Set("Mcp-Name", msg.Params.Name)
	}
	if session != "" {
		req.Header.Set(server.SessionHeader, session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	out := string(b)
	for _, line := range strings.Split(out, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = d
		}
	}
	return resp.StatusCode, out
}

// callBody is a tools/call at the revision with extra _meta members.
func callBody(revision, command, meta string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}%s},"name":"bash","arguments":{"command":%q,"description":"raw"}}}`,
		revision, meta, command)
}

// TestMCPUnknownRevision: a revision neither core knows is refused as the
// spec prescribes, naming the supported ones so that the client falls back:
// a later one with UnsupportedProtocolVersion (-32022), an earlier unknown
// one with 400.
func TestMCPUnknownRevision(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	url := srv.URL + "/mcp"
	body := `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
	_, resp := post(t, url, "2099-01-01", "", body)
	var msg struct {
		Error struct {
			Code int `json:"code"`
			Data struct {
				Supported []string `json:"supported"`
				Requested string   `json:"requested"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(resp), &msg); err != nil || msg.Error.Code != -32022 ||
		!slices.Contains(msg.Error.Data.Supported, server.Revision20260728) || !slices.Contains(msg.Error.Data.Supported, "2025-11-25") {
		t.Fatalf("later revision: %s (%v)", resp, err)
	}
	// Discover at the served revision lists both generations.
	_, resp = post(t, url, server.Revision20260728, "", strings.ReplaceAll(body, "2099-01-01", server.Revision20260728))
	if !strings.Contains(resp, `"supportedVersions":["2026-07-28","2025-11-25"`) {
		t.Fatalf("discover: %s", resp)
	}
	// The legacy handshake at an unknown revision is answered with the
	// newest one it negotiates (the client disconnects if it cannot speak it).
	_, resp = post(t, url, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if !strings.Contains(resp, `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("initialize at an unknown revision: %s", resp)
	}
	status, resp := post(t, url, "2024-01-01", "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if status != http.StatusBadRequest || !strings.Contains(resp, "2025-11-25") {
		t.Fatalf("earlier unknown revision: %d %s", status, resp)
	}
}

// TestMCPStatelessSessionNames: on 2026-07-28 the sandbox session is the
// header's or the _meta key's (which must agree); a call naming none is
// told how to name one. Stateless requests open no MCP sessions: they are
// served with the tenant at its MCP session limit.
func TestMCPStatelessSessionNames(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.MaxMCPSessions = 1
		c.Tenants["acme"] = acme
	})
	url := srv.URL + "/mcp"
	connect(t, url, servertest.TokenAcme, "legacy", nil)
	rev := server.Revision20260728
	text := func(resp string) (string, bool) {
		var msg struct {
			Result struct {
				Content []struct{ Text string } `json:"content"`
				IsError bool                    `json:"isError"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(resp), &msg); err != nil || len(msg.Result.Content) == 0 {
			t.Fatalf("response: %s (%v)", resp, err)
		}
		return msg.Result.Content[0].Text, msg.Result.IsError
	}
	cases := []struct {
		header, meta, want string
		isError            bool
	}{
		{"h1", "", "h1", false},
		{"", `,"shellbox/session":"m1"`, "m1", false},
		{"same", `,"shellbox/session":"same"`, "same", false},
		{"h1", `,"shellbox/session":"m1"`, `Error: the Shellbox-Session header ("h1") and _meta "shellbox/session" ("m1") name different sessions`, true},
		{"", `,"shellbox/session":"../x"`, "Error: _meta \"shellbox/session\": ", true},
		{"", `,"shellbox/session":7`, `Error: _meta "shellbox/session": want a session name (a string)`, true},
		{"", "", "Error: this MCP request names no sandbox session", true},
	}
	for _, c := range cases {
		status, resp := post(t, url, rev, c.header, callBody(rev, "echo $DSH_SESSION_ID", c.meta))
		got, isErr := text(resp)
		if status != 200 || isErr != c.isError || !strings.HasPrefix(got, c.want) || (!c.isError && got != c.want) {
			t.Errorf("header %q meta %q: %d %q (isError %v), want %q", c.header, c.meta, status, got, isErr, c.want)
		}
	}
}

// BenchmarkMCPCall: one warm `echo` call over /mcp on the local backend, per
// revision (2026-07-28: a stateless request each; 2025-11-25: an MCP
// session).
func BenchmarkMCPCall(b *testing.B) {
	for _, rev := range []string{"", "2025-11-25"} {
		name := "2026-07-28"
		if rev != "" {
			name = rev
		}
		b.Run(name, func(b *testing.B) {
			srv := servertest.Start(b, servertest.NewLocalBackend(b), nil)
			c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
			var opts *mcp.ClientSessionOptions
			if rev != "" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: rev}
			}
			ctx := context.Background()
			cs, err := c.Connect(ctx, client.MCPTransport(srv.URL+"/mcp", servertest.TokenAcme, "bench", nil), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			args := json.RawMessage(`{"command":"echo hi","description":"bench"}`)
			for b.Loop() {
				r, err := client.CallMCP(ctx, cs, "bash", args)
				if err != nil || r.Text != "hi" {
					b.Fatalf("%v %q", err, r.Text)
				}
			}
		})
	}
}
