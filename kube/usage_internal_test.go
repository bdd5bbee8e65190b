package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/shellbox/shellbox/sandbox"
)

// TestParseSummary: the pods of the runtime's namespace with their
// pod-level CPU time and working set, and their workspace volume's used
// bytes; other namespaces' pods, and pods a kubelet reports with neither
// pod-level CPU nor a workspace figure, are left out.
func TestParseSummary(t *testing.T) {
	raw := []byte(`{"node":{"nodeName":"n1"},"pods":[
 {"podRef":{"name":"sb-a","namespace":"ns"},"cpu":{"time":"2026-12-07T01:00:00Z","usageCoreNanoSeconds":2008000000},
  "memory":{"time":"2026-12-07T01:00:00Z","workingSetBytes":268435456,"usageBytes":300000000},
  "volume":[{"time":"2026-12-07T00:59:10Z","usedBytes":4096,"name":"agent"},
   {"time":"2026-12-07T00:59:10Z","availableBytes":1,"capacityBytes":2,"usedBytes":67112960,"inodesUsed":3,"name":"workspace"}]},
 {"podRef":{"name":"sb-b","namespace":"other"},"cpu":{"time":"2026-12-07T01:00:00Z","usageCoreNanoSeconds":5}},
 {"podRef":{"name":"sb-c","namespace":"ns"},"containers":[{"name":"sandbox"}]},
 {"podRef":{"name":"sb-d","namespace":"ns"},"cpu":{"time":"2026-12-07T01:00:01Z","usageCoreNanoSeconds":7}},
 {"podRef":{"name":"sb-e","namespace":"ns"},"volume":[{"time":"2026-12-07T01:00:02Z","usedBytes":0,"name":"workspace"}]}
]}`)
	s, err := parseSummary(raw, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.pods) != 3 {
		t.Fatalf("pods = %+v, want sb-a, sb-d and sb-e", s.pods)
	}
	a := s.pods["sb-a"]
	if !a.hasCPU || a.c.CPU != 2008*time.Millisecond || a.c.MemoryBytes != 256<<20 || a.c.MemoryPeakBytes != 256<<20 ||
		!a.at.Equal(time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)) {
		t.Errorf("sb-a = %+v", a)
	}
	if !a.hasWS || a.ws != 67112960 || !a.wsAt.Equal(time.Date(2026, 12, 7, 0, 59, 10, 0, time.UTC)) {
		t.Errorf("sb-a workspace = %+v", a)
	}
	if d := s.pods["sb-d"]; !d.hasCPU || d.c.CPU != 7 || d.c.MemoryBytes != 0 || d.hasWS {
		t.Errorf("sb-d = %+v", d)
	}
	if e := s.pods["sb-e"]; e.hasCPU || !e.hasWS || e.ws != 0 {
		t.Errorf("sb-e = %+v", e)
	}
	if _, err := parseSummary([]byte(`{"pods":[`), "ns"); err == nil {
		t.Error("a cut summary parsed")
	}
}

// fakeKubelet is an API server with pods on node n1 and that node's
// kubelet summary, through the node proxy.
type fakeKubelet struct {
	mu        sync.Mutex
	summary   string // the body; "" answers 403, as without nodes/proxy
	summaries int    // summary requests
}

func (f *fakeKubelet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch p := r.URL.Path; {
	case p == "/api/v1/nodes/n1/proxy/stats/summary":
		f.summaries++
		if f.summary == "" {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"nodes \"n1\" is forbidden: cannot get resource \"nodes/proxy\""}`)
			return
		}
		fmt.Fprint(w, f.summary)
	case strings.HasPrefix(p, "/api/v1/namespaces/ns/pods/") && !strings.Contains(p, "gone"):
		name := strings.TrimPrefix(p, "/api/v1/namespaces/ns/pods/")
		fmt.Fprintf(w, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":"ns"},"spec":{"nodeName":"n1"}}`, name)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}
}

func (f *fakeKubelet) set(summary string) {
	f.mu.Lock()
	f.summary, f.summaries = summary, 0
	f.mu.Unlock()
}

func (f *fakeKubelet) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.summaries
}

// TestSandboxWorkspaceUsage: a pod's workspace bytes and the kubelet's
// time of them come from the same summary as its counters (one request
// for every pod of the node within summaryTTL), by the pod's name,
// whatever session claimed it; a pod the kubelet has not measured yet,
// a refused summary and one over the bound are unavailable (the Sampler
// then keeps the session's last value), a gone pod not found.
func TestSandboxWorkspaceUsage(t *testing.T) {
	f := &fakeKubelet{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	newRuntime := func() *Runtime {
		r, err := New(cs, Config{Namespace: "ns", AgentImage: "shellbox:test"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx := context.Background()
	f.set(`{"pods":[
 {"podRef":{"name":"sb-a","namespace":"ns"},"cpu":{"time":"2026-12-07T01:00:00Z","usageCoreNanoSeconds":1000000000},
  "volume":[{"time":"2026-12-07T00:59:10Z","usedBytes":67112960,"name":"workspace"}]},
 {"podRef":{"name":"shellbox-pool-x","namespace":"ns"},"cpu":{"time":"2026-12-07T01:00:00Z","usageCoreNanoSeconds":5},
  "volume":[{"time":"2026-12-07T00:59:40Z","usedBytes":4096,"name":"workspace"}]},
 {"podRef":{"name":"sb-new","namespace":"ns"},"cpu":{"time":"2026-12-07T01:00:00Z","usageCoreNanoSeconds":5}}]}`)
	r := newRuntime()
	if c, err := r.Usage(ctx, "sb-a"); err != nil || c.CPU != time.Second {
		t.Fatalf("usage: %+v, %v", c, err)
	}
	n, at, err := r.SandboxWorkspaceUsage(ctx, "sb-a")
	if err != nil || n != 67112960 || !at.Equal(time.Date(2026, 12, 7, 0, 59, 10, 0, time.UTC)) {
		t.Errorf("sb-a: %d at %v, %v", n, at, err)
	}
	if n, _, err := r.SandboxWorkspaceUsage(ctx, "shellbox-pool-x"); err != nil || n != 4096 {
		t.Errorf("a claimed pool pod: %d, %v", n, err)
	}
	if _, _, err := r.SandboxWorkspaceUsage(ctx, "sb-new"); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("a pod not measured yet: %v, want unavailable", err)
	}
	if got := f.requests(); got != 1 {
		t.Errorf("%d summary requests for one pass over the node's pods, want 1", got)
	}
	if _, _, err := r.SandboxWorkspaceUsage(ctx, "gone"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a gone pod: %v, want not found", err)
	}

	f.set("") // nodes/proxy refused
	if _, _, err := newRuntime().SandboxWorkspaceUsage(ctx, "sb-a"); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "nodes/proxy") {
		t.Errorf("summary refused: %v, want unavailable naming nodes/proxy", err)
	}
	f.set(`{"pods":[` + strings.Repeat(" ", maxSummaryBytes) + `]}`)
	if _, _, err := newRuntime().SandboxWorkspaceUsage(ctx, "sb-a"); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "over") {
		t.Errorf("summary over the bound: %v, want unavailable", err)
	}
}
