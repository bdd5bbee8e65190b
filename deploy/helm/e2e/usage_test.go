package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
	"github.com/shellbox/shellbox/usage"
)

// usageValues are the values TestChart installs for usage: the kubelet's
// summary readable (the ClusterRole the chart grants only when asked) and a
// sampling interval short enough for a test.
var usageValues = map[string]any{
	"usage":  map[string]any{"kubeletStats": true},
	"config": map[string]any{"usage": map[string]any{"interval": "2s"}},
}

// chartBurn spins the shell until its own CPU time, as the scheduler
// counts it (/proc/<pid>/schedstat), reaches 2 s.
const chartBurn = `while read ns rest < /proc/$$/schedstat && [ "$ns" -lt 2000000000 ]; do :; done; echo "burned $ns ns"`

// chartUsageRun is the usage case of TestChart, started with the test so
// that its session's pod, its calls and the kubelet's first readings of
// the pod overlap the cases before it: only the burn and one kubelet
// period after it are the case's own time.
type chartUsageRun struct {
	c       *client.Client
	ctx     context.Context
	allowed string // the origin the tenant's policy allows
	start   time.Time
	calls   int64 // the calls made, each one counted in /v1/usage
	prepped chan error
}

const chartUsageSession = "usage"

// startChartUsage begins the case: through the release's Service, a new
// session of a runc tenant spills 100,000 bytes in the foreground and
// 300,000 in a background task, read until it ends.
func startChartUsage(t *testing.T, c *client.Client, allowed string) *chartUsageRun {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	u := &chartUsageRun{c: c, ctx: ctx, allowed: allowed, start: time.Now(), prepped: make(chan error, 1)}
	go func() { u.prepped <- u.prepare() }()
	return u
}

func (u *chartUsageRun) call(tool string, args json.RawMessage) (tools.Result, error) {
	u.calls++
	res, err := u.c.Call(u.ctx, chartUsageSession, tool, args)
	if err == nil && res.IsError {
		err = errors.New(res.Text)
	}
	if err != nil {
		return res, fmt.Errorf("%s %.60s: %w", tool, args, err)
	}
	return res, nil
}

func (u *chartUsageRun) prepare() error {
	if _, err := u.call(tools.ToolBash, bashArgs("head -c 100000 /dev/zero | tr '\\0' a", false)); err != nil {
		return err
	}
	res, err := u.call(tools.ToolBash, bashArgs("head -c 300000 /dev/zero | tr '\\0' b", true))
	if err != nil {
		return err
	}
	bg, ok := res.Value.(*tools.Background)
	if !ok {
		return fmt.Errorf("the background call did not start a task: %q", res.Text)
	}
	for {
		res, err := u.call(tools.ToolBashOutput, json.RawMessage(fmt.Sprintf(`{"task_id":%q}`, bg.TaskID)))
		if err != nil {
			return err
		}
		o, ok := res.Value.(*tools.TaskOutput)
		if !ok {
			return fmt.Errorf("bash_output: not a task's output: %q", res.Text)
		}
		if o.Status.State != executor.Running {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// check ends the case: the session fetches once from the allowlisted
// origin; once GET /v1/usage shows the spill exactly and a reading of the
// pod (its start, the agent's install included: 0.17 CPU-seconds), the
// session burns 2 CPU-seconds, and /v1/usage shows them within 5% (the
// fetch's few milliseconds may fall in them) at the kubelet's first
// reading after the burn, with every call made and 1 egress connection.
// The kubelet's accuracy itself is kube TestClusterUsageKnownBurn's.
func (u *chartUsageRun) check(t *testing.T) {
	if err := <-u.prepped; err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// until polls /v1/usage for the session until done holds.
	until := func(what string, done func(f usage.Record) bool) usage.Record {
		t.Helper()
		ctx, cancel := context.WithTimeout(u.ctx, 2*time.Minute)
		defer cancel()
		var last usage.Record
		for {
			rep, err := u.c.Usage(ctx, map[string][]string{"session": {chartUsageSession}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Sessions) == 1 {
				if last = rep.Sessions[0]; done(last) {
					return last
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("/v1/usage did not show %s in 2 minutes: %+v", what, last)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	// One fetch from the allowlisted origin, here, after TestChart's
	// egress cases counted that origin's requests.
	res, err := u.call(tools.ToolBash, bashArgs("curl -sS -m 30 -o /dev/null -w '%{http_code}' http://"+u.allowed+"/usage", false))
	if err != nil || res.Text != "200" {
		t.Fatalf("curl: %v %q", err, res.Text)
	}
	before := until("a reading and the spill", func(f usage.Record) bool { return f.CPUSeconds > 0 && f.SpillBytes >= 400_000 })
	settled := time.Now()
	res, err = u.call(tools.ToolBash, bashArgs(chartBurn, false))
	if err != nil || !strings.HasPrefix(res.Text, "burned ") {
		t.Fatalf("burn: %v %q", err, res.Text)
	}
	after := until("the burn", func(f usage.Record) bool { return f.CPUSeconds-before.CPUSeconds >= 2 })
	burned := after.CPUSeconds - before.CPUSeconds
	t.Logf("/v1/usage through the release: %.3f CPU-seconds before the burn (%v after the session's first call, %v of this case), %.3f counted for 2 burned (%v after the burn began); spill %d bytes, %d calls, %d egress connections (%d bytes in); this case took %v",
		before.CPUSeconds, settled.Sub(u.start).Round(100*time.Millisecond), settled.Sub(began).Round(100*time.Millisecond), burned, time.Since(settled).Round(100*time.Millisecond),
		after.SpillBytes, after.Calls, after.EgressRequests, after.EgressReceivedBytes, time.Since(began).Round(100*time.Millisecond))
	if burned > 2.1 || after.SpillBytes != 400_000 || after.Calls != u.calls || after.EgressRequests != 1 {
		t.Errorf("/v1/usage: %.3f CPU-seconds burned, spill %d, %d calls, %d egress connections: want 2 within 5%%, 400000, %d and 1",
			burned, after.SpillBytes, after.Calls, after.EgressRequests, u.calls)
	}
}
