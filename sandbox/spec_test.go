package sandbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/sandbox"
)

func complete(t *testing.T, opts ...sandbox.Opt) sandbox.Spec {
	t.Helper()
	s, err := sandbox.NewSpec("acme", "s-1", append([]sandbox.Opt{
		sandbox.WithImage("img:1"), sandbox.WithAgentArgs("--serve"),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.Owner = "server-1"
	return s
}

func TestDefaultSpecIsHardened(t *testing.T) {
	s := sandbox.DefaultSpec("acme", "s-1")
	if s.Runtime != sandbox.RuntimeRunc || s.Network != sandbox.NetworkNone || s.UID == 0 || s.GID == 0 ||
		s.PidsLimit <= 0 || s.MemoryBytes <= 0 || s.CPUs <= 0 || s.WorkspaceBytes <= 0 || s.TmpBytes <= 0 {
		t.Fatalf("DefaultSpec = %+v", s)
	}
	if err := complete(t).Validate(); err != nil {
		t.Fatalf("a completed default spec does not validate: %v", err)
	}
}

func TestOptionsArePure(t *testing.T) {
	labels := map[string]string{"team": "a"}
	s := complete(t, sandbox.WithLabels(labels), sandbox.WithEnv("A", "1"), sandbox.WithEnv("A", "2"),
		sandbox.WithMemory(2*sandbox.GiB), sandbox.WithCPUs(0.5), sandbox.WithPidsLimit(64),
		sandbox.WithRuntime(sandbox.RuntimeRunsc), sandbox.WithUser(1001, 1002),
		sandbox.WithWorkspaceSize(100*sandbox.MiB), sandbox.WithTmpSize(10*sandbox.MiB), sandbox.WithSpillSize(0))
	labels["team"] = "changed"
	if s.Labels["team"] != "a" {
		t.Errorf("WithLabels aliases the caller's map")
	}
	if strings.Join(s.Env, ",") != "A=2" {
		t.Errorf("Env = %v, want the last value of A only", s.Env)
	}
	if s.MemoryBytes != 2*sandbox.GiB || s.CPUs != 0.5 || s.PidsLimit != 64 || s.Runtime != "runsc" ||
		s.UID != 1001 || s.GID != 1002 || s.WorkspaceBytes != 100*sandbox.MiB || s.TmpBytes != 10*sandbox.MiB || s.SpillBytes != 0 {
		t.Errorf("spec = %+v", s)
	}
	c := s.Clone()
	c.Labels["x"] = "y"
	c.Env[0] = "B=1"
	c.AgentArgs[0] = "x"
	if s.Labels["x"] != "" || s.Env[0] != "A=2" || s.AgentArgs[0] != "--serve" {
		t.Errorf("Clone shares state")
	}
}

// Every bad value is refused with ErrInvalid, naming the field.
func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		field string
		mut   func(*sandbox.Spec)
	}{
		{"tenant", func(s *sandbox.Spec) { s.Tenant = "" }},
		{"tenant", func(s *sandbox.Spec) { s.Tenant = "../etc" }},
		{"tenant", func(s *sandbox.Spec) { s.Tenant = strings.Repeat("a", 65) }},
		{"session", func(s *sandbox.Spec) { s.Session = "a/b" }},
		{"session", func(s *sandbox.Spec) { s.Session = ".hidden" }},
		{"owner", func(s *sandbox.Spec) { s.Owner = "" }},
		{"image", func(s *sandbox.Spec) { s.Image = " " }},
		{"runtime", func(s *sandbox.Spec) { s.Runtime = "kata" }},
		{"cpus", func(s *sandbox.Spec) { s.CPUs = 0 }},
		{"memory", func(s *sandbox.Spec) { s.MemoryBytes = sandbox.MiB }},
		{"memory", func(s *sandbox.Spec) { s.WorkspaceBytes = s.MemoryBytes }},
		{"pids", func(s *sandbox.Spec) { s.PidsLimit = 0 }},
		{"workspace", func(s *sandbox.Spec) { s.WorkspaceBytes = 0 }},
		{"tmp", func(s *sandbox.Spec) { s.TmpBytes = -1 }},
		{"spill", func(s *sandbox.Spec) { s.SpillBytes = -1 }},
		{"network", func(s *sandbox.Spec) { s.Network = "bridge" }},
		{"user", func(s *sandbox.Spec) { s.UID = 0 }},
		{"env", func(s *sandbox.Spec) { s.Env = []string{"NOEQUALS"} }},
		{"env", func(s *sandbox.Spec) { s.Env = []string{"=x"} }},
		{"labels", func(s *sandbox.Spec) { s.Labels = map[string]string{sandbox.LabelOwner: "me"} }},
		{"agent", func(s *sandbox.Spec) { s.AgentArgs = []string{"a\x00b"} }},
		{"labels", func(s *sandbox.Spec) { s.Labels = map[string]string{sandbox.LabelSettings: "{}"} }},
		{"settings", func(s *sandbox.Spec) { s.Settings = strings.Repeat("a", sandbox.MaxSettingsBytes+1) }},
		{"settings", func(s *sandbox.Spec) { s.Settings = "{\"a\":\"b\n\"}" }},
		{"settings", func(s *sandbox.Spec) { s.Settings = "\xff" }},
	}
	for _, c := range cases {
		s := complete(t)
		c.mut(&s)
		err := s.Validate()
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), ": "+c.field+": ") {
			t.Errorf("%s: Validate = %v, want ErrInvalid naming %q", c.field, err, c.field)
		}
	}
}

func TestOptionErrorsStopCompose(t *testing.T) {
	called := false
	_, err := sandbox.NewSpec("acme", "s", sandbox.WithPidsLimit(-1), func(*sandbox.Spec) error { called = true; return nil })
	if !errors.Is(err, sandbox.ErrInvalid) || called {
		t.Fatalf("err %v, later option called %v", err, called)
	}
}

// A quota over CPUPeriod (10 ms), the period stretched where the quota
// would be under the kernel's 1 ms.
func TestCPUQuota(t *testing.T) {
	for _, c := range []struct {
		cores         float64
		quota, period int64
	}{
		{1, 10000, 10000},
		{0.5, 5000, 10000},
		{2.25, 22500, 10000},
		{0.1, 1000, 10000},
		{0.05, 1000, 20000},
		{0.001, 1000, 1000000},
	} {
		if q, p := sandbox.CPUQuota(c.cores); q != c.quota || p != c.period {
			t.Errorf("CPUQuota(%v) = %d/%d µs, want %d/%d", c.cores, q, p, c.quota, c.period)
		}
	}
}

// A tenant's quota is none (0) or at least the sandbox's own.
func TestTenantCPUs(t *testing.T) {
	s := sandbox.DefaultSpec("acme", "s")
	s.Owner, s.Image = "o", "img"
	for _, c := range []struct {
		cpus, tenant float64
		err          string
	}{
		{1, 0, ""},
		{1, 1, ""},
		{0.5, 4, ""},
		{2, 1, "tenantCpus: 1: below the sandbox's own cpus 2"},
		{1, -1, "tenantCpus: -1: must be 0 (none) or positive"},
		{0.0001, 0, "cpus: 0.0001: must be at least 0.001"},
	} {
		s.CPUs, s.TenantCPUs = c.cpus, c.tenant
		err := s.Validate()
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("cpus %v, tenantCpus %v: Validate = %v, want %q", c.cpus, c.tenant, err, c.err)
		}
	}
}
