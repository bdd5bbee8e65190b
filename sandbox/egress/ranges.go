package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
)

// Ranges is a set of address ranges a relay must not dial (see
// Decision.Addr): the server host's own and its networks', which a sandbox
// reaching out through the server would otherwise reach from the inside.
//
// An IPv6 address that embeds an IPv4 address by a fixed rule is judged by
// both: NAT64 (64:ff9b::/96, RFC 6052), IPv4-compatible (::/96),
// IPv4-translated (::ffff:0:0:0/96, RFC 2765) and 6to4 (2002::/16): a
// gateway on the way turns 64:ff9b::7f00:1 into 127.0.0.1, and 2002:a9fe:a9fe::
// reaches 169.254.169.254 through a 6to4 relay, so every IPv4 range blocked
// is blocked in each of those forms too, without listing them. IPv4-mapped
// addresses (::ffff:0:0/96) are the IPv4 address itself. Where the
// embedded address cannot be told from the IPv6 one (Teredo's, a NAT64
// network-specific prefix such as 64:ff9b:1::/48), the range is blocked
// whole (HostRanges).
type Ranges struct {
	prefixes []netip.Prefix
	names    []string // the entry of each prefix, as given
	src      []string // every entry, as given
	// self, when the list holds HostAddrs, returns the server host's own
	// interface addresses, looked up per check (interfaces come and go).
	self func() ([]netip.Addr, error)
	// selfSrc is the entry that named them, for messages.
	selfSrc string
}

// HostAddrs is the entry of a range list that stands for the server host's
// own addresses: every address of its network interfaces (of the server's
// network namespace), whatever range they are in, looked up when a
// connection is checked.
const HostAddrs = "host"

// HostRanges are refused by default for every destination but an address
// an allowlist names: loopback (the server itself), the host's own
// interface addresses ("host": a public address of the server reaches its
// listeners as loopback would), link-local (cloud metadata at
// 169.254.169.254 among them), unspecified and multicast, and the IPv6
// ranges that carry IPv4 addresses in a form a check cannot undo (Teredo
// 2001::/32, NAT64 local-use 64:ff9b:1::/48; see Ranges).
var HostRanges = []string{
	"127.0.0.0/8", "::1/128", HostAddrs, "169.254.0.0/16", "fe80::/10", "0.0.0.0/8", "::/128", "224.0.0.0/4", "ff00::/8",
	"2001::/32", "64:ff9b:1::/48",
}

// PrivateRanges are, with HostRanges, refused by default for a call granted
// the network permission: what an approver grants is the internet, not the
// server's networks (RFC 1918, shared address space, unique local).
var PrivateRanges = []string{
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7",
}

// ParseRanges parses CIDR prefixes ("10.0.0.0/8"), single addresses, or
// HostAddrs ("host").
func ParseRanges(list []string) (Ranges, error) {
	r := Ranges{src: append([]string(nil), list...)}
	for i, s := range list {
		if s == HostAddrs {
			r.self, r.selfSrc = interfaceAddrs, s
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return Ranges{}, fmt.Errorf("entry %d: %q is not an address range (CIDR, e.g. 10.0.0.0/8), an address or %q (the host's own addresses)", i, s, HostAddrs)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		r.prefixes = append(r.prefixes, p.Masked())
		r.names = append(r.names, s)
	}
	return r, nil
}

// MustRanges is ParseRanges for lists known to be good (the defaults).
func MustRanges(lists ...[]string) Ranges {
	var all []string
	for _, l := range lists {
		all = append(all, l...)
	}
	r, err := ParseRanges(all)
	if err != nil {
		panic(err)
	}
	return r
}

// Refuse returns an error naming the range a holds, nil when none does.
// An address that embeds an IPv4 address (see Ranges) is refused when
// either is in a range. When the host's own addresses cannot be listed,
// every address is refused: the check fails closed.
func (r Ranges) Refuse(a netip.Addr) error {
	a = a.Unmap()
	own := r.ownAddrs()
	if err := r.refuse(a, own); err != nil {
		return err
	}
	if v4, via, ok := embedded(a); ok {
		if err := r.refuse(v4, own); err != nil {
			return fmt.Errorf("address %s embeds the IPv4 address %s (%s): %w", a, v4, via, err)
		}
	}
	return nil
}

// ownAddrs returns a function that lists the host's own addresses on its
// first call and answers every later call of one Refuse from that list.
func (r Ranges) ownAddrs() func() ([]netip.Addr, error) {
	if r.self == nil {
		return nil
	}
	return sync.OnceValues(r.self)
}

func (r Ranges) refuse(a netip.Addr, own func() ([]netip.Addr, error)) error {
	for i, p := range r.prefixes {
		if p.Contains(a) {
			return fmt.Errorf("address %s is in %s, a range shellbox never relays to (%s)", a, r.names[i], r.describe(p))
		}
	}
	if own == nil {
		return nil
	}
	addrs, err := own()
	if err != nil {
		return fmt.Errorf("address %s: the server host's own addresses (%q) cannot be listed, so none is relayed to: %w", a, r.selfSrc, err)
	}
	for _, o := range addrs {
		if o.Unmap() == a {
			return fmt.Errorf("address %s is the server host's own (%q), an address shellbox never relays to", a, r.selfSrc)
		}
	}
	return nil
}

// embedded returns the IPv4 address an IPv6 address carries by a fixed
// rule, and the rule's name.
func embedded(a netip.Addr) (netip.Addr, string, bool) {
	if !a.Is6() {
		return netip.Addr{}, "", false
	}
	b := a.As16()
	last := netip.AddrFrom4([4]byte(b[12:16]))
	for _, e := range embeddings {
		if e.p.Contains(a) {
			if e.at == 2 {
				return netip.AddrFrom4([4]byte(b[2:6])), e.name, true
			}
			return last, e.name, true
		}
	}
	return netip.Addr{}, "", false
}

// embeddings are the IPv6 ranges that carry an IPv4 address, and where it
// is (the byte offset; 12: the last 32 bits).
var embeddings = []struct {
	p    netip.Prefix
	at   int
	name string
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12, "NAT64 64:ff9b::/96"},
	{netip.MustParsePrefix("::/96"), 12, "IPv4-compatible ::/96"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 12, "IPv4-translated ::ffff:0:0:0/96"},
	{netip.MustParsePrefix("2002::/16"), 2, "6to4 2002::/16"},
}

// interfaceAddrs lists the addresses of the host's network interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

func (r Ranges) describe(p netip.Prefix) string {
	a := p.Addr()
	switch {
	case a.IsLoopback():
		return "the server host's loopback"
	case a.IsLinkLocalUnicast():
		return "link-local, where cloud metadata services live"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsMulticast() || a.IsLinkLocalMulticast():
		return "multicast"
	case a.IsPrivate():
		return "a private network"
	case netip.MustParsePrefix("100.64.0.0/10").Contains(a):
		return "shared address space"
	case netip.MustParsePrefix("2001::/32").Contains(a):
		return "Teredo, whose IPv4 destination a check cannot tell"
	case netip.MustParsePrefix("64:ff9b:1::/48").Contains(a):
		return "local-use NAT64, whose IPv4 destination a check cannot tell"
	}
	return "blocked by configuration"
}

// String lists the ranges as given.
func (r Ranges) String() string { return strings.Join(r.src, ", ") }
