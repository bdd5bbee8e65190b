package notrace

import (
	"os"
	"testing"
)

// TestMain runs notraceHelper instead of the tests in the child the
// notrace tests start (notraceHelperEnv).
func TestMain(m *testing.M) {
	if os.Getenv(notraceHelperEnv) != "" {
		os.Exit(notraceHelper())
	}
	os.Exit(m.Run())
}
