package policies

import (
	"strings"
	"testing"
)

// sandbox.tenantCpus: none by default, at least sandbox.cpus when set, and
// carried into the sandbox settings' resources.
func TestTenantCPUs(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want float64
		err  string
	}{
		{"sandbox:\n  cpus: 1\n", 0, ""},
		{"sandbox:\n  cpus: 0.5\n  tenantCpus: 2\n", 2, ""},
		{"sandbox:\n  tenantCpus: 1\n", 1, ""},
		{"sandbox:\n  cpus: 2\n  tenantCpus: 1\n", 0, "sandbox.tenantCpus: 1 is below sandbox.cpus 2"},
		{"sandbox:\n  tenantCpus: -1\n", 0, "sandbox.tenantCpus: must be positive, at most 1024 (or 0: none), got -1"},
		{"sandbox:\n  cpus: 0.0001\n", 0, "sandbox.cpus: must be between 0.001 and 1024 cores, got 0.0001"},
		{"sandbox:\n  cpus: .nan\n", 0, "sandbox.cpus: must be between 0.001 and 1024 cores, got NaN"},
		{"sandbox:\n  tenantCpus: .nan\n", 0, "sandbox.tenantCpus: must be positive, at most 1024 (or 0: none), got NaN"},
	} {
		p, err := Parse("acme.yaml", []byte(c.yaml))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.yaml, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.yaml, err)
			continue
		}
		if got := p.Sandbox().Resources().TenantCPUs; got != c.want {
			t.Errorf("%q: tenantCpus %v, want %v", c.yaml, got, c.want)
		}
	}
}
