// Package conformance runs the executor conformance suite with every
// session in its own container, on every engine (Docker, containerd) and
// both runtimes (runc, gVisor). It is a package of its own so that its
// test binary (minutes: every case starts containers) runs beside
// executor/sandboxed's hostile, egress, pool and workspace tests, each
// under its own timeout.
package conformance_test

import (
	"sync"
	"testing"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
)

// The suite runs at go test's parallelism (GOMAXPROCS): with 4 cases at a
// time on the 2-core machine, a case whose command must print 100 lines
// within a 500 ms timeout printed none.
func TestMain(m *testing.M) { dockertest.Main(m) }

func conformance(t *testing.T, e enginetest.Engine, runtime string) {
	var rigs sync.Map // executor.BashExecutor → *sandboxedtest.Rig
	executortest.Run(t, executortest.Harness{
		New: func(t *testing.T, lim executor.Limits) executor.BashExecutor {
			// Room for the suite's 100 MB spill in one session.
			r := sandboxedtest.New(t, e, runtime, lim, sandbox.WithSpillSize(256*sandbox.MiB))
			rigs.Store(r.Exec, r)
			return r.Exec
		},
		Root: executortest.FixedRoot("/workspace"),
		// DSH_HOME differs from the root so the suite can tell them apart.
		Home: "/home/sandbox",
		EndSession: func(e executor.BashExecutor, session string) {
			if r, ok := rigs.Load(e); ok {
				r.(*sandboxedtest.Rig).EndSession(session)
			}
		},
	})
}

// TestConformanceRunc runs the conformance suite, unchanged, with every
// session in its own runc container, on every engine.
func TestConformanceRunc(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) { conformance(t, e, sandbox.RuntimeRunc) })
}

// TestConformanceRunsc runs it under gVisor.
func TestConformanceRunsc(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) { conformance(t, e, sandbox.RuntimeRunsc) })
}
