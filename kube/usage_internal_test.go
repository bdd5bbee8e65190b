package kube

import (
	"testing"
	"time"
)

// TestParseSummary: the pods of the runtime's namespace with their
// pod-level CPU time and working set; other namespaces' pods, and pods a
// kubelet reports without pod-level CPU, are left out.
func TestParseSummary(t *testing.T) {
	raw := []byte(`{"node":{"nodeName":"n1"},"pods":[
 {"podRef":{"name":"sb-a","namespace":"ns"},"cpu":{"time":"2026-12-07T01:00:00Z","usageCoreNanoSeconds":2008000000},
  "memory":{"time":"2026-12-07T01:00:00Z","workingSetBytes":268435456,"usageBytes":300000000}},
 {"podRef":{"name":"sb-b","namespace":"other"},"cpu":{"time":"2026-12-07T01:00:00Z","usageCoreNanoSeconds":5}},
 {"podRef":{"name":"sb-c","namespace":"ns"},"containers":[{"name":"sandbox"}]},
 {"podRef":{"name":"sb-d","namespace":"ns"},"cpu":{"time":"2026-12-07T01:00:01Z","usageCoreNanoSeconds":7}}
]}`)
	s, err := parseSummary(raw, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.pods) != 2 {
		t.Fatalf("pods = %+v, want sb-a and sb-d", s.pods)
	}
	a := s.pods["sb-a"]
	if a.c.CPU != 2008*time.Millisecond || a.c.MemoryBytes != 256<<20 || a.c.MemoryPeakBytes != 256<<20 ||
		!a.at.Equal(time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)) {
		t.Errorf("sb-a = %+v", a)
	}
	if d := s.pods["sb-d"]; d.c.CPU != 7 || d.c.MemoryBytes != 0 {
		t.Errorf("sb-d = %+v", d)
	}
	if _, err := parseSummary([]byte(`{"pods":[`), "ns"); err == nil {
		t.Error("a cut summary parsed")
	}
}
