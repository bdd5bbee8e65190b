package e2e

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

func TestDebugClaim(t *testing.T) {
	c := kubetest.Connect(t)
	r := Install(t, c, Options{Tenants: []Tenant{{Name: "acme", Policy: poolPolicy(2)}}})
	rc := client.New(r.URL, r.Tokens["acme"], nil)
	b := &testing.B{}
	_ = b
	for i := 0; i < 3; i++ {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			out, _ := exec.Command("/var/cache/shellbox-ci/kubernetes-v1.37.2/kubectl", "--kubeconfig", "/etc/shellbox-kube/admin.kubeconfig", "-n", r.SessionsNamespace, "get", "pods", "-L", "org.shellbox.claimed-by").CombinedOutput()
			t.Logf("%s", out)
			if time.Now().After(deadline) || countReady(string(out)) >= 2 {
				break
			}
			time.Sleep(2 * time.Second)
		}
		t0 := time.Now()
		res, err := rc.Call(context.Background(), "dbg-"+string(rune('a'+i)), tools.ToolBash, bashArgs("true", false))
		t.Logf("call %d: %s %v %q", i, time.Since(t0), err, res.Text)
	}
	out, _ := exec.Command("/var/cache/shellbox-ci/kubernetes-v1.37.2/kubectl", "--kubeconfig", "/etc/shellbox-kube/admin.kubeconfig", "-n", r.Namespace, "logs", "-l", "app.kubernetes.io/component=server", "--tail", "400").CombinedOutput()
	t.Logf("%s", out)
}

func countReady(s string) int {
	n := 0
	for _, l := range splitLines(s) {
		if len(l) > 0 && contains(l, "1/1") && contains(l, "pool") && !contains(l, "dbg") {
			n++
		}
	}
	return n
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
