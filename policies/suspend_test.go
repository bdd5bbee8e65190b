package policies

import (
	"strings"
	"testing"
)

// TestSandboxSuspend: sandbox.suspend is files by default, memory when
// set so, and anything else is refused naming the two.
func TestSandboxSuspend(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"tools: {bash: true}\n", SuspendFiles},
		{"sandbox:\n  suspend: files\n", SuspendFiles},
		{"sandbox:\n  suspend: memory\n", SuspendMemory},
	} {
		p, err := Parse("acme.yaml", []byte(tc.src))
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		if p.Suspend != tc.want {
			t.Errorf("%q: Suspend %q, want %q", tc.src, p.Suspend, tc.want)
		}
	}
	_, err := Parse("acme.yaml", []byte("sandbox:\n  suspend: ram\n"))
	if err == nil || !strings.Contains(err.Error(), `acme.yaml:2: sandbox.suspend: "ram": must be memory or files`) {
		t.Errorf("bad value: %v", err)
	}
}
