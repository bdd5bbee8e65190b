package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/session"
)

// consolePolicy allows everything but "echo deploy …", which asks.
const consolePolicy = `version: 1
default: allow
askTimeout: 1m
tools:
  bash: true
  background: true
rules:
  - name: deploy
    decision: ask
    reason: deploys need a human
    match:
      prefix: ["echo deploy"]
`

const (
	acmeToken     = "acme-console-token"
	betaToken     = "beta-console-token"
	operatorToken = "operator-console-token"
)

// chromiumPath finds Debian's chromium (or another Chrome). In CI its
// absence fails the test: .ci/run installs it (apt-get install chromium).
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: the console's browser test needs it (Debian: apt-get install -y chromium)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// consoleRig is a server as `shellbox serve` builds it on the local
// backend: the session layer, the policy engine (asks held for approval,
// decisions audited) and the console with an operator token.
type consoleRig struct {
	url        string
	acme, beta *client.Client
}

func startConsoleRig(t *testing.T) *consoleRig {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "beta"} {
		if err := os.WriteFile(filepath.Join(dir, "policies", tenant+".yaml"), []byte(consolePolicy), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	auditFile := filepath.Join(dir, "audit.log")
	audit, err := policies.OpenAudit(auditFile, policies.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policies.Open(filepath.Join(dir, "policies"), policies.Options{NoWatch: true, Audit: audit})
	if err != nil {
		t.Fatal(err)
	}
	var layer *session.Service
	srv, err := server.New(server.Config{
		NewBackend: func(n server.Notifier, m server.Metrics) (server.Backend, error) {
			layer, err = session.New(session.Config{
				Local:    session.LocalConfig{Root: filepath.Join(dir, "root"), SpillDir: filepath.Join(dir, "spill"), Cgroup: "off"},
				Policies: engine,
				Notifier: n,
				Metrics:  m,
			})
			return layer, err
		},
		Approvals: session.Approvals(engine),
		Tenants: map[string]server.TenantConfig{
			"acme": {Tokens: []string{server.HashToken(acmeToken)}},
			"beta": {Tokens: []string{server.HashToken(betaToken)}},
		},
		Console: server.ConsoleConfig{
			OperatorTokens: []string{server.HashToken(operatorToken)},
			ReadAudit: func(n int, tenant string) ([]server.AuditRecord, error) {
				recs, _, err := policies.TailAudit(auditFile, n, tenant, 8<<20)
				out := make([]server.AuditRecord, len(recs))
				for i, r := range recs {
					out[i] = server.AuditRecord{Time: r.Time, Tenant: r.Tenant, Session: r.Session, Tool: r.Tool,
						Command: r.Command, Decision: string(r.Decision), Rule: r.Rule, Reason: r.Reason,
						Justification: r.Justification, Approval: r.Approval, Approver: r.Approver}
				}
				return out, err
			},
		},
		Version: "console-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Drain(ctx)
		hs.CloseClientConnections()
		hs.Close()
		layer.Close(ctx)
		engine.Close()
		audit.Close()
	})
	return &consoleRig{url: hs.URL, acme: client.New(hs.URL, acmeToken, nil), beta: client.New(hs.URL, betaToken, nil)}
}

// bash calls the bash tool as a model would and returns the result text.
func bash(ctx context.Context, t *testing.T, c *client.Client, session string, args map[string]any) string {
	t.Helper()
	return callTool(ctx, t, c, session, "bash", args)
}

func callTool(ctx context.Context, t *testing.T, c *client.Client, session, tool string, args map[string]any) string {
	t.Helper()
	raw, _ := json.Marshal(args)
	res, err := c.Call(ctx, session, tool, raw)
	if err != nil {
		t.Errorf("bash %v: %v", args, err)
		return ""
	}
	return res.Text
}

// artifacts is where screenshots go: $SHELLBOX_UI_ARTIFACTS, else a
// temporary directory.
func artifacts(t *testing.T) string {
	dir := os.Getenv("SHELLBOX_UI_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestConsoleInBrowser drives the console in headless Chromium: log in
// with a tenant token, see the session, watch a background task's output
// grow (the model's bash_output cursor untouched), approve an ask and see
// the held call complete, deny one and see the model's error; another
// tenant's token sees none of it; an operator's sees both tenants.
func TestConsoleInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	rig := startConsoleRig(t)
	shots := artifacts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 1100),
	)...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	// Script errors and browser log entries (a CSP violation is one) fail
	// the test.
	var (
		mu         sync.Mutex
		pageErrors []string
	)
	chromedp.ListenTarget(browser, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			pageErrors = append(pageErrors, "exception: "+ev.ExceptionDetails.Error())
		case *cdplog.EventEntryAdded:
			e := ev.Entry
			// Expected refusals: not logged in yet, the wrong token, and
			// beta reaching for acme's task.
			expected := e.Source == cdplog.SourceNetwork &&
				(strings.HasSuffix(e.URL, "/ui/api/me") && strings.Contains(e.Text, "401") ||
					strings.HasSuffix(e.URL, "/ui/api/login") && strings.Contains(e.Text, "401") ||
					strings.Contains(e.URL, "/ui/api/tasks/acme/") && strings.Contains(e.Text, "404"))
			if e.Level == cdplog.LevelError && !expected {
				pageErrors = append(pageErrors, string(e.Source)+": "+e.Text+" "+e.URL)
			}
		}
	})
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(browser, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) {
		t.Helper()
		var png []byte
		run("screenshot "+name, chromedp.FullScreenshot(&png, 100))
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", p)
	}
	// waitText polls sel's text until ok says yes.
	waitText := func(what, sel string, ok func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var s string
			err := chromedp.Run(browser, chromedp.Evaluate(fmt.Sprintf(`(function(){const e=document.querySelector(%q);return e?e.textContent:""})()`, sel), &s))
			if err == nil && ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s is %q (%v)", what, sel, s, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	login := func(token string) {
		t.Helper()
		run("log in",
			cdplog.Enable(),
			chromedp.Navigate(rig.url+"/ui/"),
			chromedp.WaitVisible("#token", chromedp.ByQuery),
			chromedp.SendKeys("#token", token, chromedp.ByQuery),
			chromedp.Click("#login-form button", chromedp.ByQuery),
			chromedp.WaitVisible("#app", chromedp.ByQuery),
		)
	}
	logout := func() {
		t.Helper()
		run("log out", chromedp.Click("#logout", chromedp.ByQuery), chromedp.WaitVisible("#token", chromedp.ByQuery))
	}

	// The model works in acme/s1; beta has a session of its own.
	if got := bash(ctx, t, rig.acme, "s1", map[string]any{"command": "echo hello", "description": "greet"}); got != "hello" {
		t.Fatalf("first call: %q", got)
	}
	bash(ctx, t, rig.beta, "beta-private", map[string]any{"command": "true", "description": "noop"})

	// A wrong token is refused, in words.
	run("bad login",
		cdplog.Enable(),
		chromedp.Navigate(rig.url+"/ui/"),
		chromedp.WaitVisible("#token", chromedp.ByQuery),
		chromedp.SendKeys("#token", "not-a-token", chromedp.ByQuery),
		chromedp.Click("#login-form button", chromedp.ByQuery),
	)
	waitText("bad login", "#login-error", func(s string) bool { return s == "unknown token" })

	login(acmeToken)
	waitText("whoami", "#whoami", func(s string) bool { return s == "tenant acme" })
	waitText("session row", `#sessions tr[data-session="s1"]`, func(s string) bool { return strings.Contains(s, "acme") && strings.Contains(s, "running") })
	if s := waitText("sessions", "#sessions tbody", func(string) bool { return true }); strings.Contains(s, "beta") {
		t.Errorf("acme's console lists beta's sessions: %q", s)
	}
	shot("01-sessions")

	// A background task's output grows in the console while the model has
	// not read it; the model's first read still starts at line 1.
	started := bash(ctx, t, rig.acme, "s1", map[string]any{"command": "for i in $(seq 1 30); do echo line $i; sleep 0.1; done",
		"description": "count", "run_in_background": true})
	id, ok := strings.CutPrefix(started, "started background task ")
	if !ok {
		t.Fatalf("background start: %q", started)
	}
	row := fmt.Sprintf(`#tasks tr[data-task=%q]`, id)
	waitText("task row", row, func(s string) bool { return strings.Contains(s, "running") })
	run("watch task", chromedp.Click(row+" button.tail", chromedp.ByQuery), chromedp.WaitVisible("#tail-panel", chromedp.ByQuery))
	first := waitText("tail", "#tail-stdout", func(s string) bool { return strings.Contains(s, "line 2\n") })
	grown := waitText("tail grows", "#tail-stdout", func(s string) bool { return len(s) > len(first) && strings.Contains(s, "line 8\n") })
	t.Logf("tail grew from %d to %d bytes", len(first), len(grown))
	shot("02-task-output")
	waitText("task done", "#tail-status", func(s string) bool { return strings.HasPrefix(s, "completed (exit 0)") })
	out := callTool(ctx, t, rig.acme, "s1", "bash_output", map[string]any{"task_id": id})
	if !strings.HasPrefix(out, "line 1\nline 2\n") || !strings.Contains(out, "line 30") {
		t.Errorf("the model's bash_output after the console watched: %q", out)
	}

	// An ask shows command, justification and rule; approving releases
	// the held call.
	answer := make(chan string, 1)
	go func() {
		answer <- bash(ctx, t, rig.acme, "s1", map[string]any{"command": "echo deploy prod", "description": "deploy",
			"justification": "the release is tagged"})
	}()
	card := `#approvals .approval`
	waitText("approval", card+" .cmd", func(s string) bool { return s == "echo deploy prod" })
	waitText("justification", card+" .just", func(s string) bool { return s == "the release is tagged" })
	waitText("rule", card+" .rule", func(s string) bool { return s == "deploy" })
	shot("03-approval-pending")
	clicked := time.Now()
	run("approve", chromedp.Click(card+" button.approve", chromedp.ByQuery))
	select {
	case got := <-answer:
		t.Logf("held call answered %v after the click", time.Since(clicked).Round(time.Millisecond))
		if got != "deploy prod" {
			t.Errorf("approved call: %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the approved call was not released")
	}
	waitText("approved shown", "#decided", func(s string) bool {
		return strings.Contains(s, "approved") && strings.Contains(s, "by console:tenant:acme")
	})

	// Denying: the model reads the policy's error with the approver's
	// reason. The command hides a right-to-left override and an escape
	// sequence: the card shows them as marks, and warns.
	go func() {
		answer <- bash(ctx, t, rig.acme, "s1", map[string]any{"command": "echo deploy friday-evening # \u202eno-op\x1b[2K", "description": "deploy",
			"justification": "it's urgent"})
	}()
	waitText("second approval", card+" .cmd", func(s string) bool { return s == `echo deploy friday-evening # \u202eno-op\x1b[2K` })
	waitText("hidden characters flagged", card+" .warning", func(s string) bool { return strings.Contains(s, "bidi") })
	shot("04-approval-hidden-characters")
	run("deny", chromedp.SendKeys(card+" input.reason", "not on a Friday", chromedp.ByQuery), chromedp.Click(card+" button.deny", chromedp.ByQuery))
	select {
	case got := <-answer:
		want := "Error: denied by policy acme/deploy: denied by approver console:tenant:acme: not on a Friday"
		if got != want {
			t.Errorf("denied call: %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the denied call was not released")
	}
	waitText("approvals empty", "#approvals", func(s string) bool { return s == "" })
	run("open decided", chromedp.Evaluate(`document.querySelector("details").open = true`, nil))
	waitText("denied shown", "#decided", func(s string) bool { return strings.Contains(s, "denied") && strings.Contains(s, "not on a Friday") })
	run("refresh audit", chromedp.Click("#audit-refresh", chromedp.ByQuery))
	waitText("audit", "#audit tbody", func(s string) bool {
		return strings.Contains(s, "echo deploy friday-evening") && strings.Contains(s, "console:tenant:acme")
	})
	shot("05-decided-and-audit")

	// Another tenant sees nothing of acme's, nor can it reach it by URL.
	logout()
	login(betaToken)
	waitText("beta session", `#sessions tr[data-session="beta-private"]`, func(s string) bool { return strings.Contains(s, "beta") })
	for _, sel := range []string{"#sessions tbody", "#tasks tbody", "#decided", "#audit tbody"} {
		if s := waitText("beta view", sel, func(string) bool { return true }); strings.Contains(s, "acme") || strings.Contains(s, "deploy") {
			t.Errorf("beta's console shows acme's %s: %q", sel, s)
		}
	}
	var status int
	run("beta peeks at acme's task", chromedp.Evaluate(fmt.Sprintf(`fetch("/ui/api/tasks/acme/s1/%s").then(r => r.status)`, id), &status,
		func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if status != 404 {
		t.Errorf("beta reading acme's task: %d, want 404", status)
	}
	shot("06-other-tenant")

	// The operator sees every tenant.
	logout()
	login(operatorToken)
	waitText("operator whoami", "#whoami", func(s string) bool { return strings.HasPrefix(s, "operator") })
	waitText("operator sessions", "#sessions tbody", func(s string) bool { return strings.Contains(s, "beta-private") && strings.Contains(s, "s1") })
	shot("07-operator")

	mu.Lock()
	defer mu.Unlock()
	if len(pageErrors) > 0 {
		t.Errorf("page errors:\n%s", strings.Join(pageErrors, "\n"))
	}
}
