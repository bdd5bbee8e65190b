package session

import (
	"context"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/usage"
)

// usageSource is the usage.Source of a Service's sandboxes: the Manager's
// running sandboxes (a claimed warm-pool sandbox under its session; an
// unclaimed one is nobody's use yet) and the runtime's readings.
type usageSource struct {
	m *sandbox.Manager
	r sandbox.UsageReader
}

func (u usageSource) Sandboxes(ctx context.Context) ([]usage.Sandbox, error) {
	list, err := u.m.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]usage.Sandbox, 0, len(list))
	for _, sb := range list {
		if sb.State == sandbox.StateRunning {
			out = append(out, usage.Sandbox{Tenant: sb.Tenant, Session: sb.Session, ID: sb.ID, Created: sb.Created})
		}
	}
	return out, nil
}

func (u usageSource) Read(ctx context.Context, id string) (usage.Counters, error) {
	return u.r.Usage(ctx, id)
}

// sampleUsage measures the sandboxes' use into Config.Usage until ctx
// ends, where the runtime can read it (Docker, containerd); it runs while
// this process leads, so that replicas sharing sandboxes count each once.
func (l *Service) sampleUsage(ctx context.Context) {
	r, ok := l.cfg.Runtime.(sandbox.UsageReader)
	if l.cfg.Usage == nil || !ok {
		return
	}
	if err := l.cfg.Usage.Load(ctx); err != nil {
		l.log.Warn("reading today's usage", "err", err)
	}
	usage.NewSampler(l.cfg.Usage, usageSource{m: l.manager, r: r}, l.cfg.UsageInterval, l.log).Run(ctx)
}
