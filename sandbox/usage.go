package sandbox

import (
	"context"

	"github.com/shellbox/shellbox/usage"
)

// UsageReader is an optional Runtime ability: reading a sandbox's own
// counters from its cgroup as the engine keeps them (CPU time, memory in
// use and its peak), for the usage Sampler. One call is one engine
// request; ErrNotFound for a sandbox that is gone.
type UsageReader interface {
	Usage(ctx context.Context, id string) (usage.Counters, error)
}
