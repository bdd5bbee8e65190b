package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/tools"
)

func TestToolCallREST(t *testing.T) {
	r := newRig(t, nil)
	code, m := r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"echo hi; exit 3","description":"say hi"}`)
	if code != 200 || m["text"] != "hi\n[exit code: 3]" || m["isError"] != false {
		t.Fatalf("%d %v", code, m)
	}
	res := m["result"].(map[string]any)
	if res["kind"] != "foreground" || res["exitCode"] != float64(3) {
		t.Fatalf("typed result: %v", res)
	}
}

func TestHealthAndAuth(t *testing.T) {
	r := newRig(t, nil)
	if code, _ := r.do("GET", "/healthz", "", "", nil); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	if code, _ := r.do("GET", "/readyz", "", "", nil); code != 200 {
		t.Fatalf("readyz: %d", code)
	}
	// Warnings (a tenant's broken policy) are listed, and ready.
	r.b.mu.Lock()
	r.b.warnings = []Warning{{Tenant: "bad", Text: "tenant bad: no policy in force, its calls are refused: bad.yaml:1: defualt: unknown key"}}
	r.b.mu.Unlock()
	if code, b := r.do("GET", "/readyz", "", "", nil); code != 200 || string(b) != `{"status":"ready","warnings":1}`+"\n" {
		t.Fatalf("readyz with a warning: %d %s", code, b)
	}
	if _, b := r.do("GET", "/metrics", "", "", nil); !strings.Contains(string(b), "\nshellbox_backend_warnings 1\n") {
		t.Fatalf("no shellbox_backend_warnings 1 in /metrics")
	}
	// A backend that runs commands unsandboxed is ready, and says so.
	r.b.mu.Lock()
	r.b.unsandboxed = true
	r.b.mu.Unlock()
	if code, b := r.do("GET", "/readyz", "", "", nil); code != 200 ||
		string(b) != `{"status":"ready","warnings":1,"unsandboxed":"commands run on the server's host, unsandboxed, as the server's user"}`+"\n" {
		t.Fatalf("readyz of an unsandboxed backend: %d %s", code, b)
	}
	r.b.ready = fmt.Errorf("engine unreachable")
	if code, b := r.do("GET", "/readyz", "", "", nil); code != 503 || !strings.Contains(string(b), "engine unreachable") {
		t.Fatalf("readyz not ready: %d %s", code, b)
	}
	for _, path := range []string{"/v1/sessions", "/v1/approvals", "/v1/events", "/mcp", "/v1/sessions/x/tools/bash", "/nope"} {
		for _, tok := range []string{"", "wrong-token"} {
			code, m := r.json("GET", path, tok, nil)
			if code != 401 || errCode(m) != "unauthorized" {
				t.Errorf("GET %s with token %q: %d %v", path, tok, code, m)
			}
		}
	}
	// Malformed header.
	req, _ := http.NewRequest("GET", r.ts.URL+"/v1/sessions", nil)
	req.Header.Set("Authorization", "Basic "+tokenAcme)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("basic auth: %d", resp.StatusCode)
	}
}

func TestBadInput(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxBodyBytes = 4096 })
	cases := []struct {
		name, method, path, ctype string
		body                      string
		status                    int
		code                      string
	}{
		{"malformed json", "POST", "/v1/sessions/s1/tools/bash", "application/json", `{"command":`, 400, "malformed_json"},
		{"malformed create", "POST", "/v1/sessions", "application/json", `{"id":`, 400, "malformed_json"},
		{"wrong content type", "POST", "/v1/sessions/s1/tools/bash", "text/plain", `{}`, 415, "unsupported_media_type"},
		{"form content type", "POST", "/v1/sessions", "application/x-www-form-urlencoded", `id=x`, 415, "unsupported_media_type"},
		{"huge body", "POST", "/v1/sessions/s1/tools/bash", "application/json", `{"command":"` + strings.Repeat("a", 5000) + `"}`, 413, "body_too_large"},
		{"unknown tool", "POST", "/v1/sessions/s1/tools/zsh", "application/json", `{}`, 404, "unknown_tool"},
		{"invalid session", "POST", "/v1/sessions/bad%20id/tools/bash", "application/json", `{}`, 400, "invalid_session"},
		{"invalid session id on create", "POST", "/v1/sessions", "application/json", `{"id":"../x"}`, 400, "invalid_session"},
		{"no route", "GET", "/v1/nothing", "", ``, 404, "not_found"},
		{"wrong method", "PUT", "/v1/sessions", "application/json", `{}`, 404, "not_found"},
		{"unknown task", "POST", "/v1/sessions/s1/tools/bash_output", "application/json", `{"task_id":"nope"}`, 404, "no_such_task"},
		{"unknown session", "GET", "/v1/sessions/nope", "", ``, 404, "no_such_session"},
		{"unknown approval", "POST", "/v1/approvals/nope/approve", "application/json", `{}`, 404, "no_such_approval"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, b := r.do(c.method, c.path, tokenAcme, c.ctype, []byte(c.body))
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("%d: not JSON: %q", code, b)
			}
			if code != c.status || errCode(m) != c.code || errMsg(m) == "" {
				t.Fatalf("got %d %s, want %d %s", code, b, c.status, c.code)
			}
		})
	}
	// The unknown tool still carries the tool's own text.
	_, m := r.json("POST", "/v1/sessions/s1/tools/zsh", tokenAcme, `{}`)
	if m["text"] != "Error: unknown tool: zsh" || m["isError"] != true {
		t.Fatalf("unknown tool body: %v", m)
	}
	_, m = r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, strings.Repeat("x", 5000))
	if !strings.Contains(errMsg(m), "limit of 4096 bytes (server::maxBodyBytes)") {
		t.Fatalf("body limit message: %v", m)
	}
}

func TestConcurrencyAndRateLimits(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Tenants["acme"] = TenantConfig{Tokens: c.Tenants["acme"].Tokens, MaxConcurrentCalls: 1, RatePerSecond: 1000, Burst: 1000}
		c.Tenants["beta"] = TenantConfig{Tokens: c.Tenants["beta"].Tokens, RatePerSecond: 0.001, Burst: 2}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, m := r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"sleep 2","description":"hold the slot"}`)
		if c != 200 {
			t.Errorf("holder: %d %v", c, m)
		}
	}()
	// White box: wait until the holder has the tenant's only slot.
	for deadline := time.Now().Add(10 * time.Second); len(r.srv.limits["acme"].calls) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the holder never got its slot")
		}
	}
	code, m := r.json("POST", "/v1/sessions/s2/tools/bash", tokenAcme, `{"command":"true","description":"second call"}`)
	if code != 429 || errCode(m) != "concurrency_limited" || !strings.Contains(errMsg(m), "maxConcurrentCalls") {
		t.Fatalf("concurrency: %d %v", code, m)
	}
	<-done
	// beta: a burst of 2, then refused.
	for i := 0; i < 2; i++ {
		if code, m := r.json("GET", "/v1/sessions", tokenBeta, nil); code != 200 {
			t.Fatalf("beta request %d: %d %v", i, code, m)
		}
	}
	code, m = r.json("GET", "/v1/sessions", tokenBeta, nil)
	if code != 429 || errCode(m) != "rate_limited" || !strings.Contains(errMsg(m), "ratePerSecond") {
		t.Fatalf("rate: %d %v", code, m)
	}
	// Over its rate, beta may still delete a session: a refused DELETE
	// leaves its sandbox running. Other calls on the session are refused.
	if code, m := r.json("DELETE", "/v1/sessions/gone", tokenBeta, nil); code != 404 || errCode(m) != "no_such_session" {
		t.Fatalf("a DELETE over the rate: %d %v, want the session's own answer (404)", code, m)
	}
	for _, req := range [][2]string{{"GET", "/v1/sessions/gone"}, {"DELETE", "/v1/sessions/gone/files"}} {
		if code, m := r.json(req[0], req[1], tokenBeta, nil); code != 429 || errCode(m) != "rate_limited" {
			t.Fatalf("%s %s over the rate: %d %v, want 429", req[0], req[1], code, m)
		}
	}
}

// TestCrossTenant: beta cannot see, read, kill, delete or list acme's
// sessions, tasks or approvals, and gets exactly the answer a random id gets.
func TestCrossTenant(t *testing.T) {
	fa := newFakeApprovals()
	r := newRig(t, func(c *Config) { c.Approvals = fa })
	if code, m := r.json("POST", "/v1/sessions", tokenAcme, map[string]string{"id": "secret"}); code != 201 {
		t.Fatalf("create: %d %v", code, m)
	}
	_, m := r.json("POST", "/v1/sessions/secret/tools/bash", tokenAcme, `{"command":"sleep 30","description":"long task","run_in_background":true}`)
	id := m["result"].(map[string]any)["taskId"].(string)
	fa.add(approval.Approval{ID: "ap1", Tenant: "acme", Session: "secret", Tool: "bash", Command: "rm -rf /", State: approval.Pending})

	type probe struct{ method, path, body string }
	same := func(foreign, random probe) {
		t.Helper()
		c1, b1 := r.do(foreign.method, foreign.path, tokenBeta, "application/json", []byte(foreign.body))
		c2, b2 := r.do(random.method, random.path, tokenBeta, "application/json", []byte(random.body))
		norm := func(b []byte, ids ...string) string {
			s := string(b)
			for _, id := range ids {
				s = strings.ReplaceAll(s, id, "<id>")
			}
			return s
		}
		if c1 != c2 || norm(b1, id, "ap1", "secret") != norm(b2, "rnd-task", "rnd-ap", "rnd-sess") {
			t.Errorf("foreign %s %s: %d %s\nrandom %s %s: %d %s", foreign.method, foreign.path, c1, b1, random.method, random.path, c2, b2)
		}
		if c1 != 404 && c1 != 200 {
			t.Errorf("foreign %s: status %d", foreign.path, c1)
		}
	}
	same(probe{"POST", "/v1/sessions/secret/tools/bash_output", fmt.Sprintf(`{"task_id":%q}`, id)},
		probe{"POST", "/v1/sessions/rnd-sess/tools/bash_output", `{"task_id":"rnd-task"}`})
	same(probe{"POST", "/v1/sessions/secret/tools/bash_kill", fmt.Sprintf(`{"task_id":%q}`, id)},
		probe{"POST", "/v1/sessions/rnd-sess/tools/bash_kill", `{"task_id":"rnd-task"}`})
	same(probe{"GET", "/v1/sessions/secret", ""}, probe{"GET", "/v1/sessions/rnd-sess", ""})
	same(probe{"DELETE", "/v1/sessions/secret", ""}, probe{"DELETE", "/v1/sessions/rnd-sess", ""})
	same(probe{"GET", "/v1/approvals/ap1", ""}, probe{"GET", "/v1/approvals/rnd-ap", ""})
	same(probe{"POST", "/v1/approvals/ap1/approve", "{}"}, probe{"POST", "/v1/approvals/rnd-ap/approve", "{}"})
	same(probe{"POST", "/v1/approvals/ap1/deny", "{}"}, probe{"POST", "/v1/approvals/rnd-ap/deny", "{}"})

	// Lists are empty for beta.
	if _, m := r.json("GET", "/v1/sessions", tokenBeta, nil); len(m["sessions"].([]any)) != 0 {
		t.Errorf("beta lists sessions: %v", m)
	}
	if _, m := r.json("GET", "/v1/approvals", tokenBeta, nil); len(m["approvals"].([]any)) != 0 {
		t.Errorf("beta lists approvals: %v", m)
	}
	// acme still has everything, the task still runs.
	if _, m := r.json("GET", "/v1/sessions", tokenAcme, nil); len(m["sessions"].([]any)) != 1 {
		t.Errorf("acme sessions: %v", m)
	}
	if code, m := r.json("POST", "/v1/sessions/secret/tools/bash_output", tokenAcme, fmt.Sprintf(`{"task_id":%q}`, id)); code != 200 || !strings.HasSuffix(m["text"].(string), "status: running") {
		t.Errorf("acme reads its task: %d %v", code, m)
	}
	if fa.get("ap1").State != approval.Pending {
		t.Errorf("beta decided acme's approval")
	}
	if code, m := r.json("POST", "/v1/sessions/secret/tools/bash_kill", tokenAcme, fmt.Sprintf(`{"task_id":%q}`, id)); code != 200 {
		t.Errorf("acme kills its task: %d %v", code, m)
	}
}

func TestSessionsREST(t *testing.T) {
	r := newRig(t, nil)
	if code, m := r.json("POST", "/v1/sessions", tokenAcme, map[string]string{"id": "s1", "image": "forbidden"}); code != 403 || errCode(m) != "not_allowed" {
		t.Fatalf("image outside policy: %d %v", code, m)
	}
	if code, m := r.json("POST", "/v1/sessions", tokenAcme, map[string]string{"id": "s1", "image": "allowed"}); code != 201 || m["id"] != "s1" || m["image"] != "allowed" {
		t.Fatalf("create: %d %v", code, m)
	}
	if code, m := r.json("GET", "/v1/sessions/s1", tokenAcme, nil); code != 200 || m["tenant"] != "acme" {
		t.Fatalf("get: %d %v", code, m)
	}
	// Mounts reach the backend as sent: absent is nil (the policy's), an
	// empty list is none, readOnly absent is nil (read-only).
	for body, want := range map[string]string{
		`{"id":"m1"}`:                            "<nil>",
		`{"id":"m2","mounts":null}`:              "<nil>",
		`{"id":"m3","mounts":[]}`:                "[]",
		`{"id":"m4","mounts":[{"source":"/a"}]}`: `[{"source":"/a"}]`,
		`{"id":"m5","mounts":[{"source":"/a","target":"/b","readOnly":false}]}`: `[{"source":"/a","target":"/b","readOnly":false}]`,
	} {
		code, m := r.do("POST", "/v1/sessions", tokenAcme, "application/json", []byte(body))
		var si SessionInfo
		if code != 201 || json.Unmarshal(m, &si) != nil {
			t.Fatalf("create %s: %d %s", body, code, m)
		}
		r.b.mu.Lock()
		opts := r.b.lastOpts
		r.b.mu.Unlock()
		got := "<nil>"
		if opts.Mounts != nil {
			b, _ := json.Marshal(opts.Mounts)
			got = string(b)
		}
		if got != want {
			t.Errorf("create %s: the backend got mounts %s, want %s", body, got, want)
		}
		if len(si.Mounts) != len(opts.Mounts) {
			t.Errorf("create %s: answered mounts %+v", body, si.Mounts)
		}
	}
	if code, _ := r.do("DELETE", "/v1/sessions/s1", tokenAcme, "", nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, m := r.json("GET", "/v1/sessions/s1", tokenAcme, nil); code != 404 || errMsg(m) != "no such session: s1" {
		t.Fatalf("get after delete: %d %v", code, m)
	}
}

// sse reads server-sent events from path until n events arrived.
func sse(t *testing.T, r *rig, path, token string) (<-chan map[string]any, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", r.ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := r.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan map[string]any, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				json.Unmarshal([]byte(data), &m)
				ch <- m
			}
		}
	}()
	return ch, cancel
}

func TestEventsAndNotices(t *testing.T) {
	r := newRig(t, nil)
	events, stop := sse(t, r, "/v1/sessions/s1/events", tokenAcme)
	defer stop()
	beta, stopBeta := sse(t, r, "/v1/sessions/s1/events", tokenBeta)
	defer stopBeta()
	_, m := r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"exit 4","description":"end soon","run_in_background":true}`)
	id := m["result"].(map[string]any)["taskId"].(string)
	select {
	case e := <-events:
		n := e["notice"].(map[string]any)
		if e["type"] != "notice" || e["session"] != "s1" || n["text"] != "background task "+id+" completed, exit code: 4" {
			t.Fatalf("event: %v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no notice event")
	}
	// The notice is attached to the session's next result too.
	_, m = r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"true","description":"next call"}`)
	notices, _ := m["notices"].([]any)
	if len(notices) != 1 || notices[0].(map[string]any)["taskId"] != id {
		t.Fatalf("notices with next result: %v", m)
	}
	select {
	case e := <-beta:
		t.Fatalf("beta saw acme's event: %v", e)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestSlowSubscriberDropped(t *testing.T) {
	h := newHub(2)
	sub, cancel := h.subscribe("acme", "")
	defer cancel()
	for i := 0; i < 5; i++ {
		h.publish(eventstream.Event{Type: eventstream.EventNotice, Tenant: "acme", Session: "s"})
	}
	n := 0
	for range sub.ch {
		n++
	}
	if n != 2 || !h.wasDropped(sub) {
		t.Fatalf("got %d events, dropped %v", n, h.wasDropped(sub))
	}
}

func TestMetricsAndRequestIDs(t *testing.T) {
	r := newRig(t, nil)
	r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"true","description":"count me"}`)
	code, b := r.do("GET", "/metrics", "", "", nil)
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	for _, want := range []string{
		`shellbox_tool_calls_total{outcome="ok",tenant="acme",tool="bash"} 1`,
		`shellbox_tool_call_duration_seconds_bucket{tenant="acme",tool="bash"`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	req, _ := http.NewRequest("GET", r.ts.URL+"/healthz", nil)
	req.Header.Set("X-Request-Id", "abc-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Request-Id") != "abc-123" {
		t.Fatalf("request id not echoed: %q", resp.Header.Get("X-Request-Id"))
	}
	if !regexp.MustCompile(`^[A-Z2-7]{26}$`).MatchString(func() string {
		resp, _ := http.Get(r.ts.URL + "/healthz")
		resp.Body.Close()
		return resp.Header.Get("X-Request-Id")
	}()) {
		t.Fatal("no generated request id")
	}
}

// TestCancelAbortsCommand: a client that goes away mid-call aborts the
// command on the server, tree and all (the conformance case that checks this
// in process cannot observe it through HTTP).
func TestCancelAbortsCommand(t *testing.T) {
	r := newRig(t, nil)
	pidFile := "cancel.pid"
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", r.ts.URL+"/v1/sessions/s1/tools/bash",
		strings.NewReader(`{"command":"trap '' TERM; sleep 300 & echo $! > `+pidFile+`; wait","description":"ignore TERM"}`))
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := r.ts.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	root := r.b.dir + "/acme/root/"
	var pid string
	for deadline := time.Now().Add(20 * time.Second); pid == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
		b, _ := os.ReadFile(root + pidFile)
		pid = strings.TrimSpace(string(b))
	}
	cancel()
	<-done
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + pid); err != nil {
			break
		}
		if b, _ := os.ReadFile("/proc/" + pid + "/stat"); strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %s outlived its cancelled call", pid)
		}
	}
}

// TestSlowSSESubscriberDropped: a reader that stops reading is dropped with
// a final "dropped" event instead of holding events (or the publisher) up.
func TestSlowSSESubscriberDropped(t *testing.T) {
	r := newRig(t, func(c *Config) { c.EventBuffer = 4 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", r.ts.URL+"/v1/sessions/s1/events", nil)
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	resp, err := r.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Not reading: the socket fills, the handler blocks, its queue fills.
	start := time.Now()
	for i := 0; i < 50000; i++ {
		// Distinct tasks: a second notice of one task is dropped.
		n := tools.Notice{TaskID: fmt.Sprintf("%s%d", strings.Repeat("x", 200), i), Text: "background task x completed, exit code: 0"}
		r.srv.Notify("acme", "s1", n)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Logf("publishing took %s", d) // never blocks on the reader; only logged
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	last := ""
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: ") {
			last = sc.Text()
		}
	}
	if last != "event: dropped" {
		t.Fatalf("the stream ended with %q, want a dropped event", last)
	}
}
