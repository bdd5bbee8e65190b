package containerd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// BenchmarkCreate measures a new session's sandbox: Create, then the
// agent's hello on its socket (what a first command waits for), then
// Remove, apart.
func BenchmarkCreate(b *testing.B) {
	addr := containerdtest.Address(b)
	for _, runtime := range runtimes {
		b.Run(runtime, func(b *testing.B) {
			rt := containerdtest.New(b, containerdtest.Config(b, addr), runtime)
			owner := dockertest.Owner(b)
			tenant := dockertest.Tenant("ctrd-bench")
			ctx := context.Background()
			i := 0
			for b.Loop() {
				sb, err := rt.Create(ctx, spec(b, runtime, tenant, fmt.Sprintf("b%d", i), owner))
				if err != nil {
					b.Fatal(err)
				}
				dial(b, sb, 30*time.Second).Close()
				b.StopTimer()
				if err := rt.Remove(ctx, sb.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				i++
			}
		})
	}
}
