package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/internal/cmdmatch"
)

// TestExecGuardInSandbox: the agent as PID 1 of a hardened container
// (runc, then gVisor) refuses at exec what a call's exec rules deny,
// whatever ran it, and says so in the output; the rest runs.
func TestExecGuardInSandbox(t *testing.T) {
	cli := engine(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			if rt == "runsc" {
				requireRuntime(t, cli, rt)
			}
			sb := newSandbox(t, cli, rt, 256<<20, 256)
			c := sb.dial(30 * time.Second)
			req := executor.Request{Session: "s", Shell: executor.Bash, Timeout: 30 * time.Second,
				Command:   "touch victim; r=rm; $r victim; cp /bin/rm ./del; ./del victim; printf 'rm victim\\n' > s.sh; sh s.sh; printf '#!/bin/sh\\nrm -f victim\\n' > s2; chmod +x s2; ./s2; cp /bin/rm ./x; chmod 111 ./x; ./x victim; cp $(ls /lib64/ld-linux-x86-64.so.2 /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 2>/dev/null | head -1) ./l; ./l /bin/rm victim; echo after; test -e victim && echo survived",
				ExecRules: &cmdmatch.Set{Policy: "acme", Rules: []cmdmatch.Spec{{Rule: "no-rm", Decision: cmdmatch.Deny, Command: []string{"rm"}}}}}
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			res, err := c.Run(ctx, spec(req))
			if err != nil {
				t.Fatalf("run: %v\n%s", err, sb.logs())
			}
			if !strings.Contains(res.Stdout, "survived") || strings.Count(res.Stderr, "refused by policy acme/no-rm") < 4 || !strings.Contains(res.Stderr, "refused by policy acme/exec-check") {
				t.Errorf("stdout %q\nstderr %q\nagent log:\n%s", res.Stdout, res.Stderr, sb.logs())
			}
		})
	}
}
