package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
)

// egressHost serves "egress ok <path>" on a loopback address of the host
// that sandboxes cannot reach but through their egress relay.
func egressHost(t *testing.T, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "egress ok %s", r.URL.Path)
	})}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return l.Addr().String()
}

func egressPolicy(allow ...string) string {
	return fmt.Sprintf(`default: allow
sandbox:
  images: [%s]
  runtime: runc
  network:
    allow: [%s]
`, dockertest.Image, strings.Join(allow, ", "))
}

// TestServeEgress: a tenant whose policy allows a host:port reaches it from
// its sandbox through serve's relay (curl, following HTTP_PROXY), and
// nothing else; an edit of the policy applies to the next connection of the
// same sandbox, without a restart; a call granted the network permission
// (ask, approved) still cannot reach the server host's loopback; the
// connections are counted in /metrics. The one-shot `shellbox call` relays
// too.
func TestServeEgress(t *testing.T) { enginetest.Each(t, serveEgress) }

func serveEgress(t *testing.T, eng enginetest.Engine) {
	requireEngine(t)
	bin := buildBinaries(t)
	allowed := egressHost(t, "127.0.0.2:0")
	other := egressHost(t, "127.0.0.3:0")
	pols := t.TempDir()
	polFile := filepath.Join(pols, dockerTenant+".yaml")
	if err := os.WriteFile(polFile, []byte(egressPolicy(allowed)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(eng.Config(t)+fmt.Sprintf(`tenant: %s
policies:
  dir: %s
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
`, dockerTenant, pols, dockertest.StateDir(t), dockertest.Owner(t), dockertest.Image, dockertest.LabelTest, dockerTenant, server.HashToken(testToken))), 0o644)
	removeSandboxesAtEnd(t, cfg, dockerTenant, "net", "oneshot")

	// One-shot: the call's own process relays.
	curl := func(target string) string {
		return fmt.Sprintf(`{"command":"curl -sS -m 30 http://%s/x 2>&1","description":"fetch over egress"}`, target)
	}
	if out, errs, code := runBinary(t, bin, cfg, "call", "--session", "oneshot", "bash", curl(allowed)); out != "egress ok /x" || code != 0 {
		t.Fatalf("one-shot call: %q %q (exit %d)", out, errs, code)
	}

	p := startServeProcess(t, bin, cfg)
	c := client.New(p.url, testToken, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	call := func(command string) string {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"command": command, "description": "egress test"})
		r, err := c.Call(ctx, "net", "bash", args)
		if err != nil || r.IsError {
			t.Fatalf("%s: %v %q", command, err, r.Text)
		}
		return r.Text
	}
	if got := call("curl -sS -m 30 http://" + allowed + "/served"); got != "egress ok /served" {
		t.Fatalf("allowed: %q", got)
	}
	deny := call("curl -sS -m 30 -D - -o /dev/null http://" + other + "/")
	if !strings.HasPrefix(deny, "HTTP/1.1 403 Forbidden") ||
		!strings.Contains(deny, "Shellbox-Error: shellbox: egress to "+other+" is not allowed by policy "+dockerTenant+" (sandbox.network.allow: "+allowed+")") {
		t.Fatalf("off the list: %q", deny)
	}

	// The policy now allows the other host only: the same sandbox's next
	// connections follow it.
	if err := os.WriteFile(polFile, []byte(egressPolicy(other)), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got := call("curl -sS -m 30 http://" + other + "/reloaded 2>&1")
		if got == "egress ok /reloaded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the policy edit: %q", got)
		}
	}
	if got := call("curl -sS -m 30 -o /dev/null -w '%{http_code}' http://" + allowed + "/"); got != "403" {
		t.Errorf("the formerly allowed host after the edit: %q", got)
	}

	// A call may ask for the network (escalations.default: ask): approved,
	// that call may go beyond the list, but never to the server host's own
	// ranges (egress.grantBlocked, by default loopback, link-local and
	// private networks): the 403 names the range.
	answered := make(chan string, 1)
	go func() {
		args, _ := json.Marshal(map[string]any{"command": "curl -sS -m 30 -D - -o /dev/null http://" + allowed + "/approved 2>&1", "description": "fetch with approval",
			"sandbox_permissions": []string{"network"}, "justification": "the build needs it"})
		r, err := c.Call(ctx, "net", "bash", args)
		if err != nil {
			r.Text = err.Error()
		}
		answered <- r.Text
	}()
	var pending approval.Approval
	for deadline := time.Now().Add(30 * time.Second); pending.ID == ""; time.Sleep(50 * time.Millisecond) {
		list, err := c.Approvals(ctx, "pending")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 {
			pending = list[0]
		} else if time.Now().After(deadline) {
			t.Fatal("the network escalation never became a pending approval")
		}
	}
	if len(pending.Permissions) != 1 || pending.Permissions[0] != "network" || pending.Justification != "the build needs it" {
		t.Errorf("pending approval %+v", pending)
	}
	if _, err := c.Decide(ctx, pending.ID, true, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	host, _, _ := strings.Cut(allowed, ":")
	if got := <-answered; !strings.HasPrefix(got, "HTTP/1.1 403 Forbidden") ||
		!strings.Contains(got, "is not allowed: address "+host+" is in 127.0.0.0/8, a range shellbox never relays to (the server host's loopback)") {
		t.Errorf("approved network call to the host's loopback: %q", got)
	}

	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`shellbox_egress_connections_total{outcome="allowed",tenant="` + dockerTenant + `"} 2`,
		`shellbox_egress_connections_total{outcome="denied",tenant="` + dockerTenant + `"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	p.stop(t)
}
