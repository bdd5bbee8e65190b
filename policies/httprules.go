package policies

import (
	"fmt"
	"net"
	"strings"

	"github.com/shellbox/shellbox/confine"
)

// maxHTTPDestinations bounds a policy's sandbox.network.http, and
// maxHTTPHosts each entry's hosts.
const (
	maxHTTPDestinations = 64
	maxHTTPHosts        = 64
)

// HTTPRules is an entry of sandbox.network.http: rules that judge every
// HTTP request to Hosts by method and path (syntax and path form:
// confine.HTTPRule). The relay terminates connections to Hosts to read
// them, as it does a credential's.
type HTTPRules struct {
	Hosts   []string `json:"hosts"` // lower case, no trailing dot
	Rules   []string `json:"rules"` // as written
	Default Decision `json:"default"`

	compiled *confine.HTTPRules
	key      string // sandbox.network.http[i]
}

// HTTPFor returns the rules for host (a name, any case) and the key they
// are written under, or nil.
func (n Network) HTTPFor(host string) (*confine.HTTPRules, string) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, d := range n.HTTP {
		for _, h := range d.Hosts {
			if h == host {
				return d.compiled, d.key
			}
		}
	}
	return nil, ""
}

// compileHTTPRules checks sandbox.network.http: every problem is reported
// with the entry's key and field, and the bad value.
func compileHTTPRules(l *located, p *Policy, dests []httpRulesSchema) {
	if len(dests) > maxHTTPDestinations {
		l.addf("sandbox.network.http", "%d entries: at most %d", len(dests), maxHTTPDestinations)
		return
	}
	seen := map[string]int{} // host → entry
	for i, ds := range dests {
		key := fmt.Sprintf("sandbox.network.http[%d]", i)
		ok := true
		bad := func(field, format string, args ...any) {
			l.addf(key+"."+field, format, args...)
			ok = false
		}
		d := HTTPRules{key: key, compiled: &confine.HTTPRules{}}
		if len(ds.Hosts) == 0 {
			bad("hosts", "required: the host names the rules judge requests to")
		}
		if len(ds.Hosts) > maxHTTPHosts {
			bad("hosts", "%d hosts: at most %d", len(ds.Hosts), maxHTTPHosts)
		}
		for j, h := range ds.Hosts {
			hk := fmt.Sprintf("hosts[%d]", j)
			norm := strings.TrimSuffix(strings.ToLower(h), ".")
			switch {
			case strings.Contains(h, "*"):
				bad(hk, "%q: rules name their hosts exactly (no wildcards): the relay shows each a certificate of its own", h)
			case strings.Contains(h, ":") && net.ParseIP(h) == nil:
				bad(hk, "%q: a host name without a port (rules hold on every port sandbox.network.allow gives it)", h)
			case net.ParseIP(h) != nil:
				bad(hk, "%q: a host name, not an address: the relay proves a name with its certificate", h)
			case !hostNameRE.MatchString(norm):
				bad(hk, "%q is not a host name", h)
			default:
				if other, dup := seen[norm]; dup {
					bad(hk, "%q already has rules in sandbox.network.http[%d]: a host's rules are one list", h, other)
				}
				seen[norm] = i
				d.Hosts = append(d.Hosts, norm)
			}
		}
		switch ds.Default {
		case "":
			bad("default", "required: allow or deny, what a request no rule matches gets")
		case string(Allow):
			d.Default = Allow
		case string(Deny):
			d.Default = Deny
		default:
			bad("default", "%q: allow or deny", ds.Default)
		}
		d.compiled.Default = confine.HTTPRule{Name: key + ".default", Allow: d.Default == Allow}
		if len(ds.Rules) > confine.MaxHTTPRules {
			bad("rules", "%d rules: at most %d", len(ds.Rules), confine.MaxHTTPRules)
		}
		for j, s := range ds.Rules {
			rk := fmt.Sprintf("rules[%d]", j)
			r, err := confine.ParseHTTPRule(s)
			if err != nil {
				bad(rk, "%v", err)
				continue
			}
			r.Name = key + "." + rk
			d.compiled.Rules = append(d.compiled.Rules, r)
			d.Rules = append(d.Rules, r.Text)
		}
		if ok {
			p.Network.HTTP = append(p.Network.HTTP, d)
		}
	}
}
