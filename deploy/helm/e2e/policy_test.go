package e2e

import (
	"testing"

	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/policies"
)

// TestPolicies: the policy files the chart tests install load, and give
// the limits the suite's profiles name (no cluster needed: a policy error
// would otherwise show only as a server that never becomes ready).
func TestPolicies(t *testing.T) {
	for _, rt := range runtimes {
		p, err := policies.Parse(rt.tenant+".yaml", []byte(chartPolicy(rt.runtime, "10.0.0.1:8080")))
		if err != nil {
			t.Fatalf("chartPolicy(%s): %v", rt.runtime, err)
		}
		if p.Sandbox().Runtime != rt.runtime {
			t.Errorf("chartPolicy(%s): runtime %q", rt.runtime, p.Sandbox().Runtime)
		}
		if _, err := policies.Parse("h"+rt.tenant+".yaml", []byte(hostilePolicy(rt.runtime))); err != nil {
			t.Fatalf("hostilePolicy(%s): %v", rt.runtime, err)
		}
	}
	if p, err := policies.Parse("rep.yaml", []byte(replicaPolicy)); err != nil || p.Sandbox().Runtime != "runc" {
		t.Fatalf("replicaPolicy: %v", err)
	}
	for _, rt := range []string{"runc", "runsc"} {
		for i, tn := range SuiteTenants("x", rt) {
			p, err := policies.Parse(tn.Name+".yaml", []byte(tn.Policy))
			if err != nil {
				t.Fatalf("SuiteTenants(%s)[%d]: %v", rt, i, err)
			}
			if want := executortest.Profiles()[i]; p.Limits != want {
				t.Errorf("SuiteTenants(%s)[%d]: limits %+v, want %+v", rt, i, p.Limits, want)
			}
		}
	}
}
