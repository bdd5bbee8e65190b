package docker_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// TestWorkspaceUsageMeasuresAKnownWrite writes 10 MiB to a sandbox's
// /workspace and finds them in WorkspaceUsage within 5%, the issue's
// bound; a session without a workspace is not found.
func TestWorkspaceUsageMeasuresAKnownWrite(t *testing.T) {
	e := newEnv(t, sandbox.RuntimeRunc)
	spec := e.spec("wsusage")
	sb := e.ensure(spec)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, err := e.rt.WorkspaceUsage(ctx, sb.Tenant, sb.Session)
	if err != nil {
		t.Fatal(err)
	}
	// As the sandbox's user, who owns /workspace.
	if resp := e.run(sb, spec.UID, "head -c 10485760 /dev/urandom > /workspace/f", time.Minute); resp.ExitCode != 0 {
		t.Fatalf("writing the workspace: %+v", resp)
	}
	after, err := e.rt.WorkspaceUsage(ctx, sb.Tenant, sb.Session)
	if err != nil {
		t.Fatal(err)
	}
	mib := float64(after-before) / (1 << 20)
	t.Logf("10 MiB written to /workspace: %.3f MiB more used (%d bytes before)", mib, before)
	if math.Abs(mib-10) > 10*0.05 {
		t.Errorf("the workspace grew by %.3f MiB for 10 MiB written, want 10 within 5%%", mib)
	}
	if _, err := e.rt.WorkspaceUsage(ctx, sb.Tenant, "no-such-session"); err == nil {
		t.Error("WorkspaceUsage of a session without a workspace: no error")
	}
}
