package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/egress"
)

// EgressConfig bounds where sandboxes' egress may lead from this host,
// whatever the policies allow (sandbox/egress).
type EgressConfig struct {
	// Blocked are address ranges never dialled for a sandbox, but for an
	// address a policy's allowlist names literally: checked on the
	// addresses names resolve to. Nil: egress.HostRanges.
	Blocked []string
	// GrantBlocked are refused, with Blocked, to a call granted the
	// network permission. Nil: egress.PrivateRanges.
	GrantBlocked []string

	blocked, grantBlocked egress.Ranges
}

// compile parses the ranges; the error names the bad entry.
func (e *EgressConfig) compile() error {
	if e.Blocked == nil {
		e.Blocked = egress.HostRanges
	}
	if e.GrantBlocked == nil {
		e.GrantBlocked = egress.PrivateRanges
	}
	var err error
	if e.blocked, err = egress.ParseRanges(e.Blocked); err != nil {
		return fmt.Errorf("blocked: %w", err)
	}
	// Checked on their own first, so an error numbers the entry as the
	// file does.
	if _, err := egress.ParseRanges(e.GrantBlocked); err != nil {
		return fmt.Errorf("grantBlocked: %w", err)
	}
	if e.grantBlocked, err = egress.ParseRanges(append(slices.Clone(e.Blocked), e.GrantBlocked...)); err != nil {
		return fmt.Errorf("grantBlocked: %w", err)
	}
	return nil
}

// Validate checks the ranges of e (for configuration loading).
func (e EgressConfig) Validate() error { return e.compile() }

// egressRelay returns the sandboxconn.Config.Egress hook: it relays a
// sandbox's egress proxy until ctx ends.
//
//   - A connection of a call granted the network permission may go to any
//     address outside GrantBlocked, until the call ends.
//   - Any other goes where the tenant's current policy allows (looked up per
//     connection, so a reload applies at once): to an address the allowlist
//     names, or to a name whose addresses are outside Blocked.
func (l *Service) egressRelay() func(context.Context, sandbox.Sandbox, func(string) (context.Context, bool)) {
	return func(ctx context.Context, sb sandbox.Sandbox, granted func(credential string) (context.Context, bool)) {
		log := l.log.With("tenant", sb.Tenant, "session", sb.Session)
		cfg := egress.RelayConfig{
			Agent:      sb.Agent,
			PollHeader: map[string]string{agentapi.HeaderProtocol: strconv.Itoa(agentapi.Protocol)},
			Check:      egressDecision(l.cfg.Egress, func(target string) error { return l.checkEgress(sb.Tenant, target) }, granted),
			Logger:     log,
		}
		if o := l.cfg.Metrics; o != nil {
			cfg.Observe = func(_ string, out egress.Outcome) { o.ObserveEgress(sb.Tenant, string(out)) }
		}
		r, err := egress.NewRelay(cfg)
		if err != nil {
			log.Error("egress relay", "err", err)
			return
		}
		if err := r.Run(ctx); err != nil {
			level := slog.LevelError
			if errors.Is(err, egress.ErrNoProxy) {
				// A sandbox created by an older agent: it keeps no network.
				level = slog.LevelWarn
			}
			log.Log(context.Background(), level, "egress relay stopped", "err", err)
		}
	}
}

// checkEgress decides a connection of a tenant's sandbox by the tenant's
// current policy; without policies nothing is allowed (such sandboxes have
// no proxy anyway).
func (l *Service) checkEgress(tenant, target string) error {
	if l.cfg.Policies == nil {
		return fmt.Errorf("shellbox: egress to %s is not allowed: the server has no policies (policies.dir)", target)
	}
	pol, err := l.cfg.Policies.Policy(tenant)
	if err != nil {
		return fmt.Errorf("shellbox: egress to %s is not allowed: %v", target, err)
	}
	return pol.CheckEgress(target)
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
		if confine.IsAddress(c.Target) {
			// Allowed, an address can only be one the allowlist names: the
			// operator meant it.
			return egress.Decision{}, nil
		}
		return egress.Decision{Addr: ec.blocked.Refuse}, nil
	}
}
