package main

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"github.com/shellbox/shellbox/executor/agentapi"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/egress"
)

// egressRelay returns a sandboxed.Config.Egress hook: it relays a sandbox's
// egress proxy until ctx ends.
//
//   - A connection of a call granted the network permission may go to any
//     address outside ec's grantBlocked ranges, until the call ends.
//   - Any other goes where check allows (the tenant's current policy, looked
//     up per connection so a reload applies at once): to an address the
//     allowlist names, or to a name whose addresses are outside ec's
//     blocked ranges.
//
// observe, if set, counts each connection's outcome.
func egressRelay(log *slog.Logger, ec EgressConfig, check func(tenant, target string) error, observe func(tenant, outcome string)) func(context.Context, sandbox.Sandbox, func(string) (context.Context, bool)) {
	return func(ctx context.Context, sb sandbox.Sandbox, granted func(credential string) (context.Context, bool)) {
		cfg := egress.RelayConfig{
			Agent:      sb.Agent,
			PollHeader: map[string]string{agentapi.HeaderProtocol: strconv.Itoa(agentapi.Protocol)},
			Check:      egressDecision(ec, func(target string) error { return check(sb.Tenant, target) }, granted),
			Logger:     log.With("tenant", sb.Tenant, "session", sb.Session),
		}
		if observe != nil {
			cfg.Observe = func(_ string, o egress.Outcome) { observe(sb.Tenant, string(o)) }
		}
		r, err := egress.NewRelay(cfg)
		if err != nil {
			log.Error("egress relay", "tenant", sb.Tenant, "session", sb.Session, "err", err)
			return
		}
		if err := r.Run(ctx); err != nil {
			level := slog.LevelError
			if errors.Is(err, egress.ErrNoProxy) {
				// A sandbox created by an older agent: it keeps no network.
				level = slog.LevelWarn
			}
			log.Log(context.Background(), level, "egress relay stopped", "tenant", sb.Tenant, "session", sb.Session, "err", err)
		}
	}
}

// egressDecision decides a sandbox's connections (see egressRelay).
func egressDecision(ec EgressConfig, check func(target string) error, granted func(credential string) (context.Context, bool)) func(egress.Conn) (egress.Decision, error) {
	return func(c egress.Conn) (egress.Decision, error) {
		if until, ok := granted(c.Credential); ok {
			return egress.Decision{Addr: ec.grantBlocked.Refuse, Until: until}, nil
		}
		if err := check(c.Target); err != nil {
			return egress.Decision{}, err
		}
		if egress.IsAddress(c.Target) {
			// Allowed, an address can only be one the allowlist names: the
			// operator meant it.
			return egress.Decision{}, nil
		}
		return egress.Decision{Addr: ec.blocked.Refuse}, nil
	}
}
