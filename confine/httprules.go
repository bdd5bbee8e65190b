package confine

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// HTTP rules judge each request a sandbox sends to one destination by its
// method and path, where the egress relay can read them (a connection it
// terminates). They are written as
//
//	allow GET /repos/**
//	deny POST,PUT /repos/acme/*/pulls
//	allow * /status
//
// a decision, a method (or several, comma-separated; * for any; matched
// without regard to case, so a server that reads "get" as GET cannot be
// reached past a rule on GET), and a path pattern. A pattern is a path in
// its judged form (below), each segment either **, any number of segments
// (none included: /repos/** matches /repos, /repos/ and /repos/a/b), or text
// in which * is any run of characters but /, a lone * at least one. The
// first rule that matches decides; none: the destination's default.
//
// The path judged is the request-target's path, normalised so that one
// resource has one spelling and a server cannot read it as another:
//
//  1. the path is what comes before the first ?; the query is not judged.
//     It must start with / (an absolute-form target's path, after its
//     authority; * and authority-form targets are refused).
//  2. every byte must be one RFC 3986 allows in a path (letters, digits,
//     -._~!$&'()*+,=:@ and /) or %HH; a ; (path parameters, which some
//     servers strip: /admin;x reaching /admin), a \ (a / to some servers),
//     a space, a control or non-ASCII byte, or a % without two hex digits
//     is refused.
//  3. every %HH is decoded, except that %2F (/), %5C (\), %25 (%: a
//     server decoding twice reads another path), %3B (;) and %00-%1F, %7F
//     refuse the path: encoded, they mean one thing to one reader and
//     another to the next, and guessing which is how rules are bypassed.
//     The decoded path must be valid UTF-8 (an overlong %C0%AE is no dot).
//  4. runs of / become one.
//  5. . segments are dropped and .. removes the segment before it
//     (RFC 3986 §5.2.4, after decoding: %2e%2e is ..); a .. above the
//     root is refused.
//
// The relay sends upstream the path it judged, re-encoded one way
// (EncodePath), so what a rule saw is what the server reads: /a//b/./c/%7e
// goes as /a/b/c/~. A path is at most MaxRulePathBytes long and
// MaxRulePathSegments segments deep, or refused.
type HTTPRule struct {
	// Name says where the rule is written (a policy's key), for the
	// audit and the client's 403.
	Name    string
	Allow   bool
	Methods []string // upper case; nil: any
	Pattern string
	Text    string // as written, for messages

	segs []string
}

// HTTPRules are one destination's rules: the first that matches a request
// decides, else Default.
type HTTPRules struct {
	Rules []HTTPRule
	// Default decides a request no rule matches; its Name says where the
	// default is written, its Methods and Pattern are unset.
	Default HTTPRule
}

// Bounds of HTTP rules and of the paths they judge.
const (
	MaxHTTPRules        = 128  // rules per destination
	maxPatternSegments  = 64   // segments of a pattern
	maxPatternBytes     = 1024 // a pattern's length
	MaxRulePathBytes    = 8 << 10
	MaxRulePathSegments = 256
)

// ErrAmbiguousPath marks a path refused by NormalPath: it has no single
// reading to judge.
var ErrAmbiguousPath = errors.New("ambiguous path")

// ParseHTTPRule parses one rule, "allow|deny METHODS PATTERN"; the error
// says what is wrong without the rule's position, for the caller to name
// it.
func ParseHTTPRule(s string) (HTTPRule, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return HTTPRule{}, fmt.Errorf("%q: want \"allow|deny METHOD PATTERN\", e.g. \"allow GET /repos/**\"", s)
	}
	r := HTTPRule{Text: strings.Join(f, " "), Pattern: f[2]}
	switch f[0] {
	case "allow":
		r.Allow = true
	case "deny":
	default:
		return HTTPRule{}, fmt.Errorf("%q: the decision %q must be allow or deny", s, f[0])
	}
	if f[1] != "*" {
		for _, m := range strings.Split(f[1], ",") {
			if !isToken(m) {
				return HTTPRule{}, fmt.Errorf("%q: %q is not a method (GET, POST, …; several comma-separated; * for any)", s, m)
			}
			r.Methods = append(r.Methods, strings.ToUpper(m))
		}
	}
	segs, err := parsePattern(f[2])
	if err != nil {
		return HTTPRule{}, fmt.Errorf("%q: pattern %q %w", s, f[2], err)
	}
	r.segs = segs
	return r, nil
}

func parsePattern(p string) ([]string, error) {
	switch {
	case !strings.HasPrefix(p, "/"):
		return nil, errors.New("must start with /")
	case len(p) > maxPatternBytes:
		return nil, fmt.Errorf("is over %d bytes", maxPatternBytes)
	case !utf8.ValidString(p):
		return nil, errors.New("is not UTF-8")
	}
	for _, c := range p {
		if c == '%' {
			return nil, errors.New("has a %: write the path decoded (/files/a b, not /files/a%20b); paths are judged decoded")
		}
		if c < 0x21 || c == 0x7f || strings.ContainsRune(`\;?#`, c) {
			return nil, fmt.Errorf("has %q, which no judged path holds", c)
		}
	}
	segs := strings.Split(p[1:], "/")
	if len(segs) > maxPatternSegments {
		return nil, fmt.Errorf("has over %d segments", maxPatternSegments)
	}
	for i, s := range segs {
		switch {
		case s == "" && i < len(segs)-1:
			return nil, errors.New("has an empty segment (//): judged paths have none")
		case s == "." || s == "..":
			return nil, errors.New("has a . or .. segment: judged paths have none")
		case strings.Contains(s, "**") && s != "**":
			return nil, errors.New("has ** inside a segment: ** stands for whole segments (/a/**/b)")
		}
	}
	return segs, nil
}

func isToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Decide returns the rule that decides a request: the first that matches
// method and path (a NormalPath), else Default.
func (rs *HTTPRules) Decide(method, path string) HTTPRule {
	segs := strings.Split(path[1:], "/")
	// A path with a trailing slash is also the path without it: most
	// servers route /admin/ as /admin, so a rule naming /admin must
	// decide both (else deny * /admin lets GET /admin/ by).
	var bare []string
	if n := len(segs); n > 1 && segs[n-1] == "" {
		bare = segs[:n-1]
	}
	for _, r := range rs.Rules {
		if r.matchMethod(method) && (matchSegments(r.segs, segs) || bare != nil && matchSegments(r.segs, bare)) {
			return r
		}
	}
	return rs.Default
}

func (r *HTTPRule) matchMethod(m string) bool {
	if r.Methods == nil {
		return true
	}
	for _, x := range r.Methods {
		if strings.EqualFold(x, m) {
			return true
		}
	}
	return false
}

// matchSegments matches path segments against a pattern's: ** any number
// of segments, else one segment by matchSegment. Greedy with one
// backtracking point (the last **), so O(len(pat)·len(path)).
func matchSegments(pat, path []string) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(path) {
		switch {
		case pi < len(pat) && pat[pi] == "**":
			star, mark = pi, si
			pi++
		case pi < len(pat) && matchSegment(pat[pi], path[si]):
			pi++
			si++
		case star >= 0:
			mark++
			pi, si = star+1, mark
		default:
			return false
		}
	}
	for pi < len(pat) && pat[pi] == "**" {
		pi++
	}
	return pi == len(pat)
}

// matchSegment matches one segment: * is any run of characters (a lone *
// at least one).
func matchSegment(pat, s string) bool {
	if pat == "*" {
		return s != ""
	}
	if !strings.Contains(pat, "*") {
		return pat == s
	}
	parts := strings.Split(pat, "*")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// NormalPath returns the path a request-target is judged by (see
// HTTPRule): decoded, without dot segments or runs of slashes. A target
// it cannot read one way only is refused with an error wrapping
// ErrAmbiguousPath that says why.
func NormalPath(target string) (string, error) {
	p := target
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	for _, scheme := range []string{"http://", "https://"} {
		if len(p) >= len(scheme) && strings.EqualFold(p[:len(scheme)], scheme) {
			p = pathOf(p[len(scheme):])
			break
		}
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: a request-target that is not a path", ErrAmbiguousPath)
	}
	if len(p) > MaxRulePathBytes {
		return "", fmt.Errorf("%w: a path over %d bytes", ErrAmbiguousPath, MaxRulePathBytes)
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || unhex(p[i+1]) < 0 || unhex(p[i+2]) < 0 {
				return "", fmt.Errorf("%w: a %% without two hex digits", ErrAmbiguousPath)
			}
			d := byte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			switch {
			case d == '/' || d == '\\' || d == '%' || d == ';':
				return "", fmt.Errorf("%w: %s encodes %q, which servers read differently", ErrAmbiguousPath, p[i:i+3], d)
			case d < 0x20 || d == 0x7f:
				return "", fmt.Errorf("%w: %s encodes a control character", ErrAmbiguousPath, p[i:i+3])
			}
			b.WriteByte(d)
			i += 2
		case c == ';':
			return "", fmt.Errorf("%w: a ; (path parameters, which some servers strip)", ErrAmbiguousPath)
		case c == '\\':
			return "", fmt.Errorf("%w: a \\ (a / to some servers)", ErrAmbiguousPath)
		case pathByte(c):
			b.WriteByte(c)
		default:
			return "", fmt.Errorf("%w: a byte %q not allowed in a path", ErrAmbiguousPath, c)
		}
	}
	dec := b.String()
	if !utf8.ValidString(dec) {
		return "", fmt.Errorf("%w: the decoded path is not UTF-8", ErrAmbiguousPath)
	}
	var out []string
	segs := strings.Split(dec[1:], "/")
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case "", ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) == 0 {
				return "", fmt.Errorf("%w: a .. above the root", ErrAmbiguousPath)
			}
			out = out[:len(out)-1]
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	if len(out) > MaxRulePathSegments {
		return "", fmt.Errorf("%w: over %d segments", ErrAmbiguousPath, MaxRulePathSegments)
	}
	return "/" + strings.Join(out, "/"), nil
}

// pathOf is the path of an absolute URL's rest after "scheme://".
func pathOf(rest string) string {
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[i:]
	}
	return "/"
}

// pathByte reports whether c may appear unencoded in a path (RFC 3986
// pchar and /, but ; which is refused before).
func pathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~!$&'()*+,=:@/", c) >= 0
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// EncodePath encodes a NormalPath for the wire one way: the bytes
// pathByte allows as they are, every other as %HH (upper case).
func EncodePath(p string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if c := p[i]; pathByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}
