package agentapi_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/shellbox/shellbox/executor"
)

// BenchmarkRunTrue: the protocol's own cost. A foreground `bash -c true` run
// by a local executor directly, through the protocol (server and client in
// this process, over a unix socket), and by os/exec alone.
func BenchmarkRunTrue(b *testing.B) {
	a := newAgent(b, testLimits(), b.TempDir(), b.TempDir())
	spec := a.spec(b, executor.Request{Command: "true"})
	ctx := context.Background()
	b.Run("exec", func(b *testing.B) {
		for range b.N {
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("local", func(b *testing.B) {
		for range b.N {
			if _, err := a.exec.Run(ctx, spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protocol", func(b *testing.B) {
		for range b.N {
			if _, err := a.client.Run(ctx, spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
