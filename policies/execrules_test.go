package policies

import (
	"slices"
	"testing"
)

// TestExecRules: what the exec check gets for a call: the rules that deny
// or ask and match by argv alone, whose call-level matchers hold; in an
// approved call, not the ask rules the approver was shown.
func TestExecRules(t *testing.T) {
	p, err := Parse("acme.yaml", []byte(`default: allow
rules:
  - name: no-rm
    decision: deny
    reason: files stay
    match:
      command: [rm]
  - name: ask-push
    decision: ask
    match:
      prefix: ["git push"]
  - name: ask-curl
    decision: ask
    match:
      command: [curl]
  - name: allow-ls
    decision: allow
    match:
      command: [ls]
  - name: deny-redirect
    decision: deny
    match:
      command: [tee]
      redirect: ["/etc/*"]
  - name: deny-pwsh-only
    decision: deny
    match:
      command: [Remove-Item]
      tool: [pwsh]
  - name: deny-text
    decision: deny
    match:
      text: "secret"
`))
	if err != nil {
		t.Fatal(err)
	}
	names := func(c call, approved bool) []string {
		set := p.execRules(c, approved)
		if set == nil {
			return nil
		}
		if set.Policy != "acme" {
			t.Errorf("policy %q", set.Policy)
		}
		var out []string
		for _, r := range set.Rules {
			out = append(out, r.Rule)
		}
		return out
	}
	if got, want := names(call{tool: "bash", command: "ls"}, false), []string{"no-rm", "ask-push", "ask-curl"}; !slices.Equal(got, want) {
		t.Errorf("allowed call: got %q, want %q", got, want)
	}
	if got, want := names(call{tool: "bash", command: "git push origin main"}, true), []string{"no-rm", "ask-curl"}; !slices.Equal(got, want) {
		t.Errorf("approved git push: got %q, want %q", got, want)
	}
	if got, want := names(call{tool: "pwsh", command: "Get-ChildItem"}, false), []string{"no-rm", "ask-push", "ask-curl", "deny-pwsh-only"}; !slices.Equal(got, want) {
		t.Errorf("pwsh call: got %q, want %q", got, want)
	}
	if r := p.execRules(call{tool: "bash", command: "ls"}, false).Rules[0]; r.Reason != "files stay" || r.Decision != "deny" || r.Command[0] != "rm" {
		t.Errorf("the spec as written: %+v", r)
	}
	q, err := Parse("b.yaml", []byte("default: allow\nrules:\n  - name: ok\n    decision: allow\n    match:\n      command: [ls]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if set := q.execRules(call{tool: "bash", command: "ls"}, false); set != nil {
		t.Errorf("no refusing rule, yet %+v", set)
	}
}
