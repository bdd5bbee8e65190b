package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/server"
)

// Defaults are the sandbox settings a session gets where its tenant's
// policy says nothing (a tenant without a policy: all of them).
type Defaults struct {
	Image   string
	Runtime string
	confine.Resources
	// Labels are extra labels on every sandbox.
	Labels map[string]string
}

// DefaultsFor is the Defaults of sandbox.DefaultSpec with image.
func DefaultsFor(image string) Defaults {
	d := sandbox.DefaultSpec("t", "s")
	return Defaults{Image: image, Runtime: d.Runtime, Resources: d.Resources}
}

// Choices are what a session of a tenant without a policy may ask for: the
// first of each is the tenant's default. Empty: Defaults' only.
type Choices struct {
	Images   []string
	Runtimes []string
}

// errNoMountAllowlist refuses mounts on a layer without policies: the
// allowlist is the policy's sandbox.mounts, so nothing may be mounted.
var errNoMountAllowlist = server.Errorf(server.ErrNotAllowed,
	"mounts need an allowlist, and this server has none: set policies.dir and list the directories in the tenant's sandbox.mounts")

// spec is the sandbox spec of a session: the options it was created with
// (settings), within the tenant's policy, over the defaults. It also
// enforces the tenant's session quota. Errors wrap the server's classes.
//
// The tenant's sandboxes (for the session quota) are listed while the
// session's settings are read, not after: a new session's first call
// needs both, and on Kubernetes each is API round trips.
func (l *Service) spec(ctx context.Context, tenant, session string) (sandbox.Spec, error) {
	if err := l.specUsable(session); err != nil {
		return sandbox.Spec{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a list not awaited (an error before the count) ends
	var list sandboxList
	if l.cfg.Policies != nil {
		list = l.listAhead(ctx)
	}
	o, err := l.settings(ctx, tenant, session)
	if err != nil {
		return sandbox.Spec{}, err
	}
	return l.specListed(ctx, tenant, session, o, list)
}

// sandboxList returns the Manager's list of sandboxes, read once.
type sandboxList func() ([]sandbox.Sandbox, error)

// listAhead starts listing the Manager's sandboxes under ctx and returns
// the wait for that list.
func (l *Service) listAhead(ctx context.Context) sandboxList {
	type listed struct {
		list []sandbox.Sandbox
		err  error
	}
	ch := make(chan listed, 1) // buffered: the lister never blocks
	go func() {
		list, err := l.manager.List(ctx)
		ch <- listed{list, err}
	}()
	var once sync.Once
	var got listed
	return func() ([]sandbox.Sandbox, error) {
		once.Do(func() { got = <-ch })
		return got.list, got.err
	}
}

func (l *Service) specUsable(session string) error {
	if l.cfg.Unavailable != nil {
		return server.Errorf(server.ErrUnavailable, "%v", l.cfg.Unavailable)
	}
	if sandbox.IsPooled(session) {
		return server.Errorf(server.ErrInvalid, "session %q: names starting with %q are reserved for warm pools", session, sandbox.PoolPrefix)
	}
	return nil
}

// specWith is spec with the session's options o.
func (l *Service) specWith(ctx context.Context, tenant, session string, o server.SessionOptions) (sandbox.Spec, error) {
	return l.specListed(ctx, tenant, session, o, nil)
}

// specListed is specWith with the Manager's sandboxes listed by list (nil:
// listed when the quota is checked).
func (l *Service) specListed(ctx context.Context, tenant, session string, o server.SessionOptions, list sandboxList) (sandbox.Spec, error) {
	if err := l.specUsable(session); err != nil {
		return sandbox.Spec{}, err
	}
	d := l.cfg.Defaults
	opts := []sandbox.Opt{
		sandbox.WithResources(d.Resources), sandbox.WithLabels(d.Labels),
	}
	if l.cfg.Policies == nil {
		if len(o.Mounts) > 0 {
			return sandbox.Spec{}, errNoMountAllowlist
		}
		img, err := choose("image", tenant, o.Image, l.cfg.Choices[tenant].Images, d.Image)
		if err != nil {
			return sandbox.Spec{}, err
		}
		rt, err := choose("runtime", tenant, o.Runtime, l.cfg.Choices[tenant].Runtimes, d.Runtime)
		if err != nil {
			return sandbox.Spec{}, err
		}
		opts = append(opts, sandbox.WithImage(img), sandbox.WithRuntime(rt), withRecord(o))
		return newSpec(tenant, session, opts)
	}
	pol, err := l.cfg.Policies.Policy(tenant)
	if err != nil {
		return sandbox.Spec{}, server.Errorf(server.ErrNotAllowed, "%v", err)
	}
	if err := checkChoices(pol, o, d.Image); err != nil {
		return sandbox.Spec{}, err
	}
	if list == nil {
		list = func() ([]sandbox.Sandbox, error) { return l.manager.List(ctx) }
	}
	if err := checkSessions(list, pol, tenant, session); err != nil {
		return sandbox.Spec{}, err
	}
	return l.policySpec(tenant, session, o, pol)
}

// settings returns what the session asked for when it was created
// (CreateSession). The record its sandbox keeps (sandbox.Spec.Settings)
// comes first: it is the same for every server replica, and outlives a
// restart; a session created through another replica, or deleted and
// created anew there, is made as it asked there. Without a sandbox, or
// one made before records were kept, this process's own record answers.
// A session that asked for nothing has none.
func (l *Service) settings(ctx context.Context, tenant, session string) (server.SessionOptions, error) {
	sb, err := l.manager.Inspect(ctx, tenant, session)
	switch {
	case err == nil && sb.Settings != "":
		var o server.SessionOptions
		if err := json.Unmarshal([]byte(sb.Settings), &o); err != nil {
			return server.SessionOptions{}, server.Errorf(server.ErrUnavailable,
				"session %s: the settings its sandbox %s keeps (%s) are unreadable: %v; delete the session to start it afresh",
				session, sb.ID, sandbox.LabelSettings, err)
		}
		return o, nil
	case err != nil && !errors.Is(err, sandbox.ErrNotFound):
		return server.SessionOptions{}, server.Errorf(server.ErrUnavailable, "session %s: reading its settings from its sandbox: %v", session, err)
	}
	if o, ok := l.ownSettings(tenant, session); ok {
		return o, nil
	}
	if l.cfg.Snapshots != nil && l.cfg.Ready == nil {
		// A suspended session's sandbox is gone: its record keeps what
		// it asked for. Its Resume claims from this read, not another.
		r, version, ok, err := l.recordAt(ctx, tenant, session)
		if err != nil {
			return server.SessionOptions{}, server.Errorf(server.ErrUnavailable, "session %s: reading its settings from its record: %v", session, err)
		}
		if ok {
			l.noteRecord(tenant, session, r, version)
		}
		if ok && r.Settings != nil {
			return *r.Settings, nil
		}
	}
	return server.SessionOptions{}, nil
}

// ownSettings is this process's record of what the session asked for.
func (l *Service) ownSettings(tenant, session string) (server.SessionOptions, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.opts[tenant+"/"+session]
	return o, ok
}

// withRecord keeps o with the sandbox (sandbox.WithSettings) so that any
// server process makes the session's next sandbox as it asked; a session
// that asked for nothing keeps no record.
func withRecord(o server.SessionOptions) sandbox.Opt {
	if o.Image == "" && o.Runtime == "" && o.Mounts == nil {
		return sandbox.WithSettings("")
	}
	b, err := json.Marshal(o)
	if err != nil {
		return func(*sandbox.Spec) error { return fmt.Errorf("session settings: %w", err) }
	}
	return sandbox.WithSettings(string(b))
}

// checkChoices refuses a session's runtime or image the policy does not
// allow.
func checkChoices(pol *policies.Policy, o server.SessionOptions, defImage string) error {
	if o.Runtime != "" && o.Runtime != pol.Runtime {
		return server.Errorf(server.ErrNotAllowed, "runtime %s is not allowed by policy %s (sandbox.runtime: %s)", o.Runtime, pol.Tenant, pol.Runtime)
	}
	if _, err := pol.Image(o.Image, defImage); err != nil {
		return server.Errorf(server.ErrNotAllowed, "%v", err)
	}
	return nil
}

// policySpec is the spec of a session of a tenant with a policy, created
// with options o, over the defaults; the session quota is not checked
// here. A warm pool's template is one with no options (PoolTargets).
func (l *Service) policySpec(tenant, session string, o server.SessionOptions, pol *policies.Policy) (sandbox.Spec, error) {
	d := l.cfg.Defaults
	if err := checkChoices(pol, o, d.Image); err != nil {
		return sandbox.Spec{}, err
	}
	img, err := pol.Image(o.Image, d.Image)
	if err != nil {
		return sandbox.Spec{}, server.Errorf(server.ErrNotAllowed, "%v", err)
	}
	opts := []sandbox.Opt{
		sandbox.WithResources(d.Resources), sandbox.WithLabels(d.Labels),
	}
	mounts, err := pol.SessionMounts(mountRequests(o.Mounts))
	if err != nil {
		switch {
		case errors.Is(err, policies.ErrNotAllowed):
			return sandbox.Spec{}, server.Errorf(server.ErrNotAllowed, "%v", err)
		case errors.Is(err, policies.ErrUnavailable):
			return sandbox.Spec{}, server.Errorf(server.ErrUnavailable, "%v", err)
		}
		return sandbox.Spec{}, server.Errorf(server.ErrInvalid, "%v", err)
	}
	opts = append(opts, sandbox.WithImage(img))
	opts = append(opts, policyOptions(pol.Sandbox())...)
	opts = append(opts, withRecord(o), sandbox.WithMounts(sandboxMounts(mounts)...),
		// The agent drops to the policy's user for commands (Spec.UID only
		// owns /workspace).
		sandbox.WithAgentArgs("--uid", strconv.Itoa(pol.User.UID), "--gid", strconv.Itoa(pol.User.GID)))
	spec, err := newSpec(tenant, session, opts)
	if err != nil {
		return sandbox.Spec{}, fmt.Errorf("policy %s: %w", pol.Tenant, err)
	}
	return spec, nil
}

// policyOptions are the spec options of a policy's sandbox settings: the
// one place a tenant's policy becomes sandbox settings.
func policyOptions(s policies.SandboxSettings) []sandbox.Opt {
	network := sandbox.NetworkNone
	if s.Egress {
		network = sandbox.NetworkEgress
	}
	return []sandbox.Opt{
		sandbox.WithNetwork(network),
		sandbox.WithRuntime(s.Runtime),
		sandbox.WithResources(s.Resources()),
		sandbox.WithUser(s.User.UID, s.User.GID),
	}
}

// sandboxMounts are a session's mounts as the policy allowed them.
func sandboxMounts(ms []policies.Mount) []sandbox.Mount {
	out := make([]sandbox.Mount, len(ms))
	for i, m := range ms {
		out[i] = sandbox.Mount{Source: m.Source, Root: m.Root, Target: m.Target, ReadOnly: m.ReadOnly}
	}
	return out
}

func newSpec(tenant, session string, opts []sandbox.Opt) (sandbox.Spec, error) {
	spec, err := sandbox.NewSpec(tenant, session, opts...)
	if err != nil {
		return sandbox.Spec{}, server.Errorf(server.ErrInvalid, "%v", err)
	}
	return spec, nil
}

// checkSessions refuses a new session past the policy's limits.sessions:
// the tenant's sandboxes of this owner on the engine are counted (those of
// other processes of the owner too), the session's own (being re-adopted)
// excepted.
func checkSessions(listed sandboxList, pol *policies.Policy, tenant, session string) error {
	// The Manager's list: claimed pool sandboxes under their sessions,
	// unclaimed ones (nobody's session) not at all.
	list, err := listed()
	if err != nil {
		return server.Errorf(server.ErrUnavailable, "count the tenant's sessions: %v", err)
	}
	n := 0
	for _, sb := range list {
		if sb.Tenant != tenant {
			continue
		}
		if sb.Session == session {
			return nil // exists: not a new session
		}
		n++
	}
	if err := pol.CheckSessions(n); err != nil {
		return server.Errorf(server.ErrNotAllowed, "%v", err)
	}
	return nil
}

func choose(what, tenant, asked string, allowed []string, def string) (string, error) {
	if len(allowed) == 0 {
		allowed = []string{def}
	}
	if asked == "" {
		return allowed[0], nil
	}
	if !slices.Contains(allowed, asked) {
		return "", server.Errorf(server.ErrNotAllowed, "%s %q is not allowed for tenant %s (allowed: %v)", what, asked, tenant, allowed)
	}
	return asked, nil
}

// mountRequests are a session's requested mounts as the policy checks them:
// nil stays nil (the policy's mounts), readOnly defaults to true.
func mountRequests(ms []server.Mount) []policies.MountRequest {
	if ms == nil {
		return nil
	}
	out := make([]policies.MountRequest, len(ms))
	for i, m := range ms {
		out[i] = policies.MountRequest{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly == nil || *m.ReadOnly}
	}
	return out
}
