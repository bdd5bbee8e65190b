package main

import (
	"strings"
	"testing"

	"github.com/shellbox/shellbox/approval"
)

// TestShowApproval: `approvals show` prints the whole command, byte for
// byte where it is printable, and shows what would disguise it (escape
// sequences, bidi overrides) as escapes; `ls` only summarises.
func TestShowApproval(t *testing.T) {
	cmd := "git push #" + strings.Repeat("<", approval.MaxCommand-len("git push #\x1b[2J\u202e"))
	cmd += "\x1b[2J\u202e"
	out := showApproval(approval.Approval{ID: "ap_1", State: approval.Pending, Tenant: "acme", Session: "s1",
		Tool: "bash", Command: cmd, Rule: "push", Reason: "pushing needs approval", Permissions: []string{"network"},
		Background: true})
	want := "command (16384 bytes, whole):\n" + strings.TrimSuffix(cmd, "\x1b[2J\u202e") + `\x1b[2J\u202e` + "\n"
	if !strings.HasSuffix(out, want) {
		t.Errorf("show ends %q", out[max(0, len(out)-80):])
	}
	for _, s := range []string{"permissions:   network\n",
		"runs:          in the background: no timeout ends it; the permissions granted last until the task ends\n", "rule:          push: pushing needs approval\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("show lacks %q:\n%.300s", s, out)
		}
	}
	fg := showApproval(approval.Approval{Command: "git push", TimeoutMs: 20000})
	if !strings.Contains(fg, "runs:          in the foreground, timeout 20s\n") {
		t.Errorf("a foreground call shows:\n%s", fg)
	}
}
