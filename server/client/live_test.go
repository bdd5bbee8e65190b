package client_test

// Live output of a running call: MCP progress notifications to the official
// go-sdk client, and the REST event stream read as raw HTTP, against a real
// server on the local backend.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
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

// waitingCommand prints, then waits for flag, which the test creates with a
// second call once it saw the first output live: no timing is assumed.
func waitingCommand(flag string) string {
	return fmt.Sprintf("echo ready; until [ -e %s ]; do sleep 0.02; done; rm -f %s; echo after", flag, flag)
}

func bashArgs(cmd string) map[string]any {
	return map[string]any{"command": cmd, "description": "print then wait for a file"}
}

func release(t *testing.T, c *client.Client, session, flag string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, _ := json.Marshal(bashArgs("touch " + flag))
	if r, err := c.Call(ctx, session, "bash", raw); err != nil || r.Text != "(no output)" {
		t.Fatalf("releasing call: %q, %v", r.Text, err)
	}
}

// TestLiveMCP: a tools/call with a progress token gets notifications/progress
// carrying the output while the command runs, at both revisions; the result
// is the one a call without a token gets.
func TestLiveMCP(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	rest := client.New(srv.URL, servertest.TokenAcme, nil)
	for _, rev := range []string{"", "2025-11-25"} {
		t.Run("revision="+rev, func(t *testing.T) {
			session := "live-mcp" + strings.ReplaceAll(rev, "-", "")
			type note struct {
				token    any
				progress float64
				message  string
				meta     any
			}
			notes := make(chan note, 1024)
			cl := mcp.NewClient(&mcp.Implementation{Name: "live-go-sdk", Version: "1"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					notes <- note{req.Params.ProgressToken, req.Params.Progress, req.Params.Message, req.Params.Meta[server.LiveMetaKey]}
				},
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var opts *mcp.ClientSessionOptions
			if rev != "" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: rev}
			}
			cs, err := cl.Connect(ctx, client.MCPTransport(srv.URL+"/mcp", servertest.TokenAcme, session, nil), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()

			flag := session + ".flag"
			p := &mcp.CallToolParams{Name: "bash", Arguments: bashArgs(waitingCommand(flag))}
			p.SetProgressToken("tok-" + session)
			type outcome struct {
				res *mcp.CallToolResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := cs.CallTool(ctx, p)
				done <- outcome{res, err}
			}()
			var first note
			select {
			case first = <-notes:
			case o := <-done:
				t.Fatalf("the call returned before any progress notification: %+v %v", o.res, o.err)
			case <-ctx.Done():
				t.Fatal("no progress notification")
			}
			if first.token != "tok-"+session || first.message != "ready\n" || first.progress != 6 {
				t.Errorf("first notification %+v, want token tok-%s, message \"ready\\n\", progress 6", first, session)
			}
			if b, _ := json.Marshal(first.meta); string(b) != `[{"stream":"stdout","text":"ready\n"}]` {
				t.Errorf("_meta[%q] = %s", server.LiveMetaKey, b)
			}
			release(t, rest, session, flag)
			o := <-done
			if o.err != nil {
				t.Fatal(o.err)
			}
			r, err := client.FromMCP(o.res)
			if err != nil || r.Text != "ready\nafter" || r.IsError {
				t.Fatalf("result %q (isError %v), %v", r.Text, r.IsError, err)
			}
			// Without a token: the same result, no notification.
			plain, err := client.CallMCP(ctx, cs, "bash", mustJSON(bashArgs("echo ready; echo after")))
			if err != nil || plain.Text != r.Text {
				t.Fatalf("without a token: %q, %v", plain.Text, err)
			}
		})
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// sseEvent is one server-sent event as read off the wire.
type sseEvent struct{ name, data string }

// readEvents reads server-sent events from r into ch until EOF.
func readEvents(r io.Reader, ch chan<- sseEvent) error {
	defer close(ch)
	br := bufio.NewReader(r)
	var ev sseEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" {
				return nil
			}
			return err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			ch <- ev
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[len("data: "):]
		default:
			return fmt.Errorf("unexpected line %q", line)
		}
	}
}

func postTool(t *testing.T, url, query, accept string, args map[string]any) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+query, strings.NewReader(string(mustJSON(args))))
	req.Header.Set("Authorization", "Bearer "+servertest.TokenAcme)
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestLiveREST: ?stream=1 (or Accept: text/event-stream) answers output
// events while the command runs, then one result event whose data is
// byte for byte the body of the same call without streaming.
func TestLiveREST(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	rest := client.New(srv.URL, servertest.TokenAcme, nil)
	url := srv.URL + "/v1/sessions/live-rest/tools/bash"
	for _, how := range []struct{ query, accept string }{{"?stream=1", ""}, {"", "text/event-stream"}} {
		flag := "live-rest" + how.query[min(len(how.query), 1):] + ".flag"
		resp := postTool(t, url, how.query, how.accept, bashArgs(waitingCommand(flag)))
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
			t.Fatalf("%+v: status %d, Content-Type %q", how, resp.StatusCode, ct)
		}
		events := make(chan sseEvent, 64)
		readErr := make(chan error, 1)
		go func() { readErr <- readEvents(resp.Body, events) }()
		first := <-events
		if first.name != "output" || first.data != `{"stream":"stdout","text":"ready\n"}` {
			t.Fatalf("%+v: first event %+v", how, first)
		}
		release(t, rest, "live-rest", flag)
		var got []sseEvent
		for ev := range events {
			got = append(got, ev)
		}
		resp.Body.Close()
		if err := <-readErr; err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || got[len(got)-1].name != "result" {
			t.Fatalf("%+v: events after release %+v, want output events then one result", how, got)
		}
		for _, ev := range got[:len(got)-1] {
			if ev.name != "output" {
				t.Errorf("%+v: event %+v before the result", how, ev)
			}
		}
		plain := postTool(t, url, "", "", bashArgs("echo ready; echo after"))
		body, _ := io.ReadAll(plain.Body)
		plain.Body.Close()
		if want := strings.TrimSuffix(string(body), "\n"); got[len(got)-1].data != want {
			t.Errorf("%+v: result event data\n%s\nwant the plain body\n%s", how, got[len(got)-1].data, want)
		}
	}

	// Refused before it runs: the plain answer, status and all.
	resp := postTool(t, srv.URL+"/v1/sessions/live-rest/tools/nope", "?stream=1", "", bashArgs("true"))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("unknown tool, streamed: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	resp = postTool(t, srv.URL+"/v1/sessions/live-rest/tools/bash_output", "?stream=1", "", map[string]any{"task_id": "nope"})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":"no_such_task"`) {
		t.Errorf("unknown task, streamed: %d %s", resp.StatusCode, body)
	}
	// A tool that answers 200 without output still streams: one result event.
	resp = postTool(t, url, "", "text/event-stream", bashArgs("true"))
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(body), "event: result\ndata: {\"text\":\"(no output)\"") {
		t.Errorf("a silent call, streamed: %q", body)
	}
}

// TestLiveRESTHugeOutput: 100 MB printed as fast as the pipe takes it
// reaches the client as bounded events; every byte is either sent or
// counted as skipped, in order, and the result is the plain call's.
func TestLiveRESTHugeOutput(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	rest := client.New(srv.URL, servertest.TokenAcme, nil)
	const total = 100 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var sent, skipped, events int64
	res, err := rest.CallStream(ctx, "live-huge", "bash", mustJSON(bashArgs(fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", total))), func(o server.LiveOutput) {
		mu.Lock()
		defer mu.Unlock()
		events++
		if len(o.Text) > server.LiveBytes {
			t.Errorf("an output event of %d bytes, over %d", len(o.Text), server.LiveBytes)
		}
		if strings.Trim(o.Text, "x") != "" {
			t.Errorf("output event with other bytes than the command's: %q", o.Text[:min(len(o.Text), 64)])
		}
		sent += int64(len(o.Text))
		skipped += o.Skipped
	})
	if err != nil {
		t.Fatal(err)
	}
	if sent+skipped != total {
		t.Errorf("sent %d + skipped %d = %d, want %d", sent, skipped, sent+skipped, total)
	}
	if !strings.HasSuffix(res.Text, "]") || !strings.Contains(res.Text, "[output truncated; full output: ") {
		t.Errorf("result text ends %q", res.Text[max(0, len(res.Text)-200):])
	}
	t.Logf("100 MB: %d output events, %d bytes sent, %d skipped", events, sent, skipped)
}

// BenchmarkCall100MB: a REST tool call printing 100 MB on the local
// backend, without and with live output (server-sent events read by
// CallStream), alternating within each iteration; the medians are reported
// as plain-ms and stream-ms.
func BenchmarkCall100MB(b *testing.B) {
	srv := servertest.Start(b, servertest.NewLocalBackend(b), nil)
	rest := client.New(srv.URL, servertest.TokenAcme, nil)
	args := mustJSON(bashArgs("head -c 104857600 /dev/zero | tr '\\0' x"))
	ctx := context.Background()
	var plain, stream []time.Duration
	for range b.N {
		start := time.Now()
		if r, err := rest.Call(ctx, "bench", "bash", args); err != nil || r.IsError {
			b.Fatalf("%q, %v", r.Text, err)
		}
		plain = append(plain, time.Since(start))
		start = time.Now()
		if r, err := rest.CallStream(ctx, "bench", "bash", args, func(server.LiveOutput) {}); err != nil || r.IsError {
			b.Fatalf("%q, %v", r.Text, err)
		}
		stream = append(stream, time.Since(start))
	}
	b.ReportMetric(median(plain), "plain-ms")
	b.ReportMetric(median(stream), "stream-ms")
}

func median(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Microseconds()) / 1000
}

// TestLiveMCPGoM3: mark3labs/mcp-go (at its default revision, over
// streamable HTTP) sends a progress token in _meta and gets the output in
// notifications/progress while the command runs.
func TestLiveMCPGoM3(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	rest := client.New(srv.URL, servertest.TokenAcme, nil)
	session := "live-m3"
	tr, err := m3transport.NewStreamableHTTP(srv.URL+"/mcp", m3transport.WithHTTPHeaders(map[string]string{
		"Authorization": "Bearer " + servertest.TokenAcme, server.SessionHeader: session}))
	if err != nil {
		t.Fatal(err)
	}
	c := m3client.NewClient(tr)
	messages := make(chan string, 1024)
	c.OnNotification(func(n m3.JSONRPCNotification) {
		if n.Method == "notifications/progress" && n.Params.AdditionalFields["progressToken"] == "m3-token" {
			msg, _ := n.Params.AdditionalFields["message"].(string)
			messages <- msg
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Initialize(ctx, m3.InitializeRequest{}); err != nil {
		t.Fatal(err)
	}
	flag := session + ".flag"
	req := m3.CallToolRequest{}
	req.Params.Name = "bash"
	req.Params.Arguments = bashArgs(waitingCommand(flag))
	req.Params.Meta = &m3.Meta{ProgressToken: "m3-token"}
	type outcome struct {
		res *m3.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.CallTool(ctx, req)
		done <- outcome{res, err}
	}()
	select {
	case msg := <-messages:
		if msg != "ready\n" {
			t.Errorf("first progress message %q", msg)
		}
	case o := <-done:
		t.Fatalf("the call returned before any progress notification: %+v %v", o.res, o.err)
	case <-ctx.Done():
		t.Fatal("no progress notification")
	}
	release(t, rest, session, flag)
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if tc, ok := o.res.Content[0].(m3.TextContent); !ok || tc.Text != "ready\nafter" {
		t.Fatalf("result %+v", o.res.Content)
	}
}
