package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/egress"
)

// egressRelay returns a sandboxed.Config.Egress hook: it relays a sandbox's
// egress proxy until ctx ends. A connection of a call granted the network
// permission may go anywhere; any other goes where check allows (the
// tenant's current policy, looked up per connection so a reload applies at
// once). observe, if set, counts each connection's outcome.
func egressRelay(log *slog.Logger, check func(tenant, target string) error, observe func(tenant, outcome string)) func(context.Context, sandbox.Sandbox, func(string) bool) {
	return func(ctx context.Context, sb sandbox.Sandbox, granted func(credential string) bool) {
		cfg := egress.RelayConfig{
			Socket: sb.SocketPath,
			Check: func(c egress.Conn) error {
				if granted(c.Credential) {
					return nil
				}
				return check(sb.Tenant, c.Target)
			},
			Logger: log.With("tenant", sb.Tenant, "session", sb.Session),
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
