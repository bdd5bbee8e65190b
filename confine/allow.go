package confine

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Allowlist is a set of destinations a sandbox may reach, each host:port:
//
//	pypi-mirror.internal:443   that name, that port (names match case-insensitively)
//	*.corp.example:443         any name under corp.example (not corp.example itself)
//	10.0.0.7:5432              that address, that port, when the client names it
//	[fd00::7]:5432             the same for IPv6
//	pypi-mirror.internal:*     any port of that name
//
// A destination is matched as the client named it. A name does not match
// the addresses it resolves to, nor an address a name, so a client cannot
// reach 10.0.0.7 by asking for an allowlisted name's address.
type Allowlist struct {
	entries []entry
	src     []string
}

type entry struct {
	host     string // lower case, no trailing dot; an address in netip's form
	addr     bool   // host is an address
	wildcard bool   // host is a domain: match names strictly under it
	port     int    // 0: any port
}

// ParseEntry checks one allowlist entry; its error says what is wrong
// without repeating the entry's position, for the caller to name it.
func ParseEntry(s string) error {
	_, err := parseEntry(s)
	return err
}

func parseEntry(s string) (entry, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return entry{}, fmt.Errorf("%q is not host:port", s)
	}
	var e entry
	if port != "*" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return entry{}, fmt.Errorf("%q: port must be 1-65535 or *", s)
		}
		e.port = n
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return entry{}, fmt.Errorf("%q: an address with a zone cannot be allowed", s)
		}
		e.host, e.addr = a.Unmap().String(), true
		return e, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		e.wildcard, host = true, rest
	}
	h, ok := normalName(host)
	if !ok {
		return entry{}, fmt.Errorf("%q: %q is not a host name (letters, digits, - and . only, not all digits in the last label; a wildcard only as a leading *.; an IPv4 address in dotted decimal)", s, host)
	}
	e.host = h
	return e, nil
}

// NewAllowlist parses entries (see ParseEntry).
func NewAllowlist(entries []string) (*Allowlist, error) {
	a := &Allowlist{src: append([]string(nil), entries...)}
	for i, s := range entries {
		e, err := parseEntry(s)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		a.entries = append(a.entries, e)
	}
	return a, nil
}

// Entries returns the entries as given.
func (a *Allowlist) Entries() []string { return append([]string(nil), a.src...) }

// Allows reports whether target (host:port, as a client names it in CONNECT
// or a URL) is allowed. A malformed target is not.
func (a *Allowlist) Allows(target string) bool {
	if a == nil {
		return false
	}
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		return false
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return false
	}
	addr, err := netip.ParseAddr(host)
	isAddr := err == nil
	if isAddr {
		host = addr.Unmap().String()
	} else if h, ok := normalName(host); ok {
		host = h
	} else {
		return false
	}
	for _, e := range a.entries {
		if e.port != 0 && e.port != port {
			continue
		}
		switch {
		case isAddr != e.addr:
			// A name never allows an address, nor an address a name.
		case e.wildcard:
			if strings.HasSuffix(host, "."+e.host) {
				return true
			}
		case e.host == host:
			return true
		}
	}
	return false
}

// normalName lower-cases a DNS name and drops one trailing dot; ok is false
// for anything that is not letters, digits, '-', '_' and non-empty labels,
// and for a name whose last label is all digits: resolvers read "127.1",
// "2130706433" or "10.0.0.7." as addresses, which an allowlist of names
// must not let through.
func normalName(h string) (string, bool) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" || len(h) > 253 {
		return "", false
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return "", false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	return h, true
}

// IsAddress reports whether a target's host (host:port) is an IP address,
// as an allowlist entry naming an address would match it.
func IsAddress(target string) bool {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return false
	}
	_, err = netip.ParseAddr(host)
	return err == nil
}
