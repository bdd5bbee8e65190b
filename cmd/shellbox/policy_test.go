package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicyCheck(t *testing.T) {
	isolate(t)
	examples := filepath.Join(pkgDir(t), "..", "..", "policies", "examples")
	out, errs, code := cli(t, "", "policy", "check", examples)
	if code != 0 || out != "ok: 4 policies (ci-agent, default, mirror, pwsh-agent)\n" {
		t.Fatalf("examples: %q %q exit %d", out, errs, code)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte("default: allow\nrules:\n  - name: x\n    decision: deny\n    match: {argsRegex: ['(']}\n"), 0o644)
	out, _, code = cli(t, "", "policy", "check", dir)
	want := filepath.Join(dir, "acme.yaml") + ":5: rules[0].match.argsRegex[0]: bad regular expression: error parsing regexp: missing closing ): `(`\n"
	if code != 1 || out != want {
		t.Fatalf("got %q (exit %d), want %q", out, code, want)
	}
	empty := t.TempDir()
	if out, _, code = cli(t, "", "policy", "check", empty); code != 1 || out != empty+": no policy files (<tenant>.yaml)\n" {
		t.Errorf("empty dir: %q (exit %d)", out, code)
	}
	if _, errs, code := cli(t, "", "policy", "check", filepath.Join(empty, "missing")); code != 2 || !strings.Contains(errs, "no such file or directory") {
		t.Errorf("missing dir: %q (exit %d)", errs, code)
	}
}

var testDir string

func pkgDir(t *testing.T) string {
	t.Helper()
	if testDir == "" {
		t.Fatal("package dir unknown")
	}
	return testDir
}

func init() {
	testDir, _ = os.Getwd()
}

func TestPolicyExplain(t *testing.T) {
	isolate(t)
	examples := filepath.Join(pkgDir(t), "..", "..", "policies", "examples")
	cases := []struct {
		args  []string
		first string
		more  string
	}{
		{[]string{"--tenant", "ci-agent", "ls | xargs rm -f"}, "deny", "rule: no-delete\ncommand: rm -f (via xargs)\n"},
		{[]string{"--tenant", "ci-agent", "git push origin main"}, "ask", "rule: push-needs-approval\ncommand: git push origin main\n"},
		{[]string{"--tenant", "ci-agent", "$(echo rm) x"}, "ask", "rule: dynamic\n"},
		{[]string{"--tenant", "ci-agent", "go test ./..."}, "allow", "rule: default\n"},
		{[]string{"--tenant", "nobody", "python3 x.py"}, "deny", "rule: opaque\ncommand: python3 x.py\n"},
		{[]string{"--tenant", "ci-agent", "--tool", "pwsh", "Get-ChildItem"}, "deny", "rule: tools\n"},
		{[]string{"--tenant", "ci-agent", "pwsh -c 'Remove-Item -Recurse /'"}, "deny", "rule: no-delete\ncommand: Remove-Item -Recurse / (via pwsh -c)\n"},
		{[]string{"--tenant", "pwsh-agent", "--tool", "pwsh", "gci | % { ri $_ }"}, "deny", "rule: no-delete\ncommand: ri $_ (alias of Remove-Item)\n"},
		{[]string{"--tenant", "pwsh-agent", "--tool", "pwsh", "iex 'Remove-Item x'"}, "deny", "rule: no-delete\ncommand: Remove-Item x (via Invoke-Expression)\n"},
		{[]string{"--tenant", "pwsh-agent", "--tool", "pwsh", "iex $cmd"}, "ask", "rule: dynamic\ncommand: iex $cmd (alias of Invoke-Expression)\nreason: Invoke-Expression runs a string that is not a literal: a static policy cannot tell what runs\n"},
		{[]string{"--tenant", "pwsh-agent", "--tool", "pwsh", "Get-ChildItem | Select-String TODO"}, "allow", "rule: default\n"},
		{[]string{"--tenant", "mirror", "--egress", "PYPI-mirror.internal:443"}, "allow", "rule: sandbox.network.allow\nreason: sandbox.network.allow lists it\n"},
		{[]string{"--tenant", "mirror", "--egress", "pypi.org:443"}, "deny", "reason: shellbox: egress to pypi.org:443 is not allowed by policy mirror (sandbox.network.allow: pypi-mirror.internal:443, npm-mirror.internal:443); a call may ask for more"},
	}
	for _, c := range cases {
		args := append([]string{"policy", "explain", "--policies", examples}, c.args...)
		out, errs, code := cli(t, "", args...)
		if code != 0 || !strings.HasPrefix(out, c.first+"\n") || !strings.Contains(out, c.more) {
			t.Errorf("%v: %q %q exit %d", c.args, out, errs, code)
		}
	}
}

// shellbox call enforces the tenant's policy: denials render as the
// contract says, an ask cannot be answered in a one-shot call, and every
// decision is audited.
func TestCallWithPolicies(t *testing.T) {
	root, _ := isolateLocal(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(`default: allow
tools: {background: false}
limits: {defaultTimeout: 300ms, maxTimeout: 400ms}
rules:
  - {name: no-rm, decision: deny, reason: deleting files is not allowed, match: {command: [rm]}}
  - {name: push, decision: ask, reason: pushing needs approval, match: {prefix: [git push]}}
`), 0o644)
	audit := filepath.Join(t.TempDir(), "audit.log")
	t.Setenv("SHELLBOX_AUDIT_FILE", audit)
	os.WriteFile(filepath.Join(root, "keep"), nil, 0o644)
	base := []string{"call", "--policies", dir, "--tenant", "acme", "bash"}
	cases := []struct {
		args string
		want string
		code int
	}{
		{`{"command":"echo hi","description":"say hi"}`, "hi\n", 0},
		{`{"command":"ls && \\rm keep","description":"remove a file"}`, "Error: denied by policy acme/no-rm: deleting files is not allowed\n", 1},
		{`{"command":"git push","description":"push"}`, "Error: denied by policy acme/push: approval required (no approver in a one-shot call): pushing needs approval\n", 1},
		{`{"command":"sleep 5","description":"wait","timeoutMs":100000}`, "(no output)\n[timed out after 400ms]\n[killed by signal: SIGTERM]\n", 0},
		{`{"command":"sleep 1","description":"wait","run_in_background":true}`, "Error: denied by policy acme/tools: background tasks are disabled for this tenant (tools.background: false)\n", 1},
	}
	for _, c := range cases {
		out, errs, code := cli(t, "", append(base, c.args)...)
		if out != c.want || code != c.code {
			t.Errorf("%s: got %q (exit %d, stderr %q), want %q (exit %d)", c.args, out, code, errs, c.want, c.code)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "keep")); err != nil {
		t.Error("the denied rm ran")
	}
	out, errs, code := cli(t, "", "audit", "tail", "--tenant", "acme", "-n", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[0], " acme/default bash deny push ") ||
		!strings.Contains(lines[2], " acme/default bash deny tools ") {
		t.Errorf("audit tail: %q %q exit %d", out, errs, code)
	}
	out, _, code = cli(t, "", "audit", "tail", "--file", audit, "--json", "-n", "1")
	if code != 0 || !strings.HasPrefix(out, `{"time":`) || !strings.Contains(out, `"rule":"tools"`) {
		t.Errorf("audit tail --json: %q exit %d", out, code)
	}

	// A tenant without a policy and no default.yaml: a configuration error.
	_, errs, code = cli(t, "", "call", "--policies", dir, "--tenant", "other", "bash", `{"command":"ls","description":"list"}`)
	if code != 2 || !strings.Contains(errs, "no policy for tenant other") {
		t.Errorf("no policy: %q exit %d", errs, code)
	}
}
