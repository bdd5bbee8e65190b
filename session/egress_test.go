package session

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/egress"
	"github.com/shellbox/shellbox/secrets"
)

// TestEgressDecision: with the default egress config, a granted call may
// reach public addresses only, an allowlisted name no address of the host's
// own ranges, and an allowlisted address exactly that address.
func TestEgressDecision(t *testing.T) {
	var ec EgressConfig
	if err := ec.compile(); err != nil {
		t.Fatal(err)
	}
	grant, end := context.WithCancel(context.Background())
	defer end()
	list, _ := confine.NewAllowlist([]string{"mirror.internal:443", "10.0.0.7:5432"})
	decide := egressDecision(ec,
		func(target string) error {
			if !list.Allows(target) {
				return errors.New("off the list")
			}
			return nil
		},
		func(cred string) (context.Context, bool) { return grant, cred == "tok" }, nil)
	refused := func(d egress.Decision, addr string) bool {
		return d.Addr != nil && d.Addr(netip.MustParseAddr(addr)) != nil
	}

	d, err := decide(egress.Conn{Target: "anywhere.example:443", Credential: "tok"})
	if err != nil || d.Until != grant {
		t.Fatalf("granted: %+v, %v", d, err)
	}
	for addr, want := range map[string]bool{"93.184.216.34": false, "127.0.0.1": true, "169.254.169.254": true, "10.1.2.3": true, "192.168.0.1": true, "fd00::1": true, "2606:4700::1": false} {
		if refused(d, addr) != want {
			t.Errorf("granted call to %s: refused %v, want %v", addr, !want, want)
		}
	}
	if _, err := decide(egress.Conn{Target: "anywhere.example:443", Credential: "forged"}); err == nil {
		t.Error("a forged credential is allowed")
	}
	d, err = decide(egress.Conn{Target: "mirror.internal:443"})
	if err != nil || d.Until != nil || !refused(d, "127.0.0.1") || !refused(d, "169.254.169.254") || refused(d, "10.1.2.3") {
		t.Errorf("allowlisted name: %+v, %v (loopback and link-local refused, private allowed)", d, err)
	}
	if d, err = decide(egress.Conn{Target: "10.0.0.7:5432"}); err != nil || d.Addr != nil {
		t.Errorf("allowlisted address: %+v, %v", d, err)
	}
}

// TestEgressDecisionIntercepts: an allowed connection, granted or by the
// list, is intercepted when the hook says so; a refused one never reaches
// the hook.
func TestEgressDecisionIntercepts(t *testing.T) {
	var ec EgressConfig
	if err := ec.compile(); err != nil {
		t.Fatal(err)
	}
	asked, grantedAsked := map[string]bool{}, map[string]bool{}
	ic := &egress.Intercept{Host: "api.github.com"}
	decide := egressDecision(ec,
		func(target string) error {
			if target == "evil.example:443" {
				return errors.New("off the list")
			}
			return nil
		},
		func(cred string) (context.Context, bool) { return context.Background(), cred == "tok" },
		func(target string, isGranted bool) (*egress.Intercept, error) {
			asked[target] = true
			grantedAsked[target] = isGranted
			switch target {
			case "api.github.com:443":
				return ic, nil
			case "ruled.example:443":
				return nil, errors.New("its rules cannot be read")
			}
			return nil, nil
		})
	if d, err := decide(egress.Conn{Target: "api.github.com:443"}); err != nil || d.Intercept != ic || d.Addr == nil {
		t.Errorf("credential host: %+v %v", d, err)
	}
	if grantedAsked["api.github.com:443"] {
		t.Error("the hook was told an ungranted connection is granted")
	}
	if d, err := decide(egress.Conn{Target: "api.github.com:443", Credential: "tok"}); err != nil || d.Intercept != ic || d.Until == nil || !grantedAsked["api.github.com:443"] {
		t.Errorf("credential host, granted: %+v %v (hook told granted: %v)", d, err, grantedAsked["api.github.com:443"])
	}
	if d, err := decide(egress.Conn{Target: "pypi.org:443"}); err != nil || d.Intercept != nil {
		t.Errorf("other host: %+v %v", d, err)
	}
	// A host whose requests must be judged but cannot be is refused, not
	// tunnelled blind, granted or not.
	for _, cred := range []string{"", "tok"} {
		if d, err := decide(egress.Conn{Target: "ruled.example:443", Credential: cred}); err == nil || err.Error() != "its rules cannot be read" {
			t.Errorf("rules unreadable (credential %q): %+v %v", cred, d, err)
		}
	}
	if _, err := decide(egress.Conn{Target: "evil.example:443"}); err == nil || asked["evil.example:443"] {
		t.Errorf("refused: %v, hook asked %v", err, asked)
	}
}

// TestInterceptHTTPRules: a host the policy gives HTTP rules is
// terminated and judged (no credential: no rewrite); without a CA to read
// its requests with, its connections are refused.
func TestInterceptHTTPRules(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(`default: allow
sandbox:
  network:
    allow: [api.example:443, other.example:443]
    http:
      - hosts: [api.example]
        rules: [allow GET /repos/**]
        default: deny
`), 0o644)
	e, err := policies.Open(dir, policies.Options{NoWatch: true, NoApprover: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sb := sandbox.Sandbox{Tenant: "acme", Session: "s1"}
	log := slog.New(slog.DiscardHandler)
	for _, withCA := range []bool{false, true} {
		cfg := Config{Local: LocalConfig{Root: t.TempDir(), SpillDir: filepath.Join(t.TempDir(), "spill"), Cgroup: "off"}, Policies: e}
		if withCA {
			cfg.Egress = EgressConfig{Secrets: secrets.NewStore("", func(string) (string, bool) { return "", false }), CAs: secrets.NewCAs(t.TempDir())}
		}
		l, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		ic, err := l.intercept(sb, "api.example:443", false, log)
		if !withCA {
			if ic != nil || err == nil || !strings.Contains(err.Error(), "policy acme judges its requests by HTTP rules (sandbox.network.http[0]), and this server has no egress CA") {
				t.Errorf("no CA: %+v %v", ic, err)
			}
			continue
		}
		if err != nil || ic == nil || ic.Rules == nil || ic.RulesName != "sandbox.network.http[0]" || ic.Rewrite != nil {
			t.Fatalf("with CA: %+v %v", ic, err)
		}
		if r := ic.Rules.Decide("POST", "/repos/x"); r.Allow || r.Name != "sandbox.network.http[0].default" {
			t.Errorf("POST: %+v", r)
		}
		if ic, err := l.intercept(sb, "other.example:443", false, log); ic != nil || err != nil {
			t.Errorf("a host without rules: %+v %v", ic, err)
		}
	}
}

// TestInterceptGrantedOnly: a grantedOnly credential is injected on the
// connections of a call granted the network permission only; another
// connection to its host is a blind tunnel (its placeholder goes as is).
func TestInterceptGrantedOnly(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(`default: allow
sandbox:
  network:
    allow: [deploy.example:443]
    credentials:
      - name: deploy
        hosts: [deploy.example]
        value: "${secret:deploy-key}"
        placeholder: DEPLOY_KEY
        grantedOnly: true
`), 0o644)
	e, err := policies.Open(dir, policies.Options{NoWatch: true, NoApprover: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cfg := Config{Local: LocalConfig{Root: t.TempDir(), SpillDir: filepath.Join(t.TempDir(), "spill"), Cgroup: "off"}, Policies: e,
		Egress: EgressConfig{Secrets: secrets.NewStore("", func(string) (string, bool) { return "s3cr3t", true }), CAs: secrets.NewCAs(t.TempDir())}}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	sb := sandbox.Sandbox{Tenant: "acme", Session: "s1"}
	log := slog.New(slog.DiscardHandler)
	if ic, err := l.intercept(sb, "deploy.example:443", false, log); ic != nil || err != nil {
		t.Errorf("not granted: %+v %v, want a blind tunnel", ic, err)
	}
	ic, err := l.intercept(sb, "deploy.example:443", true, log)
	if err != nil || ic == nil || ic.Rewrite == nil {
		t.Fatalf("granted: %+v %v, want the credential injected", ic, err)
	}
	h := http.Header{"Authorization": {"Bearer " + l.cfg.Egress.placeholders.For("acme", "s1", "deploy")}}
	if _, used, err := ic.Rewrite(h); err != nil || len(used) != 1 || h.Get("Authorization") != "Bearer s3cr3t" {
		t.Errorf("granted rewrite: %v %v %q", used, err, h.Get("Authorization"))
	}
}
