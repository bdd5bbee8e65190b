package e2e

import (
	"testing"

	"github.com/shellbox/shellbox/policies"
)

// TestPolicies: the policy files the chart tests install load (no cluster
// needed: a policy error would otherwise show only as a server that never
// becomes ready).
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
}
