// Package runsccontainerd runs the executor conformance suite with every session in
// its own gVisor container on containerd. The suite is split over packages, conformance/runc (both engines), conformance/runscdocker and conformance/runsccontainerd,
// so that each test binary runs under its own timeout: as one package
// (Docker and containerd, runc and gVisor) it ran into go test's
// 15-minute timeout on the 2-core CI machine beside the other packages,
// gVisor on both engines alone taking over 11 minutes there. Go test's
// parallelism (GOMAXPROCS) stays: with 4 cases at a time on 2 cores, a
// case whose command must print 100 lines within a 500 ms timeout printed
// none.
package runsccontainerd_test

import (
	"testing"

	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
)

func TestMain(m *testing.M) { dockertest.Main(m) }

// TestConformanceRunsc runs the suite under gVisor on containerd.
func TestConformanceRunsc(t *testing.T) {
	sandboxedtest.Conformance(t, enginetest.Containerd, sandbox.RuntimeRunsc)
}
