package server

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
	"github.com/shellbox/shellbox/usage"
)

// usageRig is a rig whose server measures usage into a store the test
// fills, with an operator token.
func usageRig(t *testing.T) (*rig, *usage.Meter, time.Time) {
	t.Helper()
	store := &usage.Memory{}
	hour := time.Now().UTC().Truncate(time.Hour)
	err := store.Add(context.Background(), []usage.Bucket{
		{Tenant: "acme", Session: "s1", Hour: hour, Figures: usage.Figures{SandboxSeconds: 60, CPUSeconds: 2.5, MemoryGiBSeconds: 15, MemoryPeakBytes: 1 << 28}},
		{Tenant: "acme", Session: "s2", Hour: hour, Figures: usage.Figures{SandboxSeconds: 10, CPUSeconds: 0.5}, Final: true},
		{Tenant: "beta", Session: "s1", Hour: hour, Figures: usage.Figures{SandboxSeconds: 30, CPUSeconds: 7}},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := usage.NewMeter(store, nil)
	r := newRig(t, func(c *Config) {
		c.Usage = m
		c.Console.OperatorTokens = []string{HashToken(tokenOperator)}
	})
	return r, m, hour
}

func TestUsageJSON(t *testing.T) {
	r, _, hour := usageRig(t)
	// A call that runs is counted for its session.
	if code, m := r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, map[string]any{"command": "true", "description": "run true"}); code != 200 {
		t.Fatalf("call: %d %v", code, m)
	}
	code, b := r.do("GET", "/v1/usage", tokenAcme, "", nil)
	if code != 200 {
		t.Fatalf("GET /v1/usage: %d %s", code, b)
	}
	var rep UsageReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Sessions) != 2 || rep.Sessions[0].Session != "s1" || rep.Sessions[0].Tenant != "acme" || rep.Sessions[1].Session != "s2" {
		t.Fatalf("acme sees %+v, want its s1 and s2 only", rep.Sessions)
	}
	s1 := rep.Sessions[0]
	if s1.CPUSeconds != 2.5 || s1.MemoryPeakBytes != 1<<28 || s1.Calls != 1 || s1.CallSeconds <= 0 || !s1.From.Equal(hour) {
		t.Errorf("acme/s1 = %+v", s1)
	}
	if !rep.Sessions[1].Final {
		t.Errorf("acme/s2 not final: %+v", rep.Sessions[1])
	}
	if tot := rep.Tenants["acme"]; tot.CPUSeconds != 3 || tot.SandboxSeconds != 70 || len(rep.Tenants) != 1 {
		t.Errorf("tenants = %+v", rep.Tenants)
	}
	// One session; another tenant's is never seen.
	code, b = r.do("GET", "/v1/usage?session=s1", tokenBeta, "", nil)
	if code != 200 || !strings.Contains(string(b), `"tenant":"beta"`) || strings.Contains(string(b), `"acme"`) {
		t.Errorf("beta's s1: %d %s", code, b)
	}
	// An operator sees every tenant, or one.
	code, b = r.do("GET", "/v1/usage", tokenOperator, "", nil)
	if code != 200 || json.Unmarshal(b, &rep) != nil || len(rep.Sessions) != 3 || len(rep.Tenants) != 2 {
		t.Errorf("operator: %d %s", code, b)
	}
	code, b = r.do("GET", "/v1/usage?tenant=beta", tokenOperator, "", nil)
	if code != 200 || json.Unmarshal(b, &rep) != nil || len(rep.Sessions) != 1 || rep.Sessions[0].CPUSeconds != 7 {
		t.Errorf("operator, tenant=beta: %d %s", code, b)
	}
	// Without a token, 401.
	if code, _ := r.do("GET", "/v1/usage", "", "", nil); code != 401 {
		t.Errorf("no token: %d, want 401", code)
	}
	// The counters, by tenant only.
	_, b = r.do("GET", "/metrics", "", "", nil)
	for _, want := range []string{`shellbox_usage_calls_total{tenant="acme"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(b), `shellbox_usage_calls_total{session`) {
		t.Error("a usage counter has a session label")
	}
}

func TestUsageCSV(t *testing.T) {
	r, _, hour := usageRig(t)
	for _, how := range []struct{ path, accept string }{{"/v1/usage?format=csv", ""}, {"/v1/usage", "text/csv"}} {
		req, _ := http.NewRequest("GET", r.ts.URL+how.path, nil)
		req.Header.Set("Authorization", "Bearer "+tokenAcme)
		if how.accept != "" {
			req.Header.Set("Accept", how.accept)
		}
		resp, err := r.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(resp.Body).ReadAll()
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
			t.Fatalf("%s (Accept %q): %d %s %v", how.path, how.accept, resp.StatusCode, resp.Header.Get("Content-Type"), err)
		}
		want := [][]string{usage.CSVHeader,
			{"acme", "s1", hour.Format(time.RFC3339), hour.Add(time.Hour).Format(time.RFC3339), "60.000", "2.500", "15.000", "268435456", "0", "0.000", "false", "0.000", "0", "0", "0", "0", "0", "0"},
			{"acme", "s2", hour.Format(time.RFC3339), hour.Add(time.Hour).Format(time.RFC3339), "10.000", "0.500", "0.000", "0", "0", "0.000", "true", "0.000", "0", "0", "0", "0", "0", "0"},
		}
		if len(rows) != len(want) {
			t.Fatalf("%s: rows %q", how.path, rows)
		}
		for i := range want {
			if strings.Join(rows[i], ",") != strings.Join(want[i], ",") {
				t.Errorf("%s: row %d = %q, want %q", how.path, i, rows[i], want[i])
			}
		}
	}
}

func TestUsageBadParameters(t *testing.T) {
	r, _, _ := usageRig(t)
	for q, want := range map[string]string{
		"from=yesterday":                `invalid from "yesterday": want an RFC 3339 time (2026-12-06T15:04:05Z) or a UTC date (2026-12-06)`,
		"to=12/06/2026":                 `invalid to "12/06/2026": want an RFC 3339 time`,
		"from=2026-12-06&to=2026-12-05": "from (2026-12-06T00:00:00Z) must be before to (2026-12-05T00:00:00Z)",
		"from=2024-01-01&to=2026-01-01": "spans more than 366 days",
		"session=a/b":                   "invalid session",
		"format=xml":                    `invalid format "xml": want json or csv`,
		"tenant=beta":                   `tenant "beta": a tenant's token reads its own usage only (tenant acme)`,
		"sesion=s1":                     `unknown parameter "sesion": want from, to, session, tenant or format`,
		"session=s1&session=s2":         "parameter session given 2 times: give it once",
	} {
		code, m := r.json("GET", "/v1/usage?"+q, tokenAcme, nil)
		if code != 400 || errCode(m) != "invalid" || !strings.Contains(errMsg(m), want) {
			t.Errorf("?%s: %d %q, want 400 with %q", q, code, errMsg(m), want)
		}
	}
	// Without a Meter (the local backend), 503 says why.
	r2 := newRig(t, nil)
	if code, m := r2.json("GET", "/v1/usage", tokenAcme, nil); code != 503 || !strings.Contains(errMsg(m), "sandboxed backend") {
		t.Errorf("no meter: %d %v", code, m)
	}
}

// limitGate refuses a call past the tenant's daily limits, as the session
// layer's gate does, so the server's rendering of it is tested here.
type limitGate struct {
	m   *usage.Meter
	lim usage.Limits
}

func (g limitGate) Check(_ context.Context, c tools.Call) (executor.Request, error) {
	return c.Request, g.m.Check(c.Tenant, g.lim)
}

func TestUsageLimitErrorText(t *testing.T) {
	store := &usage.Memory{}
	m := usage.NewMeter(store, nil)
	// 3 CPU-seconds today, as a sampler would have counted them.
	src := &oneSandbox{c: usage.Counters{CPU: 3 * time.Second}}
	usage.NewSampler(m, src, 0, nil).Sample(context.Background())
	r := newRig(t, func(c *Config) { c.Usage = m })
	r.b.gate = limitGate{m: m, lim: usage.Limits{CPUSecondsPerDay: 2}}
	code, res := r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, map[string]any{"command": "true", "description": "run true"})
	resets := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).Format("2006-01-02 15:04")
	want := "Error: tenant acme used its 2 CPU-seconds (limits.cpuSecondsPerDay) for today (resets at " + resets + " UTC)"
	if code != 200 || res["text"] != want || res["isError"] != true {
		t.Errorf("call past the limit: %d %v, want the text %q", code, res, want)
	}
	// Another tenant is not limited by acme's use.
	if code, res := r.json("POST", "/v1/sessions/s1/tools/bash", tokenBeta, map[string]any{"command": "true", "description": "run true"}); code != 200 || res["isError"] == true {
		t.Errorf("beta: %d %v", code, res)
	}
}

// oneSandbox is a usage.Source of one sandbox of acme, created now.
type oneSandbox struct{ c usage.Counters }

func (o *oneSandbox) Sandboxes(context.Context) ([]usage.Sandbox, error) {
	return []usage.Sandbox{{Tenant: "acme", Session: "s0", ID: "c", Created: time.Now().Add(time.Second)}}, nil
}

func (o *oneSandbox) Read(context.Context, string) (usage.Counters, error) { return o.c, nil }

// TestUsageCountsSpill: a call whose output passes the in-memory bound
// (TailBytes, 30,000 bytes) spills it, and /v1/usage counts the spilled
// bytes, exactly, for its session; a call that does not spill adds none.
func TestUsageCountsSpill(t *testing.T) {
	m := usage.NewMeter(&usage.Memory{}, nil)
	r := newRig(t, func(c *Config) { c.Usage = m })
	const n = 100_000
	for _, cmd := range []string{fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", n), "echo short"} {
		if code, res := r.json("POST", "/v1/sessions/sp/tools/bash", tokenAcme, map[string]any{"command": cmd, "description": "output"}); code != 200 || res["isError"] == true {
			t.Fatalf("%s: %d %v", cmd, code, res)
		}
	}
	code, b := r.do("GET", "/v1/usage?session=sp", tokenAcme, "", nil)
	var rep UsageReport
	if code != 200 || json.Unmarshal(b, &rep) != nil || len(rep.Sessions) != 1 {
		t.Fatalf("%d %s", code, b)
	}
	if got := rep.Sessions[0]; got.SpillBytes != n || got.Calls != 2 || rep.Tenants["acme"].SpillBytes != n {
		t.Errorf("spill bytes %d (tenant %d) over %d calls, want %d over 2", got.SpillBytes, rep.Tenants["acme"].SpillBytes, got.Calls, n)
	}
}
