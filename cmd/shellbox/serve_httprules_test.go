package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
)

// TestServeHTTPRules: a tenant's policy gives a destination HTTP rules
// (sandbox.network.http); curl in the sandbox, through `shellbox serve`'s
// relay, gets what the rules allow from an HTTPS server of the host (the
// credential injected on the way), and for what they deny the relay's 403,
// which curl prints with the rule, while the origin never sees the
// request. A denied request on a connection curl reuses for an allowed
// one (--next) is judged on its own, and the audit names each request's
// rule.
func TestServeHTTPRules(t *testing.T) { enginetest.Each(t, serveHTTPRules) }

func serveHTTPRules(t *testing.T, eng enginetest.Engine) {
	requireEngine(t)
	bin := buildBinaries(t)
	const secret = "ghp_httprules0test0secret"
	port, originCA, seen := credentialOrigin(t, secret)
	secretsDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(secretsDir, "github-token"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pols := t.TempDir()
	pol := fmt.Sprintf(`default: allow
env:
  NO_PROXY: "127.0.0.1"
  no_proxy: "127.0.0.1"
sandbox:
  images: [%s]
  runtime: runc
  network:
    allow: ["localhost:%s"]
    credentials:
      - name: github
        hosts: [localhost]
        value: "${secret:github-token}"
        placeholder: GITHUB_TOKEN
    http:
      - hosts: [localhost]
        rules:
          - deny * /repos/acme/secret/**
          - allow GET,HEAD /repos/**
          - allow POST /repos/acme/*/pulls
        default: deny
`, dockertest.Image, port)
	if err := os.WriteFile(filepath.Join(pols, dockerTenant+".yaml"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "audit.log")
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(eng.Config(t)+fmt.Sprintf(`tenant: %s
policies:
  dir: %s
audit:
  file: %s
secrets:
  dir: %s
egress:
  blocked: []
  upstreamCA: %s
  caDir: %s
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  labels:
    %s: "1"
server:
  tenants:
    %s:
      tokens: [%q]
`, dockerTenant, pols, audit, secretsDir, originCA, t.TempDir(), dockertest.StateDir(t), dockertest.Owner(t), dockertest.Image, dockertest.LabelTest,
		dockerTenant, server.HashToken(testToken))), 0o644)
	removeSandboxesAtEnd(t, cfg, dockerTenant, "rules")

	p := startServeProcess(t, bin, cfg)
	c := client.New(p.url, testToken, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	call := func(command string) string {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"command": command, "description": "http rules test"})
		r, err := c.Call(ctx, "rules", "bash", args)
		if err != nil || r.IsError {
			t.Fatalf("%s: %v %q", command, err, r.Text)
		}
		return r.Text
	}
	o := "https://localhost:" + port
	auth := `-H "Authorization: Bearer $GITHUB_TOKEN"`
	// Allowed: the origin answers, with the credential injected.
	if got := call(`curl -sS -m 30 ` + auth + ` ` + o + `/repos/acme/app 2>&1`); got != "credential ok /repos/acme/app" {
		t.Fatalf("GET allowed by a rule: %q (origin saw %q)", got, seen())
	}
	before := len(seen())
	// Denied: the relay's 403, naming the rule, as curl prints it; the
	// origin sees nothing.
	denied := []struct{ cmd, rule string }{
		{`curl -sS -m 30 -X DELETE ` + auth + ` ` + o + `/repos/acme/app`, "the default (no rule matched)"},
		{`curl -sS -m 30 ` + auth + ` ` + o + `/repos/acme/secret/keys`, `"deny * /repos/acme/secret/**"`},
		// The same path by other spellings: judged as the one form.
		{`curl -sS -m 30 --path-as-is ` + auth + ` ` + o + `/repos/acme/app/../secret//keys`, `"deny * /repos/acme/secret/**"`},
		{`curl -sS -m 30 ` + auth + ` ` + o + `/repos/acme/%73ecret/keys`, `"deny * /repos/acme/secret/**"`},
		{`curl -sS -m 30 -X post ` + auth + ` ` + o + `/repos/acme/app/issues`, "the default (no rule matched)"},
	}
	for _, d := range denied {
		got := call(d.cmd + ` -w '\nstatus %{http_code}' 2>&1`)
		if !strings.Contains(got, "is denied by rule") || !strings.Contains(got, d.rule) || !strings.HasSuffix(got, "status 403") {
			t.Errorf("%s: %q, want the relay's 403 naming %s", d.cmd, got, d.rule)
		}
	}
	// Allowed after denied, and denied after allowed, in one curl (its
	// connections reused where the relay keeps them).
	got := call(`curl -sS -m 30 ` + auth + ` -X POST ` + o + `/repos/acme/app/pulls -w '\n%{http_code}\n' --next ` + auth + ` -X POST ` + o + `/repos/acme/app/merge -w '\n%{http_code}\n' --next ` + auth + ` ` + o + `/repos/acme/app/tags -w '\n%{http_code}' 2>&1`)
	if want := "credential ok /repos/acme/app/pulls\n200\n"; !strings.HasPrefix(got, want) || !strings.Contains(got, "is denied by rule") ||
		!strings.HasSuffix(got, "credential ok /repos/acme/app/tags\n200") {
		t.Errorf("allowed, denied, allowed in one curl: %q", got)
	}
	if n := len(seen()) - before; n != 2 {
		t.Errorf("the origin saw %d requests after the denied ones, want the 2 allowed: %q", n, seen()[before:])
	}
	// The audit names the rule of each request.
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	if a := string(b); !strings.Contains(a, "/repos/acme/secret/**") || !strings.Contains(a, "allow GET,HEAD /repos/**") {
		t.Errorf("the audit does not name the rules that decided:\n%s", a)
	}
	if strings.Contains(string(b), secret) {
		t.Errorf("the audit holds the secret")
	}
}
