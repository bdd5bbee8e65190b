package session

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/egress"
	"github.com/shellbox/shellbox/secrets"
	"github.com/shellbox/shellbox/session/sandboxconn"
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
	// Secrets resolves the secrets of policies' credentials
	// (sandbox.network.credentials). With CAs, the relay terminates TLS to
	// a credential's hosts and injects it; without either, credentials
	// give placeholders that open nothing.
	Secrets secrets.Source
	// CAs are the tenants' egress CAs and the placeholder key, kept on
	// this host (secrets.NewCAs).
	CAs *secrets.CAs
	// UpstreamRoots verify the upstreams of connections the relay
	// terminates; nil: the system's roots.
	UpstreamRoots *x509.CertPool

	blocked, grantBlocked egress.Ranges
	placeholders          *secrets.Placeholders
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
	if e.CAs != nil && e.placeholders == nil {
		key, err := e.CAs.PlaceholderKey()
		if err != nil {
			return err
		}
		ph := secrets.NewPlaceholders(key)
		e.placeholders = &ph
	}
	return nil
}

// Validate checks the ranges of e (for configuration loading).
func (e EgressConfig) Validate() error { return e.compile() }

// egressHook is a tenant's sandboxconn.EgressHook: it relays each
// sandbox's egress proxy (Relay) and gives its commands the variables of
// the tenant's credentials (Env).
type egressHook struct {
	l *Service

	mu    sync.Mutex
	ready map[string]chan struct{} // by sandbox ID: closed once the relay installed the CA, or failed to
}

// egressRelay returns the sandboxconn.Config.Egress hook.
func (l *Service) egressRelay() sandboxconn.EgressHook {
	return &egressHook{l: l, ready: map[string]chan struct{}{}}
}

// installed returns the channel closed when sb's relay has installed the
// tenant's CA in its agent (or failed to).
func (h *egressHook) installed(id string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch, ok := h.ready[id]
	if !ok {
		ch = make(chan struct{})
		h.ready[id] = ch
	}
	return ch
}

// Relay relays a sandbox's egress proxy until ctx ends.
//
//   - A connection of a call granted the network permission may go to any
//     address outside GrantBlocked, until the call ends.
//   - Any other goes where the tenant's current policy allows (looked up per
//     connection, so a reload applies at once): to an address the allowlist
//     names, or to a name whose addresses are outside Blocked.
//   - Either, to a host the current policy gives credentials or HTTP rules,
//     has its TLS terminated, the credentials injected and each request
//     judged by the rules (when the server has CAs; without, a host with
//     rules is refused: they could not be read).
func (h *egressHook) Relay(ctx context.Context, sb sandbox.Sandbox, granted func(credential string) (context.Context, bool)) {
	l := h.l
	log := l.log.With("tenant", sb.Tenant, "session", sb.Session)
	cfg := egress.RelayConfig{
		Agent:      sb.Agent,
		PollHeader: map[string]string{agentapi.HeaderProtocol: strconv.Itoa(agentapi.Protocol)},
		Check: egressDecision(l.cfg.Egress, func(target string) error { return l.checkEgress(sb.Tenant, target) }, granted,
			func(target string, granted bool) (*egress.Intercept, error) {
				return l.intercept(sb, target, granted, log)
			}),
		Logger: log,
	}
	if o := l.cfg.Metrics; o != nil {
		cfg.Observe = func(_ string, out egress.Outcome) { o.ObserveEgress(sb.Tenant, string(out)) }
	}
	if m := l.cfg.Usage; m != nil {
		cfg.Traffic = func(t egress.Traffic) { m.Egress(sb.Tenant, sb.Session, t.Requests, t.Sent, t.Received) }
	}
	if l.cfg.Policies != nil {
		// A connection not read as requests (refused, failed, tunnelled
		// blind) is one audit record: its target, bytes and time.
		cfg.Record = func(c egress.ConnRecord) {
			why := c.Reason
			if c.Outcome == egress.Failed {
				why = "failed: " + why
			}
			err := l.cfg.Policies.AuditEgress(sb.Tenant, sb.Session, policies.EgressRequest{Host: c.Target, Method: "CONNECT",
				BytesOut: c.Sent, BytesIn: c.Received, DurationMs: float64(c.Duration.Microseconds()) / 1000}, why)
			if err != nil {
				log.Warn("egress: auditing a connection", "err", err)
			}
		}
	}
	ready := h.installed(sb.ID)
	defer func() {
		h.mu.Lock()
		if h.ready[sb.ID] == ready {
			delete(h.ready, sb.ID)
		}
		h.mu.Unlock()
	}()
	if ca := l.egressCA(sb.Tenant, log); ca != nil {
		cfg.CA = ca.CertPEM()
		var once sync.Once
		cfg.Installed = func(error) { once.Do(func() { close(ready) }) }
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

// caWait bounds how long a command of a new sandbox waits for its relay to
// install the CA its credentials' hosts are shown.
const caWait = 10 * time.Second

// Env returns the variables of the tenant's current credentials for sb's
// commands: each credential's placeholder, and, when the server has CAs,
// the CA bundle's variables (egresswire.CAVars; they win over a policy's
// env). It waits up to caWait for the relay to have installed the CA, so
// a sandbox's first command finds the bundle.
func (h *egressHook) Env(sb sandbox.Sandbox) map[string]string {
	l := h.l
	if l.cfg.Policies == nil {
		return nil
	}
	pol, err := l.cfg.Policies.Policy(sb.Tenant)
	if err != nil || len(pol.Network.Credentials) == 0 && len(pol.Network.HTTP) == 0 {
		return nil
	}
	ec := l.cfg.Egress
	vars := map[string]string{}
	for _, c := range pol.Network.Credentials {
		if c.Placeholder == "" {
			continue
		}
		if ec.placeholders == nil {
			// No key: a placeholder of the moment, which opens nothing.
			vars[c.Placeholder] = secrets.PlaceholderPrefix + "unset"
			continue
		}
		vars[c.Placeholder] = ec.placeholders.For(sb.Tenant, sb.Session, c.Name)
	}
	if ec.CAs != nil && ec.Secrets != nil {
		select {
		case <-h.installed(sb.ID):
		case <-time.After(caWait):
			l.log.Warn("egress: the relay has not installed the CA yet; a command's TLS to a credential's host may fail", "tenant", sb.Tenant, "session", sb.Session)
		}
		maps.Copy(vars, egresswire.CAEnv(egresswire.CAFile))
	}
	return vars
}

// egressCA is the tenant's CA, nil when the server has none (logged).
func (l *Service) egressCA(tenant string, log *slog.Logger) *secrets.CA {
	ec := l.cfg.Egress
	if ec.CAs == nil || ec.Secrets == nil {
		return nil
	}
	ca, err := ec.CAs.For(tenant)
	if err != nil {
		log.Error("egress CA: credentials will not be injected", "err", err)
		return nil
	}
	return ca
}

// intercept returns the Intercept of a connection of sb to target when
// the tenant's current policy gives target's host credentials the server
// can inject (grantedOnly ones only to a granted call's connection), or
// HTTP rules; nil otherwise (a blind tunnel: placeholders go as is). A
// host with rules the server cannot read requests to (no CA) is an error:
// the connection is refused, not tunnelled unjudged.
func (l *Service) intercept(sb sandbox.Sandbox, target string, granted bool, log *slog.Logger) (*egress.Intercept, error) {
	ec := l.cfg.Egress
	if l.cfg.Policies == nil {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil || confine.IsAddress(target) {
		return nil, nil
	}
	pol, err := l.cfg.Policies.Policy(sb.Tenant)
	if err != nil {
		return nil, nil
	}
	rules, rulesKey := pol.Network.HTTPFor(host)
	var creds []policies.Credential
	if ec.placeholders != nil {
		creds = pol.Network.ForHost(host, granted)
	}
	if len(creds) == 0 && rules == nil {
		return nil, nil
	}
	ca := l.egressCA(sb.Tenant, log)
	if ca == nil {
		if rules != nil {
			return nil, fmt.Errorf("shellbox: egress to %s is not allowed: policy %s judges its requests by HTTP rules (%s), and this server has no egress CA to read them with", target, sb.Tenant, rulesKey)
		}
		return nil, nil
	}
	bound := make([]secrets.Credential, len(creds))
	for i, c := range creds {
		bound[i] = secrets.Credential{Name: c.Name, Header: c.Header, Value: c.Value}
		if c.Placeholder != "" {
			bound[i].Placeholder = ec.placeholders.For(sb.Tenant, sb.Session, c.Name)
		}
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	ic := &egress.Intercept{
		Host:      host,
		Cert:      func() (*tls.Certificate, error) { return ca.Leaf(host) },
		Roots:     ec.UpstreamRoots,
		Rules:     rules,
		RulesName: rulesKey,
		Observe: func(r egress.RequestRecord) {
			err := l.cfg.Policies.AuditEgress(sb.Tenant, sb.Session, policies.EgressRequest{Host: r.Host, Method: r.Method, Path: r.Path,
				Status: r.Status, BytesOut: r.BytesOut, BytesIn: r.BytesIn, DurationMs: float64(r.Duration.Microseconds()) / 1000,
				Credentials: r.Credentials, Rule: r.Rule, RuleText: r.RuleText}, r.Refused)
			if err != nil {
				log.Warn("egress: auditing a request", "err", err)
			}
		},
	}
	if len(creds) > 0 {
		inj := secrets.NewInjector(ec.Secrets, bound)
		ic.Rewrite = func(h http.Header) (func(http.Header), []string, error) {
			d, err := inj.Rewrite(h)
			return d.Scrub, d.Names, err
		}
	}
	return ic, nil
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

// egressDecision decides a sandbox's connections (see egressHook.Relay);
// intercept (nil: none) says whether an allowed one is terminated.
func egressDecision(ec EgressConfig, check func(target string) error, granted func(credential string) (context.Context, bool),
	intercept func(target string, granted bool) (*egress.Intercept, error)) func(egress.Conn) (egress.Decision, error) {
	return func(c egress.Conn) (egress.Decision, error) {
		var d egress.Decision
		until, isGranted := granted(c.Credential)
		if isGranted {
			d = egress.Decision{Addr: ec.grantBlocked.Refuse, Until: until}
		} else if err := check(c.Target); err != nil {
			return egress.Decision{}, err
		} else if !confine.IsAddress(c.Target) {
			d = egress.Decision{Addr: ec.blocked.Refuse}
		}
		// (Allowed, an address can only be one the allowlist names: the
		// operator meant it, and no address range is refused.)
		if intercept != nil {
			ic, err := intercept(c.Target, isGranted)
			if err != nil {
				return egress.Decision{}, err
			}
			d.Intercept = ic
		}
		return d, nil
	}
}
