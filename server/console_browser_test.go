package server_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/session"
	"github.com/shellbox/shellbox/usage"
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

// artifacts is where a test's screenshots go: under
// $SHELLBOX_TEST_ARTIFACTS (or $SHELLBOX_UI_ARTIFACTS, its older name) in
// a directory named after the test, else the test's artifact directory
// (go test -artifacts -outputdir DIR keeps it under DIR; without
// -artifacts it is a temporary directory).
func artifacts(t *testing.T) string {
	dir := cmp.Or(os.Getenv("SHELLBOX_TEST_ARTIFACTS"), os.Getenv("SHELLBOX_UI_ARTIFACTS"))
	if dir == "" {
		return t.ArtifactDir()
	}
	dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser is a headless Chromium on a console at url; script errors and
// browser log entries (a CSP violation is one) not expected fail the
// test when it ends.
type browser struct {
	t     *testing.T
	url   string
	ctx   context.Context
	shots string

	mu         sync.Mutex
	pageErrors []string
}

// newBrowser starts Chromium for t, stopped when t ends. expected says
// which error log entries a test provokes on purpose.
func newBrowser(t *testing.T, ctx context.Context, url string, expected func(e *cdplog.Entry) bool) *browser {
	chrome := chromiumPath(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 1100),
	)...)
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	b := &browser{t: t, url: url, ctx: bctx, shots: artifacts(t)}
	chromedp.ListenTarget(bctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			b.pageErrors = append(b.pageErrors, "exception: "+ev.ExceptionDetails.Error())
		case *cdplog.EventEntryAdded:
			e := ev.Entry
			// Not logged in yet is expected of every test.
			if e.Level == cdplog.LevelError && !(e.Source == cdplog.SourceNetwork && strings.HasSuffix(e.URL, "/ui/api/me") && strings.Contains(e.Text, "401")) &&
				(expected == nil || !expected(e)) {
				b.pageErrors = append(b.pageErrors, string(e.Source)+": "+e.Text+" "+e.URL)
			}
		}
	})
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.pageErrors) > 0 {
			t.Errorf("page errors:\n%s", strings.Join(b.pageErrors, "\n"))
		}
	})
	return b
}

func (b *browser) run(what string, actions ...chromedp.Action) {
	b.t.Helper()
	if err := chromedp.Run(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// shot keeps a full-page screenshot as <artifacts>/<name>.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	var png []byte
	b.run("screenshot "+name, chromedp.FullScreenshot(&png, 100))
	p := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", p)
}

// evaluate returns the value of a script expression.
func (b *browser) evaluate(what, expr string, out any) {
	b.t.Helper()
	b.run(what, chromedp.Evaluate(expr, out))
}

// waitText polls sel's text until ok says yes.
func (b *browser) waitText(what, sel string, ok func(string) bool) string {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var s string
		err := chromedp.Run(b.ctx, chromedp.Evaluate(fmt.Sprintf(`(function(){const e=document.querySelector(%q);return e?e.textContent:""})()`, sel), &s))
		if err == nil && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: %s is %q (%v)", what, sel, s, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *browser) login(token string) {
	b.t.Helper()
	b.run("log in",
		cdplog.Enable(),
		chromedp.Navigate(b.url+"/ui/"),
		chromedp.WaitVisible("#token", chromedp.ByQuery),
		chromedp.SendKeys("#token", token, chromedp.ByQuery),
		chromedp.Click("#login-form button", chromedp.ByQuery),
		chromedp.WaitVisible("#app", chromedp.ByQuery),
	)
}

func (b *browser) logout() {
	b.t.Helper()
	b.run("log out", chromedp.Click("#logout", chromedp.ByQuery), chromedp.WaitVisible("#token", chromedp.ByQuery))
}

// TestConsoleInBrowser drives the console in headless Chromium: log in
// with a tenant token, see the session, watch a background task's output
// grow (the model's bash_output cursor untouched), approve an ask and see
// the held call complete, deny one and see the model's error; another
// tenant's token sees none of it; an operator's sees both tenants.
func TestConsoleInBrowser(t *testing.T) {
	chromiumPath(t)
	rig := startConsoleRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Expected refusals: the wrong token, and beta reaching for acme's
	// task.
	br := newBrowser(t, ctx, rig.url, func(e *cdplog.Entry) bool {
		return e.Source == cdplog.SourceNetwork &&
			(strings.HasSuffix(e.URL, "/ui/api/login") && strings.Contains(e.Text, "401") ||
				strings.Contains(e.URL, "/ui/api/tasks/acme/") && strings.Contains(e.Text, "404"))
	})
	run, shot, waitText, login, logout := br.run, br.shot, br.waitText, br.login, br.logout

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
}

// TestMain removes the agent the usage test builds.
func TestMain(m *testing.M) { dockertest.Main(m) }

// burnCommand spins the shell until its own CPU time, as the scheduler
// counts it (/proc/<pid>/schedstat, read by the shell's builtin read),
// reaches 2 s: a known amount however loaded the host.
const burnCommand = `while read ns rest < /proc/$$/schedstat && [ "$ns" -lt 2000000000 ]; do :; done; echo "burned $ns ns"`

// TestConsoleUsageInBrowser burns 2 CPU-seconds in a Docker sandbox of a
// server that measures usage, ends the session (its figures final), and
// reads the console's usage page in Chromium: the tenant's and the
// session's figures are /v1/usage's, as the page formats them, the burn
// within 5%; another tenant's session, suspended, counts suspended time
// and no sandbox-seconds; the tenant sees no other tenant's; the operator
// sees both,
// and the chart's bars sum to each tenant's figure. Screenshots are kept
// (see artifacts).
func TestConsoleUsageInBrowser(t *testing.T) {
	chromiumPath(t)
	cli := dockertest.Engine(t)
	image := dockertest.EnsureImage(t, cli)
	rt := enginetest.Docker.Runtime(t, dockertest.StateDir(t), dockertest.Agent(t), "")
	acme, beta := dockertest.Tenant("acme"), dockertest.Tenant("beta")
	meter := usage.NewMeter(&usage.Memory{}, nil)
	defaults := session.DefaultsFor(image)
	defaults.Labels = dockertest.Labels()
	snapshots, err := snapshot.NewDir(snapshot.DirOptions{Path: filepath.Join(t.TempDir(), "snapshots")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snapshots.Close() })
	var layer *session.Service
	srv, err := server.New(server.Config{
		NewBackend: func(n server.Notifier, m server.Metrics) (server.Backend, error) {
			var err error
			layer, err = session.New(session.Config{Runtime: rt, Owner: dockertest.Owner(t), Defaults: defaults,
				Snapshots: snapshots, Usage: meter, UsageInterval: time.Second, Notifier: n, Metrics: m})
			return layer, err
		},
		Usage: meter,
		Tenants: map[string]server.TenantConfig{
			acme: {Tokens: []string{server.HashToken(acmeToken)}},
			beta: {Tokens: []string{server.HashToken(betaToken)}},
		},
		Console: server.ConsoleConfig{OperatorTokens: []string{server.HashToken(operatorToken)}},
		Version: "console-usage-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	life, stop := context.WithCancel(context.Background())
	layer.Start(life)
	hs := httptest.NewServer(srv.Handler())
	ca, cb := client.New(hs.URL, acmeToken, nil), client.New(hs.URL, betaToken, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ca.DeleteSession(ctx, "burn") // gone already unless the test failed early
		cb.DeleteSession(ctx, "idle")
		srv.Drain(ctx)
		hs.CloseClientConnections()
		hs.Close()
		stop()
		layer.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	from := time.Now().UTC().Truncate(time.Hour)

	// acme burns 2 CPU-seconds, counted from a baseline after the
	// sandbox started (its agent's and shell's start use CPU too); beta's
	// session idles. Both end, so their figures stop changing (final)
	// and the page and /v1/usage agree to the digit.
	if got := bash(ctx, t, ca, "burn", map[string]any{"command": "true", "description": "start"}); got != "(no output)" {
		t.Fatalf("start: %q", got)
	}
	// settled returns the session's CPU-seconds once two readings, a
	// sampling interval and more apart, agree (what a sandbox used after
	// its last reading is not counted: usage's doc).
	settled := func() float64 {
		t.Helper()
		last := -1.0
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(1500 * time.Millisecond) {
			rep, err := ca.Usage(ctx, url.Values{"session": {"burn"}, "from": {from.Format(time.RFC3339)}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Sessions) == 1 && math.Abs(rep.Sessions[0].CPUSeconds-last) < 0.005 {
				return rep.Sessions[0].CPUSeconds
			}
			if len(rep.Sessions) == 1 {
				last = rep.Sessions[0].CPUSeconds
			}
			if time.Now().After(deadline) {
				t.Fatalf("the session's usage did not settle in 30 s: %+v", rep.Sessions)
			}
		}
	}
	// A known workspace write and a known spill (past the 30,000 bytes
	// kept in memory), for the page's workspace and spill columns.
	if got := bash(ctx, t, ca, "burn", map[string]any{"command": "head -c 10485760 /dev/urandom > /workspace/ws && head -c 100000 /dev/zero | tr '\\0' a",
		"description": "write 10 MiB, spill 100,000 bytes"}); !strings.Contains(got, "truncated") {
		t.Fatalf("the spill: %.300q", got)
	}
	before := settled()
	if got := bash(ctx, t, ca, "burn", map[string]any{"command": burnCommand, "description": "burn 2 CPU-seconds"}); !strings.HasPrefix(got, "burned ") {
		t.Fatalf("burn: %q", got)
	}
	bash(ctx, t, cb, "idle", map[string]any{"command": "true", "description": "noop"})
	burned := settled() - before
	t.Logf("the burn: %.3f CPU-seconds (%.3f before it)", burned, before)
	if math.Abs(burned-2) > 0.1 {
		t.Errorf("%s's burn: %.3f CPU-seconds, want 2 within 5%%", acme, burned)
	}
	// beta's session is suspended: it counts suspended time, no
	// sandbox-seconds, until it is deleted.
	if _, err := cb.SuspendSession(ctx, "idle"); err != nil {
		t.Fatal(err)
	}
	op := client.New(hs.URL, operatorToken, nil)
	q := url.Values{"from": {from.Format(time.RFC3339)}, "to": {from.Add(3 * time.Hour).Format(time.RFC3339)}}
	var rep server.UsageReport
	var sandboxAtSuspend float64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if rep, err = op.Usage(ctx, url.Values{"tenant": {beta}, "from": q["from"]}); err != nil {
			t.Fatal(err)
		}
		if f := rep.Tenants[beta]; sandboxAtSuspend == 0 && f.SuspendedSeconds > 0 {
			sandboxAtSuspend = f.SandboxSeconds
		} else if f.SuspendedSeconds >= 2 {
			// A pass may have seen the sandbox and the record both, as
			// the suspension went: at most one interval more.
			if f.SandboxSeconds-sandboxAtSuspend > 1.5 {
				t.Errorf("beta's suspended session counted sandbox-seconds: %.3f, then %.3f", sandboxAtSuspend, f.SandboxSeconds)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("beta's suspended session counted no suspended time in 30 s: %+v", rep.Sessions)
		}
	}
	for _, end := range []func() error{func() error { return ca.DeleteSession(ctx, "burn") }, func() error { return cb.DeleteSession(ctx, "idle") }} {
		if err := end(); err != nil {
			t.Fatal(err)
		}
	}
	// Final, and two reports a sampling interval and more apart agree.
	var prev []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(1500 * time.Millisecond) {
		if rep, err = op.Usage(ctx, q); err != nil {
			t.Fatal(err)
		}
		cur, _ := json.Marshal(rep.Tenants)
		if len(rep.Sessions) == 2 && rep.Sessions[0].Final && rep.Sessions[1].Final && string(cur) == string(prev) {
			break
		}
		prev = cur
		if time.Now().After(deadline) {
			t.Fatalf("the sessions' usage is not final and settled after 30 s: %+v", rep.Sessions)
		}
	}
	t.Logf("/v1/usage: %s's session was suspended %.1f s", beta, rep.Tenants[beta].SuspendedSeconds)
	if f := rep.Tenants[acme]; f.SpillBytes != 100_000 || math.Abs(float64(f.WorkspaceBytes)/(10<<20)-1) > 0.05 {
		t.Errorf("/v1/usage: %s spilled %d bytes (want 100000) and its workspace holds %d bytes (want 10 MiB within 5%%)", acme, f.SpillBytes, f.WorkspaceBytes)
	}
	t.Logf("/v1/usage: %s's workspace %d bytes (peak %d), spilled %d", acme, rep.Tenants[acme].WorkspaceBytes, rep.Tenants[acme].WorkspacePeakBytes, rep.Tenants[acme].SpillBytes)
	burn := rep.Tenants[acme]
	t.Logf("/v1/usage: %s used %.3f CPU-seconds in %.1f sandbox-seconds (peak %d bytes)", acme, burn.CPUSeconds, burn.SandboxSeconds, burn.MemoryPeakBytes)

	br := newBrowser(t, ctx, hs.URL, nil)
	// cells reads a usage row's figures as the page shows them.
	cells := func(sel string) map[string]string {
		t.Helper()
		br.waitText("usage row", sel, func(s string) bool { return s != "" })
		var out map[string]string
		br.evaluate("read "+sel, fmt.Sprintf(`(function(){const o={};for(const td of document.querySelectorAll(%q)){for(const c of td.classList){if(c.startsWith("u-"))o[c]=td.textContent}}return o})()`, sel+" td"), &out)
		return out
	}
	// size is how the page formats a byte count (app.js, size).
	size := func(b int64) string {
		switch {
		case b <= 0:
			return "—"
		case b < 1<<20:
			return fmt.Sprintf("%.1f KiB", float64(b)/1024)
		}
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	// shown is how the page formats f (app.js, usageCells).
	shown := func(f usage.Figures) map[string]string {
		peak := "—"
		if f.MemoryPeakBytes > 0 {
			peak = fmt.Sprintf("%.1f MiB", float64(f.MemoryPeakBytes)/(1<<20))
		}
		return map[string]string{"u-cpu": fmt.Sprintf("%.3f", f.CPUSeconds), "u-hours": fmt.Sprintf("%.4f", f.SandboxSeconds/3600),
			"u-mem": fmt.Sprintf("%.3f", f.MemoryGiBSeconds), "u-peak": peak, "u-calls": strconv.FormatInt(f.Calls, 10),
			"u-callsec": fmt.Sprintf("%.1fs", f.CallSeconds), "u-suspended": fmt.Sprintf("%.4f", f.SuspendedSeconds/3600),
			"u-ws": size(f.WorkspaceBytes), "u-wspeak": size(f.WorkspacePeakBytes), "u-spill": size(f.SpillBytes),
			"u-egreq": strconv.FormatInt(f.EgressRequests, 10), "u-egsent": size(f.EgressSentBytes), "u-egrecv": size(f.EgressReceivedBytes)}
	}
	same := func(what string, got map[string]string, f usage.Figures) {
		t.Helper()
		want := shown(f)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: the page shows %s %q, /v1/usage %q", what, k, got[k], v)
			}
		}
	}

	br.login(acmeToken)
	row := fmt.Sprintf(`#usage-tenants tr[data-tenant=%q]`, acme)
	same("acme's tenant row", cells(row), burn)
	same("acme's session row", cells(fmt.Sprintf(`#usage-sessions tr[data-session="burn"]`)), rep.Sessions[0].Figures)
	if got := br.waitText("sessions", row+" td.u-sessions", func(s string) bool { return s != "" }); got != "1" {
		t.Errorf("acme's sessions: %q", got)
	}
	if s := br.waitText("usage section", "#usage-section", func(string) bool { return true }); strings.Contains(s, beta) || strings.Contains(s, "idle") {
		t.Errorf("acme's usage page shows beta's: %q", s)
	}
	br.shot("01-usage-tenant")

	br.logout()
	br.login(operatorToken)
	same("operator: acme's row", cells(row), burn)
	same("operator: beta's row", cells(fmt.Sprintf(`#usage-tenants tr[data-tenant=%q]`, beta)), rep.Tenants[beta])
	// The chart's bars of each tenant add up to its figure.
	for _, tenant := range []string{acme, beta} {
		var sum float64
		br.evaluate("chart", fmt.Sprintf(`Array.from(document.querySelectorAll('#usage-chart rect.bar[data-tenant=%q]')).reduce((a, r) => a + Number(r.dataset.v), 0)`, tenant), &sum)
		if want := rep.Tenants[tenant].CPUSeconds; math.Abs(sum-want) > 1e-9 || tenant == acme && sum == 0 {
			t.Errorf("the chart's CPU-seconds of %s: %v, /v1/usage %v", tenant, sum, want)
		}
	}
	br.shot("02-usage-operator")
	br.run("chart memory", chromedp.SetValue("#usage-metric", "mem", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#usage-metric").dispatchEvent(new Event("change"))`, nil))
	br.shot("03-usage-operator-memory")
}
