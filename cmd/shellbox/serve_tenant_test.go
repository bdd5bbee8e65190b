package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

// TestCrossTenantDocker: on serve's own docker backend, tenant beta cannot
// list, read, kill or delete acme's session and task, and gets exactly the
// answers a random id gets; acme's task is untouched.
func TestCrossTenantDocker(t *testing.T) {
	_, s := testServe(t, "docker")
	ctx := context.Background()
	acme := client.New(s.URL, servertest.TokenAcme, nil)
	beta := client.New(s.URL, servertest.TokenBeta, nil)
	if _, err := acme.CreateSession(ctx, "secret", server.SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := acme.Call(ctx, "secret", "bash", json.RawMessage(`{"command":"sleep 60","description":"long task","run_in_background":true}`))
	if err != nil || r.IsError {
		t.Fatalf("start: %v %q", err, r.Text)
	}
	id := r.Value.(*tools.Background).TaskID

	if list, err := beta.Sessions(ctx); err != nil || len(list) != 0 {
		t.Fatalf("beta lists: %v %+v", err, list)
	}
	same := func(what string, foreign, random func() string) {
		t.Helper()
		f := strings.ReplaceAll(strings.ReplaceAll(foreign(), id, "<id>"), "secret", "<s>")
		g := strings.ReplaceAll(strings.ReplaceAll(random(), "rnd-task", "<id>"), "rnd-sess", "<s>")
		if f != g {
			t.Errorf("%s: foreign %q, random %q", what, f, g)
		}
	}
	callText := func(c *client.Client, session, tool, args string) func() string {
		return func() string {
			r, err := c.Call(ctx, session, tool, json.RawMessage(args))
			if err != nil {
				return "error: " + err.Error()
			}
			return r.Text
		}
	}
	errText := func(err error) string {
		var ce *client.Error
		if errors.As(err, &ce) {
			return fmt.Sprintf("%d %s %s", ce.Status, ce.Code, ce.Message)
		}
		return fmt.Sprint(err)
	}
	same("get", func() string { _, err := beta.Session(ctx, "secret"); return errText(err) },
		func() string { _, err := beta.Session(ctx, "rnd-sess"); return errText(err) })
	same("delete", func() string { return errText(beta.DeleteSession(ctx, "secret")) },
		func() string { return errText(beta.DeleteSession(ctx, "rnd-sess")) })
	same("bash_output", callText(beta, "secret", "bash_output", fmt.Sprintf(`{"task_id":%q}`, id)),
		callText(beta, "rnd-sess", "bash_output", `{"task_id":"rnd-task"}`))
	same("bash_kill", callText(beta, "secret", "bash_kill", fmt.Sprintf(`{"task_id":%q}`, id)),
		callText(beta, "rnd-sess", "bash_kill", `{"task_id":"rnd-task"}`))
	if got := callText(beta, "secret", "bash_output", fmt.Sprintf(`{"task_id":%q}`, id))(); got != "Error: no such task: "+id {
		t.Errorf("beta reads acme's task: %q", got)
	}
	if got := callText(acme, "secret", "bash_output", fmt.Sprintf(`{"task_id":%q}`, id))(); got != "status: running" {
		t.Errorf("acme's task after beta's attempts: %q", got)
	}
	if err := acme.DeleteSession(ctx, "secret"); err != nil {
		t.Fatal(err)
	}
}
