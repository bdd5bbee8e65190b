package apiserver_test

import (
	"testing"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
)

// TestConformance runs the conformance suite through the protocol: a local
// executor behind a Server, driven by a Client, with Resolve done on the
// client's side as the sandboxed executor does it. Every golden text must
// come out unchanged: the protocol loses nothing.
func TestConformance(t *testing.T) {
	root, home := t.TempDir(), t.TempDir()
	executortest.Run(t, executortest.Harness{
		New: func(t *testing.T, lim executor.Limits) executor.BashExecutor {
			a := newAgent(t, lim, root, home)
			env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "DSH_HOME=" + home, "LANG=C.UTF-8"}
			return viaAgent{Client: a.client, lim: lim, root: root, env: env}
		},
		Root: executortest.FixedRoot(root),
		Home: home,
		// The agent's executor runs in this process: its heap is measured.
		InProcess: true,
	})
}
