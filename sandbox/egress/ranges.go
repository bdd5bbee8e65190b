package egress

import (
	"fmt"
	"net/netip"
	"strings"
)

// Ranges is a set of address ranges a relay must not dial (see
// Decision.Addr): the server host's own and its networks', which a sandbox
// reaching out through the server would otherwise reach from the inside.
type Ranges struct {
	prefixes []netip.Prefix
	src      []string
}

// HostRanges are refused by default for every destination but an address
// an allowlist names: loopback (the server itself), link-local (cloud
// metadata at 169.254.169.254 among them), unspecified and multicast.
var HostRanges = []string{
	"127.0.0.0/8", "::1/128", "169.254.0.0/16", "fe80::/10", "0.0.0.0/8", "::/128", "224.0.0.0/4", "ff00::/8",
}

// PrivateRanges are, with HostRanges, refused by default for a call granted
// the network permission: what an approver grants is the internet, not the
// server's networks (RFC 1918, shared address space, unique local).
var PrivateRanges = []string{
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7",
}

// ParseRanges parses CIDR prefixes ("10.0.0.0/8") or single addresses.
func ParseRanges(list []string) (Ranges, error) {
	r := Ranges{src: append([]string(nil), list...)}
	for i, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return Ranges{}, fmt.Errorf("entry %d: %q is not an address range (CIDR, e.g. 10.0.0.0/8) or an address", i, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		r.prefixes = append(r.prefixes, p.Masked())
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
func (r Ranges) Refuse(a netip.Addr) error {
	a = a.Unmap()
	for i, p := range r.prefixes {
		if p.Contains(a) {
			return fmt.Errorf("address %s is in %s, a range shellbox never relays to (%s)", a, r.src[i], r.describe(p))
		}
	}
	return nil
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
	}
	return "blocked by configuration"
}

// String lists the ranges as given.
func (r Ranges) String() string { return strings.Join(r.src, ", ") }
