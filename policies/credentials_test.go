package policies

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestCredentials(t *testing.T) {
	p, err := Parse("/p/acme.yaml", []byte(`env: {FOO: bar}
sandbox:
  network:
    allow: [api.github.com:443, github.com:443]
    credentials:
      - name: github
        hosts: [API.GitHub.com., github.com]
        header: authorization
        value: "Bearer ${secret:github-token}"
        placeholder: GITHUB_TOKEN
      - name: npm
        hosts: [registry.npmjs.org]
        value: "${secret:npm}"
        placeholder: NPM_TOKEN
      - name: deploy
        hosts: [github.com]
        header: X-Deploy-Key
        value: "${secret:deploy}"
        grantedOnly: true
`))
	if err != nil {
		t.Fatal(err)
	}
	got := p.Network.Credentials
	if len(got) != 3 || got[0].GrantedOnly || !got[2].GrantedOnly || got[0].Header != "Authorization" || strings.Join(got[0].Hosts, ",") != "api.github.com,github.com" ||
		got[0].Placeholder != "GITHUB_TOKEN" || strings.Join(got[0].Value.Secrets(), ",") != "github-token" || got[1].Header != "" {
		t.Fatalf("credentials: %+v", got)
	}
	if c := p.Network.ForHost("GitHub.com.", false); len(c) != 1 || c[0].Name != "github" {
		t.Errorf("ForHost(github.com), not granted: %+v", c)
	}
	// A granted call's connection also gets the grantedOnly credential.
	if c := p.Network.ForHost("github.com", true); len(c) != 2 || c[0].Name != "github" || c[1].Name != "deploy" {
		t.Errorf("ForHost(github.com), granted: %+v", c)
	}
	if c := p.Network.ForHost("evil.github.com", true); len(c) != 0 {
		t.Errorf("ForHost(evil.github.com): %+v", c)
	}
	// Shown, a credential names its secrets.
	b, _ := json.Marshal(got[0])
	if !strings.Contains(string(b), `"value":"Bearer ${secret:github-token}"`) {
		t.Errorf("json: %s", b)
	}
}

func TestCredentialErrors(t *testing.T) {
	entry := func(fields string) string {
		return "env: {FOO: bar}\nsandbox:\n  network:\n    credentials:\n      - " + fields + "\n"
	}
	const ok = `name: a, hosts: [h.example], value: "${secret:s}"`
	cases := []struct{ src, want string }{
		{entry(`{hosts: [h.example], header: X-Key, value: "${secret:s}"}`), "acme.yaml:5: sandbox.network.credentials[0].name: required"},
		{entry(`{name: "A B", hosts: [h.example], header: X-Key, value: "${secret:s}"}`), `credentials[0].name: "A B": lower-case`},
		{entry(`{name: a, header: X-Key, value: "${secret:s}"}`), "credentials[0].hosts: required"},
		{entry(`{name: a, hosts: ["*.github.com"], header: X-Key, value: "${secret:s}"}`), "credentials[0].hosts[0]: \"*.github.com\": a credential names its hosts exactly"},
		{entry(`{name: a, hosts: ["github.com:443"], header: X-Key, value: "${secret:s}"}`), "credentials[0].hosts[0]: \"github.com:443\": a host name without a port"},
		{entry(`{name: a, hosts: ["10.0.0.1"], header: X-Key, value: "${secret:s}"}`), "credentials[0].hosts[0]: \"10.0.0.1\": a host name, not an address"},
		{entry(`{name: a, hosts: ["bad_host"], header: X-Key, value: "${secret:s}"}`), `credentials[0].hosts[0]: "bad_host" is not a host name`},
		{entry(`{name: a, hosts: [h.example], header: "X Key", value: "${secret:s}"}`), `credentials[0].header: "X Key" is not a header name`},
		{entry(`{name: a, hosts: [h.example], header: host, value: "${secret:s}"}`), `credentials[0].header: "host" frames or routes the request`},
		{entry(`{name: a, hosts: [h.example], header: Proxy-Authorization, value: "${secret:s}"}`), `frames or routes the request`},
		{entry(`{name: a, hosts: [h.example], header: X-Key}`), "credentials[0].value: required"},
		{entry(`{name: a, hosts: [h.example], header: X-Key, value: "Bearer ${env:HOME}"}`), "credentials[0].value: \"Bearer ${env:HOME}\": ${env:HOME}: the only reference is ${secret:NAME}"},
		{entry(`{name: a, hosts: [h.example], header: X-Key, value: "constant"}`), "credentials[0].value: \"constant\" references no secret"},
		{entry("{" + ok + "}"), "credentials[0].header: a credential needs a header to set, a placeholder to replace, or both"},
		{entry("{" + ok + `, placeholder: 1X}`), `credentials[0].placeholder: "1X" is not a variable name`},
		{entry("{" + ok + `, placeholder: DSH_TOKEN}`), `credentials[0].placeholder: "DSH_TOKEN": DSH_* and SHELLBOX_*`},
		{entry("{" + ok + `, placeholder: https_proxy}`), `credentials[0].placeholder: "https_proxy" is set by the egress proxy`},
		{entry("{" + ok + `, placeholder: SSL_CERT_FILE}`), `credentials[0].placeholder: "SSL_CERT_FILE" is set by the egress proxy`},
		{entry("{" + ok + `, placeholder: FOO}`), `credentials[0].placeholder: "FOO" is also set in env`},
		{entry("{"+ok+`, placeholder: T}`) + "      - {" + ok + `, placeholder: U}`, `acme.yaml:6: sandbox.network.credentials[1].name: "a": another credential has this name`},
		{entry(`{name: a, hosts: [h.example], value: "${secret:s}", placeholder: T}`) + "      - {name: b, hosts: [h.example], value: \"${secret:s}\", placeholder: T}", `credentials[1].placeholder: "T": another credential's placeholder`},
		{entry(`{name: a, hosts: [h.example], header: X-Key, value: "${secret:s}"}`) + "      - {name: b, hosts: [h.example], header: x-key, value: \"${secret:t}\"}", `credentials[1].header: X-Key is already set for h.example by credential "a"`},
	}
	for _, c := range cases {
		_, err := Parse("/p/acme.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n  %v\nwant %s", c.src, err, c.want)
		}
	}
	var many strings.Builder
	many.WriteString("sandbox:\n  network:\n    credentials:\n")
	for i := range maxCredentials + 1 {
		fmt.Fprintf(&many, "      - {name: c%d, hosts: [h.example], value: \"${secret:s}\", placeholder: T%d}\n", i, i)
	}
	if _, err := Parse("/p/acme.yaml", []byte(many.String())); err == nil || !strings.Contains(err.Error(), "sandbox.network.credentials: 65 credentials: at most 64") {
		t.Errorf("too many: %v", err)
	}
}

// TestAuditEgress: a relayed request is one audit line naming host,
// method, path, status, bytes and credentials; a refused one is a deny
// with the relay's reason; long fields are clipped.
func TestAuditEgress(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := OpenAudit(path, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	e := openEngine(t, dir, Options{NoWatch: true, Audit: a})
	req := EgressRequest{Host: "api.github.com", Method: "POST", Path: "/repos/acme/x/pulls", Status: 201, BytesOut: 120, BytesIn: 512, DurationMs: 3.5, Credentials: []string{"github"}}
	if err := e.AuditEgress("acme", "s1", req, ""); err != nil {
		t.Fatal(err)
	}
	long := req
	long.Path = "/" + strings.Repeat("p", 10000)
	if err := e.AuditEgress("acme", "s1", long, "shellbox egress: a request for evil.example on a connection to api.github.com"); err != nil {
		t.Fatal(err)
	}
	recs, _, err := ReadAudit(path, 10, "acme")
	if err != nil || len(recs) != 2 {
		t.Fatalf("%+v %v", recs, err)
	}
	r := recs[0]
	if r.Tool != ToolEgress || r.Decision != Allow || r.Command != "POST api.github.com/repos/acme/x/pulls" || r.Egress == nil || *r.Egress.clone() != *req.clone() {
		t.Errorf("allowed: %+v %+v", r, r.Egress)
	}
	r = recs[1]
	if r.Decision != Deny || !strings.Contains(r.Reason, "a request for evil.example") || len(r.Egress.Path) > maxAuditText+64 {
		t.Errorf("refused: %+v", r)
	}
}

// clone flattens e for comparison.
func (e *EgressRequest) clone() *struct {
	Host, Method, Path, Creds string
	Status                    int
	Out, In                   int64
} {
	return &struct {
		Host, Method, Path, Creds string
		Status                    int
		Out, In                   int64
	}{e.Host, e.Method, e.Path, strings.Join(e.Credentials, ","), e.Status, e.BytesOut, e.BytesIn}
}
