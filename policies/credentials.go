package policies

import (
	"fmt"
	"net"
	"net/textproto"
	"regexp"
	"slices"
	"strings"

	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/secrets"
)

// maxCredentials bounds a policy's sandbox.network.credentials, and
// maxCredentialHosts each one's hosts.
const (
	maxCredentials     = 64
	maxCredentialHosts = 64
)

// Credential is an entry of sandbox.network.credentials: a header the
// relay injects into requests to Hosts, its value made of secrets the
// server resolves (package secrets). The sandbox sees at most the
// session's placeholder, in the variable Placeholder names.
type Credential struct {
	Name  string   `json:"name"`
	Hosts []string `json:"hosts"` // lower case, no trailing dot
	// Header, if set, is set to Value on every request to Hosts
	// (canonical form).
	Header string `json:"header,omitempty"`
	// Value is the header value: text and ${secret:NAME} references.
	Value secrets.Template `json:"value"`
	// Placeholder, if set, is the variable every call gets, holding the
	// session's placeholder, which the relay replaces by Value in requests
	// to Hosts.
	Placeholder string `json:"placeholder,omitempty"`
	// GrantedOnly credentials are injected only on connections of a call
	// granted the network permission (sandbox_permissions, approved):
	// any other connection to Hosts gets none (its placeholder goes as
	// is).
	GrantedOnly bool `json:"grantedOnly,omitempty"`
}

// ForHost returns the credentials for host (a name, any case), in policy
// order: for a connection of a granted call, all of them; else those not
// GrantedOnly.
func (n Network) ForHost(host string, granted bool) []Credential {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	var out []Credential
	for _, c := range n.Credentials {
		if c.GrantedOnly && !granted {
			continue
		}
		for _, h := range c.Hosts {
			if h == host {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

var (
	credentialNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	headerNameRE     = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
	hostNameRE       = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
)

// reservedHeaders frame a request or address the hop: a credential that
// set them would let a policy smuggle a second request or redirect one.
var reservedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Upgrade": true,
	"Te": true, "Trailer": true, "Keep-Alive": true, "Expect": true,
}

// compileCredentials checks sandbox.network.credentials: every problem is
// reported with the entry's key and field.
func compileCredentials(l *located, p *Policy, creds []credentialSchema) {
	if len(creds) > maxCredentials {
		l.addf("sandbox.network.credentials", "%d credentials: at most %d", len(creds), maxCredentials)
		return
	}
	names := map[string]bool{}
	placeholders := map[string]bool{}
	headers := map[string]string{} // host + "\x00" + header → credential
	for i, cs := range creds {
		key := fmt.Sprintf("sandbox.network.credentials[%d]", i)
		ok := true
		bad := func(field, format string, args ...any) {
			l.addf(key+"."+field, format, args...)
			ok = false
		}
		c := Credential{Name: cs.Name, Placeholder: cs.Placeholder}
		switch {
		case cs.Name == "":
			bad("name", "required")
		case !credentialNameRE.MatchString(cs.Name):
			bad("name", "%q: lower-case letters, digits, '-' and '_', at most 63", cs.Name)
		case names[cs.Name]:
			bad("name", "%q: another credential has this name", cs.Name)
		}
		names[cs.Name] = true
		if len(cs.Hosts) == 0 {
			bad("hosts", "required: the host names the credential is sent to")
		}
		if len(cs.Hosts) > maxCredentialHosts {
			bad("hosts", "%d hosts: at most %d", len(cs.Hosts), maxCredentialHosts)
		}
		for j, h := range cs.Hosts {
			hk := fmt.Sprintf("hosts[%d]", j)
			norm := strings.TrimSuffix(strings.ToLower(h), ".")
			switch {
			case strings.Contains(h, "*"):
				bad(hk, "%q: a credential names its hosts exactly (no wildcards): a secret goes only where it is meant to", h)
			case strings.Contains(h, ":") && net.ParseIP(h) == nil:
				bad(hk, "%q: a host name without a port (the port comes from sandbox.network.allow)", h)
			case net.ParseIP(h) != nil:
				bad(hk, "%q: a host name, not an address: the relay proves a name with its certificate", h)
			case !hostNameRE.MatchString(norm):
				bad(hk, "%q is not a host name", h)
			default:
				c.Hosts = append(c.Hosts, norm)
			}
		}
		if cs.Header != "" {
			canon := textproto.CanonicalMIMEHeaderKey(cs.Header)
			switch {
			case !headerNameRE.MatchString(cs.Header):
				bad("header", "%q is not a header name", cs.Header)
			case reservedHeaders[canon] || strings.HasPrefix(canon, "Proxy-") || strings.HasPrefix(canon, "Shellbox-"):
				bad("header", "%q frames or routes the request; a credential cannot set it", cs.Header)
			}
			c.Header = canon
		}
		c.GrantedOnly = cs.GrantedOnly
		if cs.Value == "" {
			bad("value", `required: the header value, e.g. "Bearer ${secret:NAME}"`)
		} else if t, err := secrets.ParseTemplate(cs.Value); err != nil {
			bad("value", "%v", err)
		} else {
			c.Value = t
		}
		if ph := cs.Placeholder; ph != "" {
			_, inEnv := p.Env[ph]
			switch {
			case !envNameRE.MatchString(ph):
				bad("placeholder", "%q is not a variable name: letters, digits and _, not starting with a digit", ph)
			case strings.HasPrefix(ph, "DSH_") || strings.HasPrefix(ph, "SHELLBOX_"):
				bad("placeholder", "%q: DSH_* and SHELLBOX_* variables are shellbox's own", ph)
			case proxyVars[strings.ToUpper(ph)] || slices.Contains(egresswire.CAVars, ph):
				bad("placeholder", "%q is set by the egress proxy", ph)
			case inEnv:
				bad("placeholder", "%q is also set in env: one of them would be lost", ph)
			case placeholders[ph]:
				bad("placeholder", "%q: another credential's placeholder is this variable", ph)
			}
			placeholders[ph] = true
		}
		if cs.Header == "" && cs.Placeholder == "" {
			bad("header", "a credential needs a header to set, a placeholder to replace, or both")
		}
		if c.Header != "" {
			for _, h := range c.Hosts {
				k := h + "\x00" + c.Header
				if other, dup := headers[k]; dup {
					bad("header", "%s is already set for %s by credential %q", c.Header, h, other)
				}
				headers[k] = c.Name
			}
		}
		if ok {
			p.Network.Credentials = append(p.Network.Credentials, c)
		}
	}
}

// proxyVars are the variables the egress proxy sets (egresswire.Env),
// upper-cased.
var proxyVars = map[string]bool{"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true}
