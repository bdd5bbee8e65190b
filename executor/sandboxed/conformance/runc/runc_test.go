// Package runc runs the executor conformance suite with every session in
// its own runc container, on every engine (Docker, containerd) (sandboxedtest.Conformance says why the suite is
// split over three packages).
package runc_test

import (
	"testing"

	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
)

func TestMain(m *testing.M) { dockertest.Main(m) }

// TestConformanceRunc runs the suite under runc on every engine.
func TestConformanceRunc(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) { sandboxedtest.Conformance(t, e, sandbox.RuntimeRunc) })
}
