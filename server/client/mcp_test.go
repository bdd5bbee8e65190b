package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

// legacy pins the revision with MCP sessions, which the tests in this file
// are about (interop_test.go covers both revisions).
var legacy = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

func connect(t *testing.T, url, token, session string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, client.MCPTransport(url, token, session, nil), legacy)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, tool, args string) tools.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := client.CallMCP(ctx, cs, tool, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	return r
}

func TestMCPToolsAndResults(t *testing.T) {
	b := servertest.NewLocalBackend(t)
	srv := servertest.Start(t, b, nil)
	cs := connect(t, srv.URL+"/mcp", servertest.TokenAcme, "s1", nil)
	ctx := context.Background()
	ts, _ := b.Toolset(ctx, "acme")
	var want []string
	for _, d := range ts.Definitions(ctx, "s1") {
		want = append(want, d.Name)
	}
	slices.Sort(want)
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
		if tl.Name == "bash" {
			schema, _ := json.Marshal(tl.InputSchema)
			want := string(server.DefaultTools()[0].InputSchema)
			var a, b any
			json.Unmarshal(schema, &a)
			json.Unmarshal([]byte(want), &b)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("bash schema over MCP:\n%s\nwant\n%s", schema, want)
			}
		}
	}
	// The session's tools: pwsh only where it exists.
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("tools: %v, want %v", names, want)
	}
	raw, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo hi; exit 2", "description": "say hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if raw.IsError || raw.Content[0].(*mcp.TextContent).Text != "hi\n[exit code: 2]" {
		t.Fatalf("result: %+v", raw)
	}
	sc, _ := json.Marshal(raw.StructuredContent)
	if !strings.Contains(string(sc), `"kind":"foreground"`) || !strings.Contains(string(sc), `"exitCode":2`) {
		t.Fatalf("structuredContent: %s", sc)
	}
	raw, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash_output", Arguments: map[string]any{"task_id": "nope"}})
	if err != nil || !raw.IsError || raw.Content[0].(*mcp.TextContent).Text != "Error: no such task: nope" {
		t.Fatalf("no such task: %+v %v", raw, err)
	}
}

func TestMCPUnknownTool(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	cs := connect(t, srv.URL+"/mcp", servertest.TokenAcme, "s1", nil)
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "zsh", Arguments: map[string]any{}})
	if err == nil || !strings.Contains(err.Error(), "zsh") {
		t.Fatalf("unknown tool: %v", err)
	}
}

func TestMCPBadSessionHeader(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+servertest.TokenAcme)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(server.SessionHeader, "../etc")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"invalid_session"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// No token: 401 JSON before MCP.
	req, _ = http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(`{}`))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(b), `"unauthorized"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestMCPReconnectAndNotices: a background task started on one MCP
// connection is read on a new one with the same session name; another name
// (or another tenant) does not see it. Its completion notice arrives as a
// notification and with the next result.
func TestMCPReconnectAndNotices(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	url := srv.URL + "/mcp"
	first := connect(t, url, servertest.TokenAcme, "work", nil)
	r := call(t, first, "bash", `{"command":"sleep 1; echo done; exit 5","description":"finish later","run_in_background":true}`)
	id := r.Value.(*tools.Background).TaskID
	first.Close()

	notes := make(chan *mcp.LoggingMessageParams, 4)
	again := connect(t, url, servertest.TokenAcme, "work", &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) { notes <- req.Params },
	})
	if err := again.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if r := call(t, again, "bash_output", fmt.Sprintf(`{"task_id":%q}`, id)); r.IsError {
		t.Fatalf("reconnected read: %s", r.Text)
	}
	other := connect(t, url, servertest.TokenAcme, "elsewhere", nil)
	if r := call(t, other, "bash_output", fmt.Sprintf(`{"task_id":%q}`, id)); r.Text != "Error: no such task: "+id {
		t.Fatalf("other session: %s", r.Text)
	}
	beta := connect(t, url, servertest.TokenBeta, "work", nil)
	if r := call(t, beta, "bash_output", fmt.Sprintf(`{"task_id":%q}`, id)); r.Text != "Error: no such task: "+id {
		t.Fatalf("other tenant: %s", r.Text)
	}
	select {
	case p := <-notes:
		b, _ := json.Marshal(p.Data)
		if p.Logger != server.NoticeLogger || !strings.Contains(string(b), "background task "+id+" completed, exit code: 5") {
			t.Fatalf("notification: %s %s", p.Logger, b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no notification")
	}
	r = call(t, again, "bash", `{"command":"true","description":"next"}`)
	if len(r.Notices) != 1 || r.Notices[0].TaskID != id {
		t.Fatalf("notices with the next result: %+v", r.Notices)
	}
}

// TestMCPSessionOfAnotherTenant: an MCP session id cannot be used with
// another tenant's token, and is answered exactly as an unknown one: 404,
// as JSON, for every method.
func TestMCPSessionOfAnotherTenant(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	cs := connect(t, srv.URL+"/mcp", servertest.TokenAcme, "", nil)
	if cs.ID() == "" {
		t.Fatal("no MCP session id")
	}
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"bash","arguments":{"command":"id","description":"who"}}}`
	send := func(method, token, id string) (int, string) {
		var rd io.Reader
		if method == "POST" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, srv.URL+"/mcp", rd)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 && !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s %s: Content-Type %q", method, id, ct)
		}
		return resp.StatusCode, strings.ReplaceAll(string(b), id, "ID")
	}
	for _, method := range []string{"POST", "GET", "DELETE"} {
		fs, foreign := send(method, servertest.TokenBeta, cs.ID())
		us, unknown := send(method, servertest.TokenBeta, "NOSUCHSESSIONID0123456789ABCDEF")
		if fs != http.StatusNotFound || fs != us || foreign != unknown || !strings.Contains(foreign, `"code":"no_such_mcp_session"`) {
			t.Errorf("%s: foreign %d %s, unknown %d %s", method, fs, foreign, us, unknown)
		}
	}
	// The owner still uses it.
	if r := call(t, cs, "bash", `{"command":"echo ok","description":"still mine"}`); r.Text != "ok" {
		t.Fatalf("owner after foreign attempts: %q", r.Text)
	}
}

// TestMCPStdio serves MCP over pipes, as `shellbox mcp` does.
func TestMCPStdio(t *testing.T) {
	b := servertest.NewLocalBackend(t)
	srv, err := server.New(server.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	b.Notify = srv.Notify
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.ServeStdio(ctx, "local", "s1", sr, sw) }()
	c := mcp.NewClient(&mcp.Implementation{Name: "stdio-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := call(t, cs, "bash", `{"command":"echo $DSH_SESSION_ID","description":"print session"}`)
	if r.Text != "s1" {
		t.Fatalf("stdio call: %q", r.Text)
	}
	cs.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return after the client left")
	}
}

// TestMCPSessionLimit: a tenant's open MCP sessions are bounded; one more
// answers 429 naming the limit, other tenants are not affected, and closing
// sessions makes room.
func TestMCPSessionLimit(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.MaxMCPSessions = 2
		c.Tenants["acme"] = acme
	})
	open := func(token string) (*mcp.ClientSession, error) {
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return c.Connect(ctx, client.MCPTransport(srv.URL+"/mcp", token, "", nil), legacy)
	}
	// Open sessions until the limit answers (an HTTP retry of an initialize
	// may open one more than the client knows of, so count what succeeds).
	var opened []*mcp.ClientSession
	var limited error
	for i := 0; i < 4 && limited == nil; i++ {
		cs, err := open(servertest.TokenAcme)
		if err != nil {
			limited = err
			continue
		}
		opened = append(opened, cs)
	}
	if limited == nil || !strings.Contains(limited.Error(), "Too Many Requests") {
		t.Fatalf("after %d sessions: %v, want 429", len(opened), limited)
	}
	if len(opened) > 2 {
		t.Errorf("%d sessions opened under a limit of 2", len(opened))
	}
	// The answer itself names the limit. A session the client library opened
	// and dropped at once (a retried initialize) may have counted when it
	// refused above and be gone now: then this initialize opens a session,
	// and the next one is over the limit.
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	for attempt := 1; ; attempt++ {
		req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+servertest.TokenAcme)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && attempt < 3 {
			continue
		}
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), `"code":"mcp_session_limit"`) ||
			!strings.Contains(string(b), "server::tenants::acme::maxMCPSessions") {
			t.Errorf("raw initialize over the limit (attempt %d): %d %s (opened %d, limited by %v)", attempt, resp.StatusCode, b, len(opened), limited)
		}
		break
	}
	if cs, err := open(servertest.TokenBeta); err != nil {
		t.Fatalf("beta is limited by acme's sessions: %v", err)
	} else {
		cs.Close()
	}
	for _, cs := range opened {
		cs.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cs, err := open(servertest.TokenAcme)
		if err == nil {
			cs.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing the sessions: %v", err)
		}
	}
}
