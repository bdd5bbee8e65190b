package sandbox

import (
	"context"
	"time"

	"github.com/shellbox/shellbox/usage"
)

// UsageReader is an optional Runtime ability: reading a sandbox's own
// counters from its cgroup as the engine keeps them (CPU time, memory in
// use and its peak), for the usage Sampler. One call is one engine
// request; ErrNotFound for a sandbox that is gone.
type UsageReader interface {
	Usage(ctx context.Context, id string) (usage.Counters, error)
}

// WorkspaceReader is an optional Runtime ability: measuring the bytes a
// session's workspace holds, at a small bounded cost (a statfs of its own
// file system, never a walk of its files), for the usage Sampler.
// ErrNotFound: the session has no workspace this runtime can measure.
type WorkspaceReader interface {
	WorkspaceUsage(ctx context.Context, tenant, session string) (int64, error)
}

// SandboxWorkspaceReader is WorkspaceReader for a runtime that measures a
// workspace by its sandbox (Kubernetes: a claimed warm-pool pod is not
// named after its session), with when it was measured (the kubelet's
// time). The usage source asks it first, then WorkspaceReader.
type SandboxWorkspaceReader interface {
	SandboxWorkspaceUsage(ctx context.Context, id string) (int64, time.Time, error)
}
