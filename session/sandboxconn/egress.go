package sandboxconn

import (
	"context"
	"crypto/rand"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox"
)

// PermissionNetwork is the sandbox permission (a call's
// sandbox_permissions, once the policy granted it) that gives the call's
// process tree a credential at the sandbox's egress proxy (see
// Config.Egress).
const PermissionNetwork = egresswire.Permission

// EgressHook relays the egress of sandboxes whose network is
// sandbox.NetworkEgress (see Config.Egress).
type EgressHook interface {
	// Relay relays sb's egress proxy until ctx ends (sandbox/egress).
	// granted reports whether a connection's credential belongs to a call
	// of sb's session that runs with PermissionNetwork, and if so returns
	// a context that ends with the call (or background task).
	Relay(ctx context.Context, sb sandbox.Sandbox, granted func(credential string) (context.Context, bool))
	// Env returns variables every command of sb gets besides the proxy's
	// (credentials' placeholders, the egress CA bundle's); they win over
	// the spec's. It may wait briefly (for the relay to have installed
	// what they point at).
	Env(sb sandbox.Sandbox) map[string]string
}

// RelayFunc is an EgressHook that only relays: its commands get the
// proxy's variables alone.
type RelayFunc func(ctx context.Context, sb sandbox.Sandbox, granted func(credential string) (context.Context, bool))

// Relay calls f.
func (f RelayFunc) Relay(ctx context.Context, sb sandbox.Sandbox, granted func(credential string) (context.Context, bool)) {
	f(ctx, sb, granted)
}

// Env implements EgressHook: none.
func (RelayFunc) Env(sandbox.Sandbox) map[string]string { return nil }

// grant is a call's network grant: in force until its context ends.
type grant struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// connect wraps a new connection to sb's agent and starts the relay of its
// egress, for as long as the connection is kept. The caller holds c.mu.
func (c *Connections) connect(ag Agent, sb sandbox.Sandbox) *conn {
	ctx, cancel := context.WithCancel(c.life)
	cn := &conn{agent: ag, sb: sb, owner: c, stopEgress: cancel, egress: sb.Network == sandbox.NetworkEgress}
	if h, ok := ag.(interface{ Hello() agentapi.Hello }); ok {
		cn.noExecGuard = h.Hello().NoExecGuard
	}
	if cn.egress && c.egress != nil {
		cn.egressEnv = func() map[string]string { return c.egress.Env(sb) }
	}
	if cn.egress && c.egress != nil && !c.closed {
		session := sb.Session
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.egress.Relay(ctx, sb, func(credential string) (context.Context, bool) { return c.granted(session, credential) })
		}()
	}
	return cn
}

// Egress implements sandboxed.Conn: it points the command's HTTP clients
// at the sandbox's egress proxy, if it has one, and when the call holds
// PermissionNetwork gives it a credential of its own in spec.EgressGrant,
// which the agent binds to the command's process tree; release, nil
// without a credential, ends it. A call granted the network in a sandbox
// without a proxy (created while its policy gave no network) is refused:
// it would fail in ways that do not say why.
func (cn *conn) Egress(spec executor.Spec) (_ executor.Spec, release func(), _ error) {
	c := cn.owner
	if !cn.egress {
		if c.egress != nil && slices.Contains(spec.Permissions, PermissionNetwork) {
			return spec, nil, executor.Errorf(executor.ErrInvalid,
				"the network permission was granted, but session %s's sandbox has no egress proxy (it was created while its policy gave no network); delete the session to get a sandbox with one", spec.Session)
		}
		return spec, nil, nil
	}
	if slices.Contains(spec.Permissions, PermissionNetwork) {
		// The credential goes to the agent, not into the environment: its
		// proxy presents it only for connections of this command's tree.
		credential := rand.Text()
		c.grant(spec.Session, credential)
		release = sync.OnceFunc(func() { c.revoke(spec.Session, credential) })
		spec.EgressGrant = credential
	}
	vars := egresswire.Env(egresswire.DefaultListen)
	var extra map[string]string
	if cn.egressEnv != nil {
		// The hook's (credentials' placeholders, the CA bundle) win over
		// the spec's: a policy cannot point clients at another bundle.
		extra = cn.egressEnv()
		maps.Copy(vars, extra)
	}
	env := make([]string, 0, len(spec.Env)+len(vars))
	for _, kv := range spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		_, hooks := extra[k]
		switch _, ours := vars[k]; {
		case !ours:
			env = append(env, kv)
		case !hooks && (k == "NO_PROXY" || k == "no_proxy"):
			// The spec's (a policy's env) wins.
			env = append(env, kv)
			delete(vars, k)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	spec.Env = env
	return spec, release, nil
}

func (c *Connections) grant(session, credential string) {
	ctx, cancel := context.WithCancel(c.life)
	c.grantMu.Lock()
	defer c.grantMu.Unlock()
	if c.grants[session] == nil {
		c.grants[session] = map[string]grant{}
	}
	c.grants[session][credential] = grant{ctx: ctx, cancel: cancel}
}

// revoke ends a grant: its context ends, and with it the tunnels the relay
// opened for it.
func (c *Connections) revoke(session, credential string) {
	c.grantMu.Lock()
	defer c.grantMu.Unlock()
	if g, ok := c.grants[session][credential]; ok {
		g.cancel()
		delete(c.grants[session], credential)
	}
	if len(c.grants[session]) == 0 {
		delete(c.grants, session)
	}
}

// granted returns the context of session's grant named by credential, ok
// false when there is none in force.
func (c *Connections) granted(session, credential string) (context.Context, bool) {
	if credential == "" {
		return nil, false
	}
	c.grantMu.Lock()
	defer c.grantMu.Unlock()
	g, ok := c.grants[session][credential]
	return g.ctx, ok
}
