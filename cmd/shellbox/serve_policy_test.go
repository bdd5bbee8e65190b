package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
)

const servePolicy = `version: 1
default: allow
unparseable: ask
askTimeout: 1m
tools:
  bash: true
  background: true
rules:
  - name: no-delete
    decision: deny
    reason: deleting files is not allowed
    match:
      command: [rm]
  - name: deploy
    decision: ask
    reason: deploys need a human
    match:
      prefix: ["echo deploy"]
`

// TestServePolicies: with policies.dir set, serve decides every call by the
// tenant's policy: a deny renders as the model-facing error, an ask is held
// until an approver decides through the API (the approval is the tenant's
// alone), and every decision lands in the audit log.
func TestServePolicies(t *testing.T) {
	isolateLocal(t)
	dir := t.TempDir()
	for _, tenant := range []string{"acme", "beta"} {
		if err := os.WriteFile(filepath.Join(dir, tenant+".yaml"), []byte(servePolicy), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	audit := filepath.Join(t.TempDir(), "audit.log")
	f := filepath.Join(t.TempDir(), "shellbox.yaml")
	cfg := fmt.Sprintf("policies:\n  dir: %s\naudit:\n  file: %s\nserver:\n  tenants:\n    acme:\n      tokens: [%q]\n    beta:\n      tokens: [%q]\n",
		dir, audit, server.HashToken("acme-token"), server.HashToken("beta-token"))
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, f)
	acme := client.New(s.url, "acme-token", nil)
	beta := client.New(s.url, "beta-token", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bash := func(c *client.Client, command string) string {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"command": command, "description": "policy test"})
		res, err := c.Call(ctx, "s1", "bash", args)
		if err != nil {
			t.Fatalf("call %q: %v", command, err)
		}
		return res.Text
	}

	if got := bash(acme, "echo fine"); got != "fine" {
		t.Errorf("allowed call: %q", got)
	}
	if got := bash(acme, "ls && rm -rf x"); got != "Error: denied by policy acme/no-delete: deleting files is not allowed" {
		t.Errorf("denied call: %q", got)
	}

	// An ask waits for a decision.
	answered := make(chan string, 1)
	go func() { answered <- bash(acme, "echo deploy prod") }()
	var pending approval.Approval
	for deadline := time.Now().Add(30 * time.Second); pending.ID == ""; {
		list, err := acme.Approvals(ctx, "pending")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 {
			pending = list[0]
		} else if time.Now().After(deadline) {
			t.Fatal("the ask never appeared as a pending approval")
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if pending.Rule != "deploy" || pending.Command != "echo deploy prod" || pending.Tenant != "acme" {
		t.Errorf("pending approval %+v", pending)
	}
	// Another tenant neither sees nor decides it: the answer of a random id.
	if list, err := beta.Approvals(ctx, ""); err != nil || len(list) != 0 {
		t.Errorf("beta lists %+v, %v", list, err)
	}
	_, errForeign := beta.Decide(ctx, pending.ID, true, "mallory", "")
	_, errRandom := beta.Decide(ctx, "ap_doesnotexist", true, "mallory", "")
	var ef, er *client.Error
	if !errors.As(errForeign, &ef) || !errors.As(errRandom, &er) || ef.Status != 404 ||
		strings.Replace(ef.Message, pending.ID, "ID", 1) != strings.Replace(er.Message, "ap_doesnotexist", "ID", 1) {
		t.Errorf("foreign decide: %v; random: %v", errForeign, errRandom)
	}
	if _, err := acme.Decide(ctx, pending.ID, true, "alice", "ship it"); err != nil {
		t.Fatalf("approve: %v", err)
	}
	select {
	case got := <-answered:
		if got != "deploy prod" {
			t.Errorf("approved call: %q", got)
		}
	case <-ctx.Done():
		t.Fatal("the approved call never returned")
	}

	s.stop()
	recs, _, err := policies.ReadAudit(audit, 100, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var decisions []string
	for _, r := range recs {
		decisions = append(decisions, string(r.Decision)+":"+r.Rule)
	}
	got := strings.Join(decisions, " ")
	for _, want := range []string{"deny:no-delete", "ask:deploy"} {
		if !strings.Contains(got, want) {
			t.Errorf("audit %q lacks %q", got, want)
		}
	}
}
