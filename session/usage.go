package session

import (
	"context"
	"errors"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/tools"
	"github.com/shellbox/shellbox/usage"
)

// usageSource is the usage.Source of a Service's sandboxes: the Manager's
// running sandboxes (a claimed warm-pool sandbox under its session; an
// unclaimed one is nobody's use yet) and the runtime's readings.
type usageSource struct {
	m *sandbox.Manager
	r sandbox.UsageReader
	l *Service
}

var (
	_ usage.SuspendedLister = usageSource{}
	_ usage.WorkspaceSource = usageSource{}
)

// Workspace implements usage.WorkspaceSource through the runtime: by the
// sandbox where it measures that way (sandbox.SandboxWorkspaceReader:
// Kubernetes), else by its session (sandbox.WorkspaceReader: Docker,
// containerd); ErrUnsupported where it has neither.
func (u usageSource) Workspace(ctx context.Context, sb usage.Sandbox) (int64, time.Time, error) {
	if w, ok := u.r.(sandbox.SandboxWorkspaceReader); ok {
		return w.SandboxWorkspaceUsage(ctx, sb.ID)
	}
	w, ok := u.r.(sandbox.WorkspaceReader)
	if !ok {
		return 0, time.Time{}, errors.ErrUnsupported
	}
	n, err := w.WorkspaceUsage(ctx, sb.Tenant, sb.Session)
	return n, time.Time{}, err
}

// Suspended implements usage.SuspendedLister: the sessions the snapshot
// store records suspended (one listing of the records per pass; none
// without a store).
func (u usageSource) Suspended(ctx context.Context) ([]usage.Sandbox, error) {
	list, err := u.l.Suspended(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]usage.Sandbox, 0, len(list))
	for _, si := range list {
		out = append(out, usage.Sandbox{Tenant: si.Tenant, Session: si.ID, Created: si.Suspended})
	}
	return out, nil
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
// ends, where the runtime can read it (Docker, containerd, Kubernetes);
// it runs while this process leads, so that replicas sharing sandboxes
// count each once.
func (l *Service) sampleUsage(ctx context.Context) {
	r, ok := l.cfg.Runtime.(sandbox.UsageReader)
	if l.cfg.Usage == nil || !ok {
		return
	}
	if err := l.cfg.Usage.Load(ctx); err != nil {
		l.log.Warn("reading today's usage", "err", err)
	}
	usage.NewSampler(l.cfg.Usage, usageSource{m: l.manager, r: r, l: l}, l.cfg.UsageInterval, l.log).Run(ctx)
}

// usageGate refuses a command of a tenant past its policy's daily usage
// limits, before the policy decides (an ask would wait for a human only to
// be refused). Only new commands pass a gate: what runs is not stopped,
// and bash_output and bash_kill still answer.
type usageGate struct {
	next     tools.Gate
	meter    *usage.Meter
	policies *policies.Engine
}

func (g usageGate) Check(ctx context.Context, c tools.Call) (executor.Request, error) {
	if p, err := g.policies.Policy(c.Tenant); err == nil {
		if err := g.meter.Check(c.Tenant, p.UsageLimits); err != nil {
			return c.Request, err
		}
	}
	return g.next.Check(ctx, c)
}
