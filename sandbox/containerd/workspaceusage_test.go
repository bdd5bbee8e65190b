package containerd_test

import (
	"context"
	"math"
	"testing"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// TestWorkspaceUsageMeasuresAKnownWrite writes 10 MiB to a sandbox's
// /workspace and finds them in WorkspaceUsage within 5%, the issue's
// bound.
func TestWorkspaceUsageMeasuresAKnownWrite(t *testing.T) {
	addr := containerdtest.Address(t)
	rt := containerdtest.New(t, containerdtest.Config(t, addr), sandbox.RuntimeRunc)
	s := spec(t, sandbox.RuntimeRunc, dockertest.Tenant("ctrd-wsusage"), "w", dockertest.Owner(t))
	ctx := context.Background()
	sb, err := rt.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rt.Remove(context.Background(), sb.ID)
		_, _ = rt.RemoveSession(context.Background(), sb.Tenant, sb.Session)
	})
	exec(t, sb, "true") // the agent answers
	before, err := rt.WorkspaceUsage(ctx, sb.Tenant, sb.Session)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, sb, "head -c 10485760 /dev/urandom > /workspace/f")
	after, err := rt.WorkspaceUsage(ctx, sb.Tenant, sb.Session)
	if err != nil {
		t.Fatal(err)
	}
	mib := float64(after-before) / (1 << 20)
	t.Logf("10 MiB written to /workspace: %.3f MiB more used (%d bytes before)", mib, before)
	if math.Abs(mib-10) > 10*0.05 {
		t.Errorf("the workspace grew by %.3f MiB for 10 MiB written, want 10 within 5%%", mib)
	}
}
