package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

// The conformance suite through a release: the suite makes one executor
// per limits profile (executortest.Profiles); here each profile is a
// tenant of the release whose policy sets those limits, and every call of
// the suite goes to the server through a transport with that tenant's
// token. The executor the suite holds is a stand-in: it answers only what
// the suite asks an executor directly (Has), the rest is the server's.

// SuiteTenants returns one tenant per limits profile, named
// <prefix>-<profile index>, whose policy allows every command and gives
// the profile's limits, sandboxes of runtime sized for the suite (its
// 100 MB spill, the three volumes being memory charged to the pod).
func SuiteTenants(prefix, runtime string) []Tenant {
	var ts []Tenant
	for i, lim := range executortest.Profiles() {
		ts = append(ts, Tenant{Name: fmt.Sprintf("%s-%d", prefix, i), Policy: fmt.Sprintf(`version: 1
description: the conformance suite's limits profile %d
default: allow
sandbox:
  runtime: %s
  memory: 1536MiB
  disk: 256MiB
  tmp: 64MiB
  pids: 1024
limits:
  defaultTimeout: %s
  maxTimeout: %s
  grace: %s
  tailBytes: %d
  bufferBytes: %d
  spillLimit: %d
  spillBytes: 256MiB
  sessions: 256
  backgroundTasks: 32
`, i, runtime, lim.DefaultTimeout, lim.MaxTimeout, lim.Grace, lim.TailBytes, lim.BufferBytes, lim.SpillLimit)})
	}
	return ts
}

// Transport makes a suite transport to url with a tenant's token:
// servertest.RemoteREST, or servertest.RemoteMCP at a revision.
type Transport func(t *testing.T, url, token string) func(context.Context, tools.Invocation) tools.Result

// Harness returns the conformance suite's harness over r's tenants made by
// SuiteTenants(prefix, ...): calls through transport, completion notices
// from each tenant's event stream, each session deleted (its pod with it)
// when its case ends.
func (r *Release) Harness(prefix string, transport Transport, skip map[string]string) executortest.Harness {
	var last *standIn
	profiles := executortest.Profiles()
	return executortest.Harness{
		New: func(t *testing.T, lim executor.Limits) executor.BashExecutor {
			for i, p := range profiles {
				if p == lim {
					name := fmt.Sprintf("%s-%d", prefix, i)
					tok, ok := r.Tokens[name]
					if !ok {
						t.Fatalf("release %s has no tenant %s (install it with SuiteTenants(%q, ...))", r.Name, name, prefix)
					}
					last = &standIn{token: tok, client: client.New(r.URL, tok, nil)}
					return last
				}
			}
			t.Fatalf("no tenant for limits %+v: not one of executortest.Profiles", lim)
			return nil
		},
		Root: executortest.FixedRoot("/workspace"),
		// The server's sandboxes have the session cwd as the home (HOME
		// and DSH_HOME), not the /home/sandbox that harnesses configuring
		// their own Toolset choose.
		Home: "/workspace",
		Transport: func(t *testing.T, _ *tools.Toolset) func(context.Context, tools.Invocation) tools.Result {
			return transport(t, r.URL, last.token)
		},
		// The server runs the tasks: their notices reach a caller on the
		// tenant's event stream.
		Notices: func(t *testing.T, e executor.BashExecutor, notify func(string, tools.Notice)) {
			servertest.RemoteNotices(t, r.URL, e.(*standIn).token, notify)
		},
		EndSession: func(e executor.BashExecutor, session string) {
			s := e.(*standIn)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// The case has ended; its pod goes now, not at the idle reap.
			if err := s.client.DeleteSession(ctx, session); err != nil && !strings.Contains(err.Error(), "404") {
				fmt.Printf("e2e: delete session %s: %v\n", session, err)
			}
		},
		Skip: skip,
	}
}

// standIn is the executor the suite holds for a profile whose executor is
// the server's.
type standIn struct {
	token  string
	client *client.Client
}

var errRemote = executor.Errorf(executor.ErrInvalid, "e2e: this executor runs in the server; calls go through the transport")

func (*standIn) Resolve(context.Context, executor.Request) (executor.Spec, error) {
	return executor.Spec{}, errRemote
}
func (*standIn) Run(context.Context, executor.Spec) (executor.Result, error) {
	return executor.Result{}, errRemote
}
func (*standIn) Start(context.Context, executor.Spec) (executor.Task, error) { return nil, errRemote }
func (*standIn) Task(context.Context, string, string) (executor.Task, error) {
	return nil, errRemote
}

// Has: the test image has no pwsh; the server offers it only where the
// session's image has it (the suite checks the refusal's text).
func (*standIn) Has(_ context.Context, _ string, shell executor.Shell) bool {
	return shell == executor.Bash
}
