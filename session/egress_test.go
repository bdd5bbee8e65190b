package session

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/sandbox/egress"
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
	asked := map[string]bool{}
	ic := &egress.Intercept{Host: "api.github.com"}
	decide := egressDecision(ec,
		func(target string) error {
			if target == "evil.example:443" {
				return errors.New("off the list")
			}
			return nil
		},
		func(cred string) (context.Context, bool) { return context.Background(), cred == "tok" },
		func(target string) *egress.Intercept {
			asked[target] = true
			if target == "api.github.com:443" {
				return ic
			}
			return nil
		})
	if d, err := decide(egress.Conn{Target: "api.github.com:443"}); err != nil || d.Intercept != ic || d.Addr == nil {
		t.Errorf("credential host: %+v %v", d, err)
	}
	if d, err := decide(egress.Conn{Target: "api.github.com:443", Credential: "tok"}); err != nil || d.Intercept != ic || d.Until == nil {
		t.Errorf("credential host, granted: %+v %v", d, err)
	}
	if d, err := decide(egress.Conn{Target: "pypi.org:443"}); err != nil || d.Intercept != nil {
		t.Errorf("other host: %+v %v", d, err)
	}
	if _, err := decide(egress.Conn{Target: "evil.example:443"}); err == nil || asked["evil.example:443"] {
		t.Errorf("refused: %v, hook asked %v", err, asked)
	}
}
