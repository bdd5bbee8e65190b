package policies

import (
	"strings"
	"testing"

	"github.com/shellbox/shellbox/usage"
)

func TestUsageLimits(t *testing.T) {
	p, err := Parse("acme.yaml", []byte("default: allow\nlimits:\n  cpuSecondsPerDay: 7200\n  sandboxHoursPerDay: 1.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (usage.Limits{CPUSecondsPerDay: 7200, SandboxHoursPerDay: 1.5}); p.UsageLimits != want {
		t.Errorf("UsageLimits = %+v, want %+v", p.UsageLimits, want)
	}
	p, err = Parse("acme.yaml", []byte("default: allow\n"))
	if err != nil || p.UsageLimits != (usage.Limits{}) {
		t.Errorf("a file without them: %+v, %v; want none", p.UsageLimits, err)
	}
	_, err = Parse("acme.yaml", []byte("default: allow\nlimits:\n  cpuSecondsPerDay: -1\n"))
	if err == nil || !strings.Contains(err.Error(), "acme.yaml:3") || !strings.Contains(err.Error(), "limits.cpuSecondsPerDay: must be a positive number, got -1") {
		t.Errorf("a negative limit: %v", err)
	}
}
