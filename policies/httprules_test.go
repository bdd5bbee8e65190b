package policies

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestHTTPRulesPolicy(t *testing.T) {
	p, err := Parse("/p/acme.yaml", []byte(`sandbox:
  network:
    allow: [api.github.com:443, pypi.internal:*]
    http:
      - hosts: [API.GitHub.com.]
        rules:
          - allow GET,HEAD /repos/**
          - allow   POST /repos/acme/*/pulls
          - deny * /**
        default: deny
      - hosts: [pypi.internal]
        rules: [deny POST /**]
        default: allow
`))
	if err != nil {
		t.Fatal(err)
	}
	rs, key := p.Network.HTTPFor("api.github.com")
	if rs == nil || key != "sandbox.network.http[0]" || len(rs.Rules) != 3 {
		t.Fatalf("HTTPFor(api.github.com): %+v %q", rs, key)
	}
	for _, c := range []struct{ method, path, rule string }{
		{"GET", "/repos/acme/x", "sandbox.network.http[0].rules[0]"},
		{"POST", "/repos/acme/x/pulls", "sandbox.network.http[0].rules[1]"},
		{"POST", "/repos/other/x/pulls", "sandbox.network.http[0].rules[2]"},
	} {
		if r := rs.Decide(c.method, c.path); r.Name != c.rule {
			t.Errorf("%s %s: %s, want %s", c.method, c.path, r.Name, c.rule)
		}
	}
	if p.Network.HTTP[0].Rules[1] != "allow POST /repos/acme/*/pulls" {
		t.Errorf("rule text: %q", p.Network.HTTP[0].Rules[1])
	}
	rs, _ = p.Network.HTTPFor("PyPI.internal.")
	if r := rs.Decide("GET", "/simple/x/"); !r.Allow || r.Name != "sandbox.network.http[1].default" {
		t.Errorf("default: %+v", r)
	}
	if rs, _ := p.Network.HTTPFor("github.com"); rs != nil {
		t.Errorf("github.com has rules: %+v", rs)
	}
}

func TestHTTPRulesErrors(t *testing.T) {
	entry := func(fields string) string {
		return "sandbox:\n  network:\n    http:\n      - " + fields + "\n"
	}
	cases := []struct{ src, want string }{
		{entry(`{rules: [allow GET /a], default: deny}`), "acme.yaml:4: sandbox.network.http[0].hosts: required"},
		{entry(`{hosts: [h.example], rules: [allow GET /a]}`), "sandbox.network.http[0].default: required: allow or deny"},
		{entry(`{hosts: [h.example], default: ask}`), `sandbox.network.http[0].default: "ask": allow or deny`},
		{entry(`{hosts: ["*.h.example"], default: deny}`), `http[0].hosts[0]: "*.h.example": rules name their hosts exactly`},
		{entry(`{hosts: ["h.example:443"], default: deny}`), `http[0].hosts[0]: "h.example:443": a host name without a port`},
		{entry(`{hosts: ["10.0.0.1"], default: deny}`), `http[0].hosts[0]: "10.0.0.1": a host name, not an address`},
		{entry(`{hosts: [h.example], default: deny}`) + "      - {hosts: [H.example], default: allow}", `http[1].hosts[0]: "H.example" already has rules in sandbox.network.http[0]`},
		{entry(`{hosts: [h.example], default: deny, rules: [GET /a]}`), `sandbox.network.http[0].rules[0]: "GET /a": want "allow|deny METHOD PATTERN"`},
		{entry(`{hosts: [h.example], default: deny, rules: [allow GET /a, allow GET repos/**]}`), `sandbox.network.http[0].rules[1]: "allow GET repos/**": pattern "repos/**" must start with /`},
		{entry(`{hosts: [h.example], default: deny, rules: ["allow GET /a%2Fb"]}`), `http[0].rules[0]: "allow GET /a%2Fb": pattern "/a%2Fb" has a %`},
		{entry(`{hosts: [h.example], default: deny, rules: ["allow G(T /a"]}`), `http[0].rules[0]: "allow G(T /a": "G(T" is not a method`},
		{entry(`{hosts: [h.example], default: deny, rules: {a: b}}`), "sandbox.network.http[0].rules"},
	}
	for _, c := range cases {
		_, err := Parse("/p/acme.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n  %v\nwant %s", c.src, err, c.want)
		}
	}
	// The line is the bad rule's.
	_, err := Parse("/p/acme.yaml", []byte("sandbox:\n  network:\n    http:\n      - hosts: [h.example]\n        default: deny\n        rules:\n          - allow GET /a\n          - allow GET /a//b\n"))
	if err == nil || !strings.Contains(err.Error(), `acme.yaml:8: sandbox.network.http[0].rules[1]: "allow GET /a//b": pattern "/a//b" has an empty segment`) {
		t.Errorf("line: %v", err)
	}
	var many strings.Builder
	many.WriteString("sandbox:\n  network:\n    http:\n      - hosts: [h.example]\n        default: deny\n        rules:\n")
	for i := range 129 {
		fmt.Fprintf(&many, "          - allow GET /a%d\n", i)
	}
	if _, err := Parse("/p/acme.yaml", []byte(many.String())); err == nil || !strings.Contains(err.Error(), "sandbox.network.http[0].rules: 129 rules: at most 128") {
		t.Errorf("too many: %v", err)
	}
}

// TestAuditEgressRule: a request an HTTP rule decided is audited under
// that rule.
func TestAuditEgressRule(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := OpenAudit(path, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	e := openEngine(t, dir, Options{NoWatch: true, Audit: a})
	req := EgressRequest{Host: "api.github.com", Method: "POST", Path: "/repos/acme/x/merges", Status: 403,
		Rule: "sandbox.network.http[0].rules[2]", RuleText: "deny POST /repos/acme/*/merges"}
	if err := e.AuditEgress("acme", "s1", req, `shellbox egress: POST api.github.com/repos/acme/x/merges is denied by rule sandbox.network.http[0].rules[2]: "deny POST /repos/acme/*/merges"`); err != nil {
		t.Fatal(err)
	}
	recs, _, err := ReadAudit(path, 10, "acme")
	if err != nil || len(recs) != 1 {
		t.Fatalf("%+v %v", recs, err)
	}
	r := recs[0]
	if r.Decision != Deny || r.Rule != "sandbox.network.http[0].rules[2]" || r.Egress.Rule != r.Rule || r.Egress.RuleText != "deny POST /repos/acme/*/merges" {
		t.Errorf("%+v %+v", r, r.Egress)
	}
}

// TestHTTPRulesExample: examples/mirror.yaml keeps its mirrors read-only.
func TestHTTPRulesExample(t *testing.T) {
	p := loadExample(t, "mirror")
	rs, _ := p.Network.HTTPFor("pypi-mirror.internal")
	if rs == nil {
		t.Fatal("no rules for pypi-mirror.internal")
	}
	if r := rs.Decide("GET", "/simple/numpy/"); !r.Allow {
		t.Errorf("GET: %+v", r)
	}
	if r := rs.Decide("POST", "/legacy/"); r.Allow || r.Name != "sandbox.network.http[0].default" {
		t.Errorf("POST: %+v", r)
	}
}
