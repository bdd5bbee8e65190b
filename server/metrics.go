package server

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// metrics are the server's Prometheus metrics, on a registry of its own (so
// several servers can live in one test process).
type metrics struct {
	s   *Server
	reg *prometheus.Registry

	toolCalls     *prometheus.CounterVec
	toolLatency   *prometheus.HistogramVec
	decisions     *prometheus.CounterVec
	kills         *prometheus.CounterVec
	spills        *prometheus.CounterVec
	spillBytes    *prometheus.CounterVec
	errors        *prometheus.CounterVec
	httpRequests  *prometheus.CounterVec
	httpLatency   *prometheus.HistogramVec
	createLatency *prometheus.HistogramVec
	egress        *prometheus.CounterVec
	leader        prometheus.Gauge
	idemReplays   prometheus.Counter
	sessionsDesc  *prometheus.Desc
	suspendedDesc *prometheus.Desc
	tasksDesc     *prometheus.Desc
	warningsDesc  *prometheus.Desc
	usage         usageDescs

	mu    sync.Mutex
	tasks map[string]map[string]bool // tenant → "session\x00task" started by this process, not seen ending
}

func newMetrics(s *Server) *metrics {
	m := &metrics{s: s, reg: prometheus.NewRegistry(), tasks: map[string]map[string]bool{}}
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shellbox_tool_calls_total", Help: "Tool calls by tool, tenant and outcome (ok, error, not_found, limited, unavailable).",
	}, []string{"tool", "tenant", "outcome"})
	m.toolLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shellbox_tool_call_duration_seconds", Help: "Tool call latency, by tool and tenant.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	}, []string{"tool", "tenant"})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shellbox_policy_decisions_total", Help: "Policy decisions on shell calls (allow, deny) and approver decisions (approved, denied), by tenant.",
	}, []string{"tenant", "decision"})
	m.kills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shellbox_kills_total", Help: "Commands killed, by tenant and reason (timeout, signal, bash_kill).",
	}, []string{"tenant", "reason"})
	m.spillBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shellbox_spill_bytes_total", Help: "Bytes written to spill files by foreground calls, by tenant.",
	}, []string{"tenant"})
	m.spills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shellbox_spilled_results_total", Help: "Foreground results whose output was cut to its tail and spilled to a file, by tenant.",
	}, []string{"tenant"})
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shellbox_errors_total", Help: "Requests refused or failed, by error code.",
	}, []string{"code"})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shellbox_http_requests_total", Help: "HTTP requests by method and status.",
	}, []string{"method", "status"})
	m.httpLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shellbox_http_request_duration_seconds", Help: "HTTP request latency by method (streams count until they end).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
	}, []string{"method"})
	m.createLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shellbox_sandbox_create_duration_seconds", Help: "Latency of creating a sandbox, as the backend reports it, by tenant.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30, 120},
	}, []string{"tenant"})
	m.egress = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shellbox_egress_connections_total", Help: "Connections of sandboxes' egress proxies, by tenant and outcome (allowed, denied, failed; refused: a connection whose TLS or HTTP/2 streams the relay refused).",
	}, []string{"tenant", "outcome"})
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shellbox_leader", Help: "1 while this process reaps idle sandboxes and keeps the warm pools (on Kubernetes: the replica holding the release's Lease), else 0.",
	})
	m.idemReplays = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shellbox_idempotent_replays_total", Help: "POSTs answered from an earlier request with the same Idempotency-Key instead of running again.",
	})
	m.sessionsDesc = prometheus.NewDesc("shellbox_active_sessions", "Sessions (sandboxes) by tenant.", []string{"tenant"}, nil)
	m.suspendedDesc = prometheus.NewDesc("shellbox_suspended_sessions", "Suspended sessions (no sandbox; the workspace in the snapshot store) by tenant.", []string{"tenant"}, nil)
	m.warningsDesc = prometheus.NewDesc("shellbox_backend_warnings", "Problems that do not stop this process serving, e.g. tenants' policy files that do not load as they are (listed by /readyz).", nil, nil)
	m.usage = newUsageDescs()
	m.tasksDesc = prometheus.NewDesc("shellbox_active_background_tasks", "Background tasks started through this process and not yet seen ending, by tenant.", []string{"tenant"}, nil)
	m.reg.MustRegister(m.toolCalls, m.toolLatency, m.decisions, m.kills, m.spills, m.spillBytes, m.errors,
		m.httpRequests, m.httpLatency, m.createLatency, m.egress, m.leader, m.idemReplays, m,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Describe and Collect make the session and task gauges, computed at scrape.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.sessionsDesc
	ch <- m.suspendedDesc
	ch <- m.tasksDesc
	ch <- m.warningsDesc
	m.usage.describe(ch)
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if wr, ok := m.s.cfg.Backend.(Warner); ok {
		ch <- prometheus.MustNewConstMetric(m.warningsDesc, prometheus.GaugeValue, float64(len(wr.Warnings())))
	}
	for tenant := range m.s.cfg.Tenants {
		if list, err := m.s.cfg.Backend.Sessions(ctx, tenant); err == nil {
			suspended := 0
			for _, si := range list {
				if si.State == "suspended" {
					suspended++
				}
			}
			ch <- prometheus.MustNewConstMetric(m.sessionsDesc, prometheus.GaugeValue, float64(len(list)-suspended), tenant)
			ch <- prometheus.MustNewConstMetric(m.suspendedDesc, prometheus.GaugeValue, float64(suspended), tenant)
		}
	}
	m.usage.collect(ch, m.s.cfg.Usage)
	m.mu.Lock()
	defer m.mu.Unlock()
	for tenant, set := range m.tasks {
		ch <- prometheus.MustNewConstMetric(m.tasksDesc, prometheus.GaugeValue, float64(len(set)), tenant)
	}
}

func (m *metrics) toolCall(tool, tenant, outcome string, d time.Duration) {
	if !knownTools[tool] {
		tool = "unknown"
	}
	m.toolCalls.WithLabelValues(tool, tenant, outcome).Inc()
	if d > 0 {
		m.toolLatency.WithLabelValues(tool, tenant).Observe(d.Seconds())
	}
}

// observeResult records a finished tool call and what its result says.
func (m *metrics) observeResult(tenant, tool string, r tools.Result, d time.Duration) {
	outcome := "ok"
	switch {
	case notFound(r):
		outcome = "not_found"
	case r.IsError:
		outcome = "error"
	}
	m.toolCall(tool, tenant, outcome, d)
	switch v := r.Value.(type) {
	case *tools.Foreground:
		switch {
		case v.TimedOut:
			m.kills.WithLabelValues(tenant, "timeout").Inc()
		case v.Signal != "":
			m.kills.WithLabelValues(tenant, "signal").Inc()
		}
		if v.Truncated {
			m.spills.WithLabelValues(tenant).Inc()
			m.spillBytes.WithLabelValues(tenant).Add(float64(v.SpillBytes))
		}
	case *tools.Background:
		m.mu.Lock()
		if m.tasks[tenant] == nil {
			m.tasks[tenant] = map[string]bool{}
		}
		m.tasks[tenant][v.TaskID] = true
		m.mu.Unlock()
	case *tools.TaskOutput:
		if v.Status.State != "running" {
			m.taskDone(tenant, v.TaskID)
		}
	case *tools.TaskKill:
		if !v.AlreadyDone {
			m.kills.WithLabelValues(tenant, "bash_kill").Inc()
		}
		m.taskDone(tenant, v.TaskID)
	}
	for _, n := range r.Notices {
		m.taskDone(tenant, n.TaskID)
	}
}

func (m *metrics) taskDone(tenant, id string) {
	m.mu.Lock()
	delete(m.tasks[tenant], id)
	m.mu.Unlock()
}

func (m *metrics) policyDecision(tenant, decision string) {
	m.decisions.WithLabelValues(tenant, decision).Inc()
}

func (m *metrics) sandboxCreated(tenant string, d time.Duration) {
	m.createLatency.WithLabelValues(tenant).Observe(d.Seconds())
}

func (m *metrics) httpRequest(r *http.Request, status int, d time.Duration) {
	method := r.Method
	switch method {
	case http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodHead, http.MethodOptions:
	default:
		method = "other"
	}
	m.httpRequests.WithLabelValues(method, strconv.Itoa(status)).Inc()
	m.httpLatency.WithLabelValues(method).Observe(d.Seconds())
}

func (s *Server) countError(code string) { s.metrics.errors.WithLabelValues(code).Inc() }

// ObserveGate wraps a tenant's permissions Gate so its decisions are counted
// in shellbox_policy_decisions_total. A nil gate stays nil (allow all).
func (s *Server) ObserveGate(tenant string, g tools.Gate) tools.Gate {
	if g == nil {
		return nil
	}
	return observedGate{g: g, m: s.metrics, tenant: tenant}
}

type observedGate struct {
	g      tools.Gate
	m      *metrics
	tenant string
}

func (o observedGate) Check(ctx context.Context, c tools.Call) (req executor.Request, err error) {
	req, err = o.g.Check(ctx, c)
	decision := "allow"
	if err != nil {
		decision = "deny"
	}
	o.m.policyDecision(o.tenant, decision)
	return req, err
}

// ObserveSandboxCreate records how long creating one of the tenant's
// sandboxes took; a backend calls it.
func (s *Server) ObserveSandboxCreate(tenant string, d time.Duration) {
	s.metrics.sandboxCreated(tenant, d)
}

// ObserveEgress counts one connection of a tenant's egress proxy by its
// outcome (allowed, denied, failed); a backend calls it.
func (s *Server) ObserveEgress(tenant, outcome string) {
	s.metrics.egress.WithLabelValues(tenant, outcome).Inc()
}

// ObserveLeader records whether this process is the one reaping idle
// sandboxes and keeping the warm pools; a backend calls it when that
// changes.
func (s *Server) ObserveLeader(leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	s.metrics.leader.Set(v)
}

// ConsoleMetrics is the console's summary of the metrics of some tenants.
type ConsoleMetrics struct {
	// ToolCalls counts tool calls by outcome; Decisions policy and approver
	// decisions; Kills commands killed, by reason.
	ToolCalls map[string]float64 `json:"toolCalls"`
	Decisions map[string]float64 `json:"decisions"`
	Kills     map[string]float64 `json:"kills"`
	// Errors counts refused or failed requests by code, all tenants
	// together: shown to operators only.
	Errors        map[string]float64 `json:"errors,omitempty"`
	CallsInFlight int                `json:"callsInFlight"`
	RunningTasks  int                `json:"runningTasks"`
}

// summary sums the counters of tenants (and, for an operator, the
// server-wide error counts) without a full scrape, which would list every
// tenant's sessions.
func (m *metrics) summary(tenants []string, operator bool) ConsoleMetrics {
	set := map[string]bool{}
	for _, t := range tenants {
		set[t] = true
	}
	cm := ConsoleMetrics{
		ToolCalls: sumBy(m.toolCalls, "outcome", set),
		Decisions: sumBy(m.decisions, "decision", set),
		Kills:     sumBy(m.kills, "reason", set),
	}
	if operator {
		cm.Errors = sumBy(m.errors, "code", nil)
	}
	for _, t := range tenants {
		if tl := m.s.limits[t]; tl != nil {
			cm.CallsInFlight += len(tl.calls)
		}
	}
	m.mu.Lock()
	for _, t := range tenants {
		cm.RunningTasks += len(m.tasks[t])
	}
	m.mu.Unlock()
	return cm
}

// sumBy sums a counter vector's values by one label, over the series whose
// tenant label is in tenants (every series when tenants is nil).
func sumBy(c prometheus.Collector, label string, tenants map[string]bool) map[string]float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	out := map[string]float64{}
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil {
			continue
		}
		key, tenant := "", ""
		for _, lp := range d.GetLabel() {
			switch lp.GetName() {
			case "tenant":
				tenant = lp.GetValue()
			case label:
				key = lp.GetValue()
			}
		}
		if tenants != nil && !tenants[tenant] {
			continue
		}
		out[key] += d.GetCounter().GetValue()
	}
	return out
}
