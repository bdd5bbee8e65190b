package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/approval"
)

const tokenOperator = "operator-secret-token"

// consoleClient is a browser stand-in: a cookie jar, the CSRF token of its
// login, and an Origin it sends on POSTs.
type consoleClient struct {
	r      *rig
	hc     *http.Client
	csrf   string
	origin string
}

func newConsoleClient(r *rig) *consoleClient {
	jar, _ := cookiejar.New(nil)
	return &consoleClient{r: r, hc: &http.Client{Jar: jar}, origin: r.ts.URL}
}

func (c *consoleClient) send(method, path string, body any, hdr map[string]string) (*http.Response, map[string]any) {
	c.r.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.r.ts.URL+path, rd)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", c.origin)
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp, m
}

func (c *consoleClient) login(token string) *http.Response {
	c.r.t.Helper()
	resp, m := c.send("POST", "/ui/api/login", map[string]string{"token": token}, nil)
	if resp.StatusCode == 200 {
		c.csrf, _ = m["csrf"].(string)
	}
	return resp
}

func newConsoleRig(t *testing.T) (*rig, *fakeApprovals) {
	fa := newFakeApprovals()
	r := newRig(t, func(c *Config) {
		c.Approvals = fa
		c.Console.OperatorTokens = []string{HashToken(tokenOperator)}
	})
	return r, fa
}

// TestConsoleAssets: the pages are embedded, every answer carries a strict
// CSP, and no page or script builds HTML from data or runs inline code.
func TestConsoleAssets(t *testing.T) {
	r, _ := newConsoleRig(t)
	for _, path := range []string{"/ui/", "/ui/static/app.js", "/ui/static/app.css", "/ui/api/me", "/ui/nope"} {
		req, _ := http.NewRequest("GET", r.ts.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Content-Security-Policy"); got != cspHeader || !strings.Contains(got, "default-src 'self'") || strings.Contains(got, "unsafe") {
			t.Errorf("%s: CSP %q", path, got)
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", path, resp.Header)
		}
	}
	resp, err := http.Get(r.ts.URL + "/ui")
	if err != nil || resp.Request.URL.Path != "/ui/" || resp.StatusCode != 200 {
		t.Errorf("/ui does not lead to /ui/: %v %v", resp, err)
	}
	html, _ := uiFiles.ReadFile("ui/index.html")
	for _, m := range regexp.MustCompile(`(?s)<script[^>]*>(.*?)</script>`).FindAllStringSubmatch(string(html), -1) {
		if strings.TrimSpace(m[1]) != "" || !strings.Contains(m[0], `src="/ui/static/`) {
			t.Errorf("inline or foreign script: %s", m[0])
		}
	}
	if regexp.MustCompile(`(?i)\son[a-z]+=|javascript:|https?://`).Match(html) {
		t.Error("index.html has an inline handler, a javascript: URL or an external URL")
	}
	js, _ := uiFiles.ReadFile("ui/app.js")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "http://", "https://"} {
		if bytes.Contains(js, []byte(bad)) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}

// TestConsoleLogin: tokens are checked like the API's, the login lives in
// an HttpOnly SameSite=Strict cookie (Secure behind TLS), and logout ends
// it.
func TestConsoleLogin(t *testing.T) {
	r, _ := newConsoleRig(t)
	c := newConsoleClient(r)
	if resp, _ := c.send("GET", "/ui/api/me", nil, nil); resp.StatusCode != 401 {
		t.Fatalf("me before login: %d", resp.StatusCode)
	}
	if resp := c.login("wrong"); resp.StatusCode != 401 {
		t.Errorf("wrong token: %d", resp.StatusCode)
	}
	if resp, _ := c.send("POST", "/ui/api/login", map[string]string{"token": tokenAcme}, map[string]string{"Content-Type": "text/plain"}); resp.StatusCode != 415 {
		t.Errorf("form-like login: %d", resp.StatusCode)
	}
	if resp, _ := c.send("POST", "/ui/api/login", map[string]string{"token": tokenAcme}, map[string]string{"Origin": "https://evil.example"}); resp.StatusCode != 403 {
		t.Errorf("cross-site login: %d", resp.StatusCode)
	}
	resp := c.login(tokenAcme)
	if resp.StatusCode != 200 || c.csrf == "" {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == consoleCookie {
			ck = k
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui" || ck.Secure || strings.Contains(ck.Value, tokenAcme) {
		t.Fatalf("cookie %+v", ck)
	}
	resp2, _ := newConsoleClient(r).send("POST", "/ui/api/login", map[string]string{"token": tokenAcme}, map[string]string{"X-Forwarded-Proto": "https"})
	if cs := resp2.Cookies(); len(cs) != 1 || !cs[0].Secure {
		t.Errorf("login behind TLS: cookie %+v", cs)
	}
	if resp, m := c.send("GET", "/ui/api/me", nil, nil); resp.StatusCode != 200 || m["tenant"] != "acme" || m["operator"] != false {
		t.Errorf("me: %d %v", resp.StatusCode, m)
	}
	// The console's cookie is no bearer token for the API, and an operator
	// token is no tenant token there.
	if code, _ := r.json("GET", "/v1/sessions", tokenOperator, nil); code != 401 {
		t.Errorf("operator token on the API: %d", code)
	}
	if resp, _ := c.send("POST", "/ui/api/logout", nil, nil); resp.StatusCode != 204 {
		t.Errorf("logout: %d", resp.StatusCode)
	}
	// The old cookie value is dead even if a client kept it.
	stale := newConsoleClient(r)
	stale.hc.Jar.SetCookies(resp.Request.URL, []*http.Cookie{{Name: consoleCookie, Value: ck.Value, Path: "/ui"}})
	if resp, _ := stale.send("GET", "/ui/api/me", nil, nil); resp.StatusCode != 401 {
		t.Errorf("me after logout: %d", resp.StatusCode)
	}
	// An operator token that is also a tenant's is refused at start.
	_, err := New(Config{Backend: r.b, Tenants: map[string]TenantConfig{"acme": {Tokens: []string{HashToken("x")}}},
		Console: ConsoleConfig{OperatorTokens: []string{HashToken("x")}}})
	if err == nil || !strings.Contains(err.Error(), "tenant acme") {
		t.Errorf("shared operator/tenant token: %v", err)
	}
}

// TestConsoleCSRF: a POST needs the login's CSRF token and a same-origin
// request, whatever the cookie.
func TestConsoleCSRF(t *testing.T) {
	r, fa := newConsoleRig(t)
	fa.add(approval.Approval{ID: "a1", Tenant: "acme", Session: "s1", Tool: "bash", Command: "deploy", State: approval.Pending})
	c := newConsoleClient(r)
	c.login(tokenAcme)
	for name, hdr := range map[string]map[string]string{
		"no token":        {"X-CSRF-Token": ""},
		"wrong token":     {"X-CSRF-Token": strings.Repeat("0", 64)},
		"foreign origin":  {"Origin": "https://evil.example"},
		"cross-site":      {"Sec-Fetch-Site": "cross-site"},
		"same-site other": {"Sec-Fetch-Site": "same-site"},
	} {
		if resp, m := c.send("POST", "/ui/api/approvals/acme/a1/approve", nil, hdr); resp.StatusCode != 403 || errCode(m) != "csrf" {
			t.Errorf("%s: %d %v", name, resp.StatusCode, m)
		}
	}
	if got := fa.get("a1").State; got != approval.Pending {
		t.Fatalf("a refused POST decided: %s", got)
	}
	if resp, m := c.send("POST", "/ui/api/approvals/acme/a1/approve", map[string]string{"reason": "ok"}, map[string]string{"Sec-Fetch-Site": "same-origin"}); resp.StatusCode != 200 || m["state"] != "approved" {
		t.Fatalf("approve: %d %v", resp.StatusCode, m)
	}
	if a := fa.get("a1"); a.Approver != "console:tenant:acme" || a.DecisionReason != "ok" {
		t.Errorf("decided %+v", a)
	}
}

// TestConsoleTenants: a tenant's login sees and decides its own tenant
// alone, answering for another's exactly as for nothing; an operator's sees
// and decides all.
func TestConsoleTenants(t *testing.T) {
	r, fa := newConsoleRig(t)
	for _, tenant := range []string{"acme", "beta"} {
		if code, m := r.json("POST", "/v1/sessions", map[string]string{"acme": tokenAcme, "beta": tokenBeta}[tenant], map[string]string{"id": tenant + "-s"}); code != 201 {
			t.Fatalf("create: %d %v", code, m)
		}
	}
	code, m := r.json("POST", "/v1/sessions/beta-s/tools/bash", tokenBeta, map[string]any{"command": "sleep 5", "description": "bg", "run_in_background": true})
	if code != 200 {
		t.Fatalf("background: %d %v", code, m)
	}
	task := m["result"].(map[string]any)["taskId"].(string)
	fa.add(approval.Approval{ID: "b1", Tenant: "beta", Session: "beta-s", Tool: "bash", Command: "echo beta", State: approval.Pending})

	acme := newConsoleClient(r)
	acme.login(tokenAcme)
	_, ov := acme.send("GET", "/ui/api/overview", nil, nil)
	if b, _ := json.Marshal(ov); bytes.Contains(b, []byte("beta")) {
		t.Errorf("acme's overview mentions beta: %s", b)
	}
	if ss := ov["sessions"].([]any); len(ss) != 1 || ss[0].(map[string]any)["id"] != "acme-s" {
		t.Errorf("acme's sessions: %v", ss)
	}
	_, foreign := acme.send("POST", "/ui/api/approvals/beta/b1/approve", nil, nil)
	_, random := acme.send("POST", "/ui/api/approvals/beta/zz/approve", nil, nil)
	if errCode(foreign) != "no_such_approval" || strings.Replace(errMsg(foreign), "b1", "ID", 1) != strings.Replace(errMsg(random), "zz", "ID", 1) {
		t.Errorf("foreign decide: %v; random: %v", foreign, random)
	}
	if resp, _ := acme.send("GET", "/ui/api/tasks/beta/beta-s/"+task, nil, nil); resp.StatusCode != 404 {
		t.Errorf("acme peeking at beta's task: %d", resp.StatusCode)
	}
	if fa.get("b1").State != approval.Pending {
		t.Fatal("acme decided beta's approval")
	}

	op := newConsoleClient(r)
	op.login(tokenOperator)
	_, me := op.send("GET", "/ui/api/me", nil, nil)
	if me["operator"] != true || len(me["tenants"].([]any)) != 2 {
		t.Errorf("operator me: %v", me)
	}
	_, ov = op.send("GET", "/ui/api/overview", nil, nil)
	if ss := ov["sessions"].([]any); len(ss) != 2 {
		t.Errorf("operator's sessions: %v", ss)
	}
	ts := ov["tasks"].([]any)
	if len(ts) != 1 || ts[0].(map[string]any)["command"] != "sleep 5" || ts[0].(map[string]any)["status"].(map[string]any)["state"] != "running" {
		t.Errorf("operator's tasks: %v", ts)
	}
	// This backend has no non-consuming read: status only, said so.
	if ov["peek"] != false {
		t.Errorf("peek: %v", ov["peek"])
	}
	if resp, m := op.send("GET", "/ui/api/tasks/beta/beta-s/"+task, nil, nil); resp.StatusCode != 501 || !strings.Contains(errMsg(m), "status only") {
		t.Errorf("peek without a peeker: %d %v", resp.StatusCode, m)
	}
	if resp, m := op.send("GET", "/ui/api/audit", nil, nil); resp.StatusCode != 501 {
		t.Errorf("audit without a log: %d %v", resp.StatusCode, m)
	}
	if resp, m := op.send("POST", "/ui/api/approvals/beta/b1/deny", map[string]string{"reason": "no"}, nil); resp.StatusCode != 200 || m["approver"] != "console:operator" {
		t.Errorf("operator deny: %d %v", resp.StatusCode, m)
	}
	_, m = r.json("POST", "/v1/sessions/beta-s/tools/bash_kill", tokenBeta, map[string]string{"task_id": task})
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, ov = op.send("GET", "/ui/api/overview", nil, nil)
		st := ov["tasks"].([]any)[0].(map[string]any)["status"].(map[string]any)["state"]
		if st == "killed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task state after bash_kill: %v (%v)", st, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConsoleWarningsScoped: from an attack review, a tenant's login saw
// every tenant's policy load errors in the health panel (another tenant's
// name, file and rule text). It sees its own tenant's alone; an operator
// sees every one, the deployment's included.
func TestConsoleWarningsScoped(t *testing.T) {
	r, _ := newConsoleRig(t)
	r.b.mu.Lock()
	r.b.warnings = []Warning{
		{Tenant: "beta", Text: "tenant beta: no policy in force: beta.yaml:3: rules[0].match.argsRegex[0]: bad regular expression"},
		{Tenant: "acme", Text: "tenant acme: edit rejected: acme.yaml:1: defualt: unknown key"},
		{Text: "the deployment's own"},
	}
	r.b.mu.Unlock()
	warnings := func(token string) []any {
		c := newConsoleClient(r)
		if resp := c.login(token); resp.StatusCode != 200 {
			t.Fatalf("login: %d", resp.StatusCode)
		}
		_, ov := c.send("GET", "/ui/api/overview", nil, nil)
		ws, _ := ov["health"].(map[string]any)["warnings"].([]any)
		return ws
	}
	if ws := warnings(tokenAcme); len(ws) != 1 || !strings.HasPrefix(ws[0].(string), "tenant acme:") {
		t.Errorf("acme's health warnings: %q", ws)
	}
	if ws := warnings(tokenOperator); len(ws) != 3 {
		t.Errorf("the operator's health warnings: %q", ws)
	}
}

// From an attack review: a tenant logging in again and again cannot push
// the operator's login out, and once a client's failed logins have used its
// budget its right token waits too (a lucky guess gets no answer of its own).
func TestConsoleLoginLimits(t *testing.T) {
	r, _ := newConsoleRig(t)
	op := newConsoleClient(r)
	if resp := op.login(tokenOperator); resp.StatusCode != 200 {
		t.Fatalf("operator login: %d", resp.StatusCode)
	}
	for range maxLoginsPerPrincipal * 3 {
		if resp := newConsoleClient(r).login(tokenAcme); resp.StatusCode != 200 {
			t.Fatalf("tenant login: %d", resp.StatusCode)
		}
	}
	if resp, m := op.send("GET", "/ui/api/me", nil, nil); resp.StatusCode != 200 || m["operator"] != true {
		t.Errorf("the operator's login after 48 tenant logins: %d %v", resp.StatusCode, m)
	}
	r.srv.console.mu.Lock()
	n := 0
	for _, l := range r.srv.console.logins {
		if l.label() == "tenant:acme" {
			n++
		}
	}
	r.srv.console.mu.Unlock()
	if n > maxLoginsPerPrincipal {
		t.Errorf("tenant acme holds %d logins, over %d", n, maxLoginsPerPrincipal)
	}
	for {
		if resp := newConsoleClient(r).login("wrong"); resp.StatusCode == 429 {
			break
		}
	}
	if resp := newConsoleClient(r).login(tokenAcme); resp.StatusCode != 429 {
		t.Errorf("a right token while failures are over budget: %d, want 429", resp.StatusCode)
	}
}

// TestConsoleLoginLimitPerClient: from an attack review, failed logins
// shared one limit, so ~10 bad logins a second from an unauthenticated
// client made most valid operator logins answer 429. The limit is per
// client (IPv4 address, IPv6 /64): another client's valid logins pass
// while one is over its budget, and the table of clients stays bounded.
func TestConsoleLoginLimitPerClient(t *testing.T) {
	r, _ := newConsoleRig(t)
	// A still clock: no budget refills while the test runs, however slow.
	still := time.Now()
	r.srv.console.failed.now = func() time.Time { return still }
	h := r.ts.Config.Handler
	login := func(from, token string) int {
		b, _ := json.Marshal(map[string]string{"token": token})
		req := httptest.NewRequest("POST", "/ui/api/login", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = from
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	overBudget := func(from string) {
		t.Helper()
		for range loginFailBurst * 10 {
			if login(from, "wrong") == 429 {
				return
			}
		}
		t.Fatalf("%s: %d failed logins, never 429", from, loginFailBurst*10)
	}
	overBudget("192.0.2.1:4000")
	for i := range 50 {
		if code := login("192.0.2.1:4001", "wrong"); code != 429 {
			t.Fatalf("the guessing client's failure %d: %d, want 429", i, code)
		}
		if code := login("198.51.100.7:5000", tokenOperator); code != 200 {
			t.Fatalf("another client's operator login %d while one guesses: %d", i, code)
		}
	}
	if code := login("192.0.2.1:4002", tokenOperator); code != 429 {
		t.Errorf("the guessing client's own right token: %d, want 429", code)
	}
	// One IPv6 /64 is one client; the next /64 is another.
	overBudget("[2001:db8:0:1::1]:4000")
	if code := login("[2001:db8:0:1::ffff]:4000", tokenOperator); code != 429 {
		t.Errorf("the same /64: %d, want 429", code)
	}
	if code := login("[2001:db8:0:2::1]:4000", tokenOperator); code != 200 {
		t.Errorf("another /64: %d", code)
	}
	for i := range maxLoginClients + 100 {
		login(fmt.Sprintf("10.%d.%d.1:1", i>>8&0xff, i&0xff), "wrong")
	}
	if n := r.srv.console.failed.len(); n > maxLoginClients {
		t.Errorf("%d clients in the table, over %d", n, maxLoginClients)
	}
}

// TestConsoleUsage: the console's usage API is scoped as /v1/usage is (a
// tenant's login reads its own tenant, naming another is refused; an
// operator's reads every tenant), answers per-hour series for the chart,
// downloads /v1/usage's CSV, and says when usage is not measured.
func TestConsoleUsage(t *testing.T) {
	r, _, hour := usageRig(t)
	acme := newConsoleClient(r)
	acme.login(tokenAcme)
	resp, _ := acme.send("GET", "/ui/api/usage", nil, nil)
	var got ConsoleUsage
	get := func(c *consoleClient, path string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", r.ts.URL+path, nil)
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got = ConsoleUsage{}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil && resp.StatusCode == 200 {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	if code := get(acme, "/ui/api/usage"); code != 200 || resp.StatusCode != 200 {
		t.Fatalf("acme's usage: %d", code)
	}
	if len(got.Sessions) != 2 || got.SessionsTotal != 2 || len(got.Tenants) != 1 || got.Tenants["acme"].CPUSeconds != 3 || got.TenantSessions["acme"] != 2 {
		t.Errorf("acme's usage: %+v", got)
	}
	if len(got.Series) != 1 || got.Series[0].Tenant != "acme" || !got.Series[0].Hour.Equal(hour) || got.Series[0].CPUSeconds != 3 || got.Series[0].SandboxSeconds != 70 {
		t.Errorf("acme's series: %+v", got.Series)
	}
	if b, _ := json.Marshal(got); bytes.Contains(b, []byte("beta")) {
		t.Errorf("acme's usage mentions beta: %s", b)
	}
	if code := get(acme, "/ui/api/usage?tenant=beta"); code != 400 {
		t.Errorf("acme asking for beta's usage: %d, want 400", code)
	}
	op := newConsoleClient(r)
	op.login(tokenOperator)
	if code := get(op, "/ui/api/usage"); code != 200 || len(got.Tenants) != 2 || len(got.Series) != 2 || got.Tenants["beta"].CPUSeconds != 7 {
		t.Errorf("operator's usage: %d %+v", code, got)
	}
	if code := get(op, "/ui/api/usage?tenant=beta"); code != 200 || len(got.Sessions) != 1 || len(got.Series) != 1 || got.Series[0].Tenant != "beta" {
		t.Errorf("operator, tenant=beta: %d %+v", code, got)
	}
	req, _ := http.NewRequest("GET", r.ts.URL+"/ui/api/usage?format=csv", nil)
	resp, err := acme.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	csvBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(csvBody), "tenant,session,") || strings.Count(string(csvBody), "\nacme,") != 2 || strings.Contains(string(csvBody), "beta") {
		t.Errorf("acme's CSV: %d %q", resp.StatusCode, csvBody)
	}
	// Without a login, 401; on a server that measures nothing, 501.
	if code := get(newConsoleClient(r), "/ui/api/usage"); code != 401 {
		t.Errorf("no login: %d, want 401", code)
	}
	r2, _ := newConsoleRig(t)
	c2 := newConsoleClient(r2)
	c2.login(tokenAcme)
	if resp, m := c2.send("GET", "/ui/api/usage", nil, nil); resp.StatusCode != 501 || !strings.Contains(errMsg(m), "not measured") {
		t.Errorf("no meter: %d %v", resp.StatusCode, m)
	}
}
