// Package runscdocker runs the executor conformance suite with every session in
// its own gVisor container on the Docker engine (sandboxedtest.Conformance says why the suite is
// split over three packages).
package runscdocker_test

import (
	"testing"

	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
)

func TestMain(m *testing.M) { dockertest.Main(m) }

// TestConformanceRunsc runs the suite under gVisor on Docker.
func TestConformanceRunsc(t *testing.T) {
	sandboxedtest.Conformance(t, enginetest.Docker, sandbox.RuntimeRunsc)
}
