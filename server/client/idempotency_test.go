package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

type postsKey struct{}

// lossyProxy forwards to target, but on every connection it loses the
// answer to the second POST: it forwards the request (so it runs), then
// closes the connection without a byte of answer. A client sees what it
// sees when a server going away closes a kept-alive connection just as a
// request goes out on it, with the worst timing: the request ran.
func lossyProxy(t *testing.T, target string) (string, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	var dropped atomic.Int64
	ps := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Context().Value(postsKey{}).(*atomic.Int64).Add(1) != 2 {
			rp.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		out.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			t.Errorf("proxy: %v", err)
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		dropped.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("proxy: hijack: %v", err)
			return
		}
		conn.Close()
	}))
	ps.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, postsKey{}, new(atomic.Int64))
	}
	ps.Start()
	t.Cleanup(ps.Close)
	return ps.URL, &dropped
}

// countArgs appends a line to file (in the working directory, which the
// local backend shares between sessions) and prints the line count.
func countArgs(file string) json.RawMessage {
	return json.RawMessage(`{"command":"echo run >> ` + file + `; wc -l < ` + file + `","description":"count a run"}`)
}

func replays(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^shellbox_idempotent_replays_total (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no shellbox_idempotent_replays_total in /metrics")
	}
	return string(m[1])
}

// TestLostAnswerRetriedOnce: a POST whose answer is lost on a kept-alive
// connection fails without an Idempotency-Key; the client's POSTs carry
// one, so net/http resends them on a new connection and the server answers
// the resend with the first run's result: every call succeeds, each ran
// once.
func TestLostAnswerRetriedOnce(t *testing.T) {
	srv := servertest.Start(t, servertest.NewLocalBackend(t), nil)
	proxy, dropped := lossyProxy(t, srv.URL)

	// Without a key the second POST on a connection fails.
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	var errs int
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, proxy+"/v1/sessions/plain/tools/bash", bytes.NewReader(countArgs("plain")))
		req.Header.Set("Authorization", "Bearer "+servertest.TokenAcme)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			errs++
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if errs != 1 || dropped.Load() != 1 {
		t.Fatalf("without a key: %d errors, %d answers lost; want 1 and 1", errs, dropped.Load())
	}

	// The client's REST calls: every one succeeds and runs once.
	c := client.New(proxy, servertest.TokenAcme, &http.Client{Transport: &http.Transport{}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 1; i <= 5; i++ {
		res, err := c.Call(ctx, "rest", tools.ToolBash, countArgs("rest"))
		if err != nil {
			t.Fatalf("REST call %d: %v", i, err)
		}
		if got := strings.TrimSpace(res.Text); !strings.HasPrefix(got, strconv.Itoa(i)) {
			t.Fatalf("REST call %d: %q: the command ran more or less than once per call", i, got)
		}
	}
	restLost := dropped.Load() - 1
	if restLost < 2 {
		t.Fatalf("only %d REST answers were lost: the test did not test", restLost)
	}

	// MCP over the same proxy (both revisions).
	for _, rev := range []string{"2026-07-28", "2025-11-25"} {
		before := dropped.Load()
		mc := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		cs, err := mc.Connect(ctx, client.MCPTransport(proxy+"/mcp", servertest.TokenAcme, "mcp-"+rev, &http.Transport{}),
			&mcp.ClientSessionOptions{ProtocolVersion: rev})
		if err != nil {
			t.Fatalf("%s: connect: %v", rev, err)
		}
		for i := 1; i <= 4; i++ {
			res, err := client.CallMCP(ctx, cs, tools.ToolBash, countArgs("mcp-"+rev))
			if err != nil {
				t.Fatalf("%s: MCP call %d: %v", rev, i, err)
			}
			if got := strings.TrimSpace(res.Text); !strings.HasPrefix(got, strconv.Itoa(i)) {
				t.Fatalf("%s: MCP call %d: %q: the command ran more or less than once per call", rev, i, got)
			}
		}
		cs.Close()
		if dropped.Load() == before {
			t.Fatalf("%s: no MCP answer was lost: the test did not test", rev)
		}
	}
	if got, want := replays(t, srv.URL), strconv.Itoa(int(dropped.Load()-1)); got != want {
		t.Fatalf("shellbox_idempotent_replays_total %s, want %s (answers lost with a key)", got, want)
	}
}
