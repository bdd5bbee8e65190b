package server

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/usage"
)

// UsageReport is the JSON body of GET /v1/usage: the sessions' use over
// [From, To), and each tenant's sum.
type UsageReport struct {
	From     time.Time                `json:"from"`
	To       time.Time                `json:"to"`
	Sessions []usage.Record           `json:"sessions"`
	Tenants  map[string]usage.Figures `json:"tenants"`
}

// maxUsageRange bounds a /v1/usage query.
const maxUsageRange = 366 * 24 * time.Hour

// usageRoute serves GET /v1/usage to a tenant's token (its own sessions)
// and to an operator's (ConsoleConfig.OperatorTokens: every tenant's, or one's
// with ?tenant=). Tenants' requests take the path every /v1 route takes
// (authenticate, rate limit); an operator token is known to no tenant, so
// it is tried first.
func (s *Server) usageRoute() http.Handler {
	tenantPath := s.authenticate(s.rateLimit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.getUsage(w, r, tenantOf(r.Context()))
	})))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := bearer(r); ok {
			if _, op := s.console.operators.lookup(tok); op {
				setLogAttr(r.Context(), "tenant", "operator")
				s.getUsage(w, r, "")
				return
			}
		}
		tenantPath.ServeHTTP(w, r)
	})
}

// getUsage answers a usage query; tenant is the caller's, "" for an
// operator.
func (s *Server) getUsage(w http.ResponseWriter, r *http.Request, tenant string) {
	if s.cfg.Usage == nil {
		s.countError("unavailable")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "usage is not measured by this server: it needs a sandboxed backend (docker, containerd or kube)")
		return
	}
	f, csvOut, msg := s.usageQuery(r, tenant)
	if msg != "" {
		s.countError("invalid")
		writeError(w, http.StatusBadRequest, "invalid", msg)
		return
	}
	recs, err := s.cfg.Usage.Query(r.Context(), f)
	if err != nil {
		s.countError("usage")
		writeErr(w, err)
		return
	}
	if csvOut {
		writeUsageCSV(w, recs)
		return
	}
	writeJSON(w, http.StatusOK, usageReport(f, recs))
}

// usageReport is the report of recs, f's records: the sessions and each
// tenant's sum.
func usageReport(f usage.Filter, recs []usage.Record) UsageReport {
	rep := UsageReport{From: f.From, To: f.To, Sessions: recs, Tenants: map[string]usage.Figures{}}
	if rep.Sessions == nil {
		rep.Sessions = []usage.Record{}
	}
	for _, rec := range recs {
		t := rep.Tenants[rec.Tenant]
		t.Sum(rec.Figures)
		rep.Tenants[rec.Tenant] = t
	}
	return rep
}

// ConsoleUsage is the body of GET /ui/api/usage: GET /v1/usage's report
// (its sessions the maxUsageShown that used the most CPU), and each
// tenant's use per UTC hour for the chart.
type ConsoleUsage struct {
	UsageReport
	// SessionsTotal counts the sessions of the range; Sessions holds at
	// most maxUsageShown of them (the tenants' sums count them all).
	SessionsTotal int `json:"sessionsTotal"`
	// TenantSessions counts each tenant's sessions of the range.
	TenantSessions map[string]int `json:"tenantSessions"`
	Series         []usage.Point  `json:"series"`
}

// maxUsageShown bounds the sessions the console's usage page lists.
const maxUsageShown = 500

// usage serves GET /ui/api/usage with /v1/usage's parameters, scoped as
// /v1/usage is: a tenant's login reads its own tenant, an operator's every
// tenant's (or one's with ?tenant=). format=csv answers /v1/usage's CSV,
// every session, for the page's download link.
func (c *console) usage(w http.ResponseWriter, r *http.Request) {
	l := loginOf(r)
	if c.s.cfg.Usage == nil {
		writeError(w, http.StatusNotImplemented, "unsupported", "usage is not measured by this server: it needs a sandboxed backend (docker, containerd or kube)")
		return
	}
	tenant := l.tenant
	if l.operator {
		tenant = ""
	}
	f, csvOut, msg := c.s.usageQuery(r, tenant)
	if msg != "" {
		writeError(w, http.StatusBadRequest, "invalid", msg)
		return
	}
	recs, err := c.s.cfg.Usage.Query(r.Context(), f)
	if err != nil {
		writeErr(w, err)
		return
	}
	if csvOut {
		writeUsageCSV(w, recs)
		return
	}
	pts, err := c.s.cfg.Usage.Series(r.Context(), f)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := ConsoleUsage{UsageReport: usageReport(f, recs), SessionsTotal: len(recs), TenantSessions: map[string]int{}, Series: pts}
	for _, rec := range recs {
		out.TenantSessions[rec.Tenant]++
	}
	if out.Series == nil {
		out.Series = []usage.Point{}
	}
	if len(recs) > maxUsageShown {
		top := slices.Clone(recs)
		slices.SortStableFunc(top, func(a, b usage.Record) int { return cmp.Compare(b.CPUSeconds, a.CPUSeconds) })
		out.Sessions = top[:maxUsageShown]
	}
	writeJSON(w, http.StatusOK, out)
}

// usageQuery reads a usage query's parameters: from and to (RFC 3339, or
// a UTC date; default today so far), session, tenant (an operator's
// choice; a tenant may name only itself), format (json, csv; or Accept:
// text/csv). msg says what is wrong, for a 400.
func (s *Server) usageQuery(r *http.Request, tenant string) (f usage.Filter, csvOut bool, msg string) {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains([]string{"from", "to", "session", "tenant", "format"}, k) {
			return f, false, fmt.Sprintf("unknown parameter %q: want from, to, session, tenant or format", clip(k, 40))
		}
		if len(q[k]) > 1 {
			return f, false, fmt.Sprintf("parameter %s given %d times: give it once", k, len(q[k]))
		}
	}
	now := time.Now().UTC()
	f.From, f.To = now.Truncate(24*time.Hour), now
	var err error
	if v := q.Get("from"); v != "" {
		if f.From, err = usage.ParseTime(v); err != nil {
			return f, false, fmt.Sprintf("invalid from %q: %v", clip(v, 40), err)
		}
	}
	if v := q.Get("to"); v != "" {
		if f.To, err = usage.ParseTime(v); err != nil {
			return f, false, fmt.Sprintf("invalid to %q: %v", clip(v, 40), err)
		}
	}
	if !f.To.After(f.From) {
		return f, false, fmt.Sprintf("from (%s) must be before to (%s)", f.From.Format(time.RFC3339), f.To.Format(time.RFC3339))
	}
	if f.To.Sub(f.From) > maxUsageRange {
		return f, false, fmt.Sprintf("from %s to %s spans more than %d days: ask for less", f.From.Format(time.RFC3339), f.To.Format(time.RFC3339), int(maxUsageRange/(24*time.Hour)))
	}
	if v := q.Get("session"); v != "" {
		if err := confine.CheckID("session", v); err != nil {
			return f, false, fmt.Sprintf("invalid %v (want %s)", err, confine.IDRule)
		}
		f.Session = v
	}
	f.Tenant = tenant
	if v := q.Get("tenant"); v != "" {
		switch {
		case tenant == "":
			if err := confine.CheckID("tenant", v); err != nil {
				return f, false, fmt.Sprintf("invalid %v (want %s)", err, confine.IDRule)
			}
			f.Tenant = v
		case v != tenant:
			return f, false, fmt.Sprintf("tenant %q: a tenant's token reads its own usage only (tenant %s)", clip(v, 64), tenant)
		}
	}
	switch v := q.Get("format"); v {
	case "json":
	case "csv":
		csvOut = true
	case "":
		csvOut = strings.Contains(r.Header.Get("Accept"), "text/csv")
	default:
		return f, false, fmt.Sprintf("invalid format %q: want json or csv", clip(v, 40))
	}
	return f, csvOut, ""
}

func writeUsageCSV(w http.ResponseWriter, recs []usage.Record) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_ = usage.WriteCSV(w, recs)
}

// usageDescs are the usage counters, by tenant only: a session label would
// make a series per session ever seen.
type usageDescs struct {
	sandbox, cpu, memory, calls, callSeconds, suspended *prometheus.Desc
	spill, egressRequests, egressSent, egressReceived   *prometheus.Desc
}

func newUsageDescs() usageDescs {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"tenant"}, nil)
	}
	return usageDescs{
		sandbox:        d("shellbox_usage_sandbox_seconds_total", "Seconds sandboxes of the tenant ran, as sampled from their cgroups, since this process started."),
		cpu:            d("shellbox_usage_cpu_seconds_total", "CPU-seconds the tenant's sandboxes used (their cgroups' CPU time), since this process started."),
		memory:         d("shellbox_usage_memory_gib_seconds_total", "Memory GiB-seconds of the tenant's sandboxes (memory in use at each sample times the interval), since this process started."),
		calls:          d("shellbox_usage_calls_total", "Tool calls of the tenant's sessions that ran, since this process started."),
		callSeconds:    d("shellbox_usage_call_seconds_total", "Total duration of the tenant's tool calls, since this process started."),
		suspended:      d("shellbox_usage_suspended_seconds_total", "Seconds the tenant's sessions were suspended (no sandbox running), as sampled, since this process started."),
		spill:          d("shellbox_usage_spill_bytes_total", "Bytes the tenant's foreground calls and background tasks wrote to spill files, since this process started."),
		egressRequests: d("shellbox_usage_egress_requests_total", "Connections the egress relay of this process opened to destinations for the tenant's sandboxes, since it started."),
		egressSent:     d("shellbox_usage_egress_sent_bytes_total", "Bytes the egress relay of this process sent to destinations for the tenant's sandboxes, since it started."),
		egressReceived: d("shellbox_usage_egress_received_bytes_total", "Bytes the egress relay of this process received from destinations for the tenant's sandboxes, since it started."),
	}
}

func (d usageDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.sandbox, d.cpu, d.memory, d.calls, d.callSeconds, d.suspended,
		d.spill, d.egressRequests, d.egressSent, d.egressReceived} {
		ch <- x
	}
}

func (d usageDescs) collect(ch chan<- prometheus.Metric, m *usage.Meter) {
	if m == nil {
		return
	}
	for t, f := range m.Totals() {
		ch <- prometheus.MustNewConstMetric(d.sandbox, prometheus.CounterValue, f.SandboxSeconds, t)
		ch <- prometheus.MustNewConstMetric(d.cpu, prometheus.CounterValue, f.CPUSeconds, t)
		ch <- prometheus.MustNewConstMetric(d.memory, prometheus.CounterValue, f.MemoryGiBSeconds, t)
		ch <- prometheus.MustNewConstMetric(d.calls, prometheus.CounterValue, float64(f.Calls), t)
		ch <- prometheus.MustNewConstMetric(d.callSeconds, prometheus.CounterValue, f.CallSeconds, t)
		ch <- prometheus.MustNewConstMetric(d.suspended, prometheus.CounterValue, f.SuspendedSeconds, t)
		ch <- prometheus.MustNewConstMetric(d.spill, prometheus.CounterValue, float64(f.SpillBytes), t)
		ch <- prometheus.MustNewConstMetric(d.egressRequests, prometheus.CounterValue, float64(f.EgressRequests), t)
		ch <- prometheus.MustNewConstMetric(d.egressSent, prometheus.CounterValue, float64(f.EgressSentBytes), t)
		ch <- prometheus.MustNewConstMetric(d.egressReceived, prometheus.CounterValue, float64(f.EgressReceivedBytes), t)
	}
}
