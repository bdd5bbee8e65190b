package main

import (
	"os"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/sandbox/enginetest"
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
	cs := serveWithCredential(t, eng, bin, secret, port, originCA, nil, `    http:
      - hosts: [localhost]
        rules:
          - deny * /repos/acme/secret/**
          - allow GET,HEAD /repos/**
          - allow POST /repos/acme/*/pulls
        default: deny
`, "rules")
	audit, call := cs.audit, cs.call
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
