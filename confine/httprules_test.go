package confine

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalPath(t *testing.T) {
	for _, c := range []struct {
		target, want string // want "": refused
		why          string // a part of the refusal
	}{
		{target: "/", want: "/"},
		{target: "/repos/acme/x", want: "/repos/acme/x"},
		{target: "/repos/acme/x?token=a/../../b", want: "/repos/acme/x"},
		{target: "/repos/", want: "/repos/"},
		{target: "https://api.example/repos/a?q", want: "/repos/a"},
		{target: "HTTP://api.example", want: "/"},
		{target: "//repos///acme//x", want: "/repos/acme/x"},
		{target: "/repos/./acme/.", want: "/repos/acme/"},
		{target: "/repos/evil/../acme/x", want: "/repos/acme/x"},
		{target: "/repos/acme/x/..", want: "/repos/acme/"},
		{target: "/%72epos/%61cme/%7e%2D%5F%2E", want: "/repos/acme/~-_."},
		{target: "/repos/%2e%2e/admin", want: "/admin"},
		{target: "/repos/%2E/x", want: "/repos/x"},
		{target: "/users/%40me", want: "/users/@me"},
		{target: "/files/a%20b/%C3%A9", want: "/files/a b/é"},
		{target: "/a/%3F/%23", want: "/a/?/#"},
		// Hostile: what a server could read another way is refused.
		{target: "/repos/acme%2Fx/pulls", why: "%2F encodes '/'"},
		{target: "/repos/acme%2fx", why: "%2f encodes '/'"},
		{target: "/repos%5cacme", why: `encodes '\\'`},
		{target: "/repos/%252F", why: "%25 encodes '%'"},
		{target: "/admin;x/", why: "path parameters"},
		{target: "/admin%3Bx/", why: "encodes ';'"},
		{target: `/repos\acme`, why: `a \`},
		{target: "/a%00b", why: "control"},
		{target: "/a%0d%0aHost:x", why: "control"},
		{target: "/a%C0%AE%C0%AE/", why: "not UTF-8"},
		{target: "/a%zz", why: "two hex"},
		{target: "/a%2", why: "two hex"},
		{target: "/..", why: "above the root"},
		{target: "/a/../../b", why: "above the root"},
		{target: "/%2e%2e/etc", why: "above the root"},
		{target: "/a b", why: "not allowed in a path"},
		{target: "/a#frag", why: "not allowed in a path"},
		{target: "/\xc3\xa9", why: "not allowed in a path"},
		{target: "*", why: "not a path"},
		{target: "api.example:443", why: "not a path"},
		{target: "", why: "not a path"},
		{target: "/" + strings.Repeat("a", MaxRulePathBytes), why: "over"},
		{target: strings.Repeat("/a", MaxRulePathSegments+1), why: "segments"},
	} {
		got, err := NormalPath(c.target)
		if c.why == "" {
			if err != nil || got != c.want {
				t.Errorf("NormalPath(%q) = %q, %v; want %q", c.target, got, err, c.want)
			}
			// Judged form, sent re-encoded: a second pass changes nothing.
			if again, err := NormalPath(EncodePath(got)); err != nil || again != got {
				t.Errorf("NormalPath(EncodePath(%q)) = %q, %v", got, again, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrAmbiguousPath) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("NormalPath(%q) = %q, %v; want a refusal with %q", c.target, got, err, c.why)
		}
	}
	if got := EncodePath("/files/a b/é/?#%"); got != "/files/a%20b/%C3%A9/%3F%23%25" {
		t.Errorf("EncodePath: %q", got)
	}
}

func TestHTTPRules(t *testing.T) {
	var rs HTTPRules
	for i, s := range []string{
		"allow GET /repos/**",
		"allow POST /repos/acme/*/pulls",
		"deny post,PUT /repos/**",
		"allow * /v*/status",
		"allow GET /exact/",
		"allow DELETE /a/**/z",
	} {
		r, err := ParseHTTPRule(s)
		if err != nil {
			t.Fatal(err)
		}
		r.Name = string(rune('0' + i))
		rs.Rules = append(rs.Rules, r)
	}
	rs.Default = HTTPRule{Name: "default"}
	for _, c := range []struct{ method, path, rule string }{
		{"GET", "/repos", "0"},
		{"GET", "/repos/", "0"},
		{"GET", "/repos/acme/x/issues", "0"},
		{"get", "/repos/acme", "0"}, // methods match without case
		{"HEAD", "/repos/acme", "default"},
		{"GET", "/reposx", "default"},
		{"POST", "/repos/acme/x/pulls", "1"},
		{"POST", "/repos/acme//pulls", "2"}, // (not a NormalPath; a lone * needs a segment)
		{"POST", "/repos/acme/x/pulls/1", "2"},
		{"POST", "/repos/other/x/pulls", "2"},
		{"put", "/repos/acme/x", "2"},
		{"PATCH", "/repos/acme/x", "default"},
		{"GET", "/v1/status", "3"},
		{"OPTIONS", "/v/status", "3"},
		{"GET", "/w1/status", "default"},
		{"GET", "/exact/", "4"},
		{"GET", "/exact", "default"},
		{"DELETE", "/a/z", "5"},
		{"DELETE", "/a/b/c/z", "5"},
		{"DELETE", "/a/b/c/z/", "5"}, // a trailing slash is also the path without it
		{"POST", "/repos/acme/x/pulls/", "1"},
		{"GET", "/v1/status/", "3"},
		{"DELETE", "/a/z/z", "5"},
		{"GET", "/", "default"},
	} {
		if got := rs.Decide(c.method, c.path); got.Name != c.rule {
			t.Errorf("%s %s: decided by %q (%s), want %q", c.method, c.path, got.Name, got.Text, c.rule)
		}
	}
	// Many ** against a deep path: bounded work, still correct.
	deep, _ := ParseHTTPRule("deny * /**/a/**/b/**/c/**/d")
	p := strings.Repeat("/x", MaxRulePathSegments-1) + "/e"
	if (&HTTPRules{Rules: []HTTPRule{deep}, Default: HTTPRule{Name: "d"}}).Decide("GET", p).Name != "d" {
		t.Error("deep path matched")
	}
}

func TestParseHTTPRuleErrors(t *testing.T) {
	for _, c := range []struct{ rule, why string }{
		{"GET /repos/**", "want \"allow|deny METHOD PATTERN\""},
		{"allow GET /a b", "want"},
		{"permit GET /a", "must be allow or deny"},
		{"allow G@T /a", `"G@T" is not a method`},
		{"allow GET, /a", `"" is not a method`},
		{"allow GET repos/**", "must start with /"},
		{"allow GET /a%2Fb", "write the path decoded"},
		{"allow GET /a//b", "empty segment"},
		{"allow GET /a/../b", ". or .. segment"},
		{"allow GET /a/**x", "** inside a segment"},
		{"allow GET /a;b", "';'"},
		{`allow GET /a\b`, `'\\'`},
		{"allow GET /a?b", "'?'"},
		{"allow GET /" + strings.Repeat("a/", maxPatternSegments), "segments"},
	} {
		_, err := ParseHTTPRule(c.rule)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("ParseHTTPRule(%q) = %v; want an error with %q", c.rule, err, c.why)
		}
	}
}

// BenchmarkJudge: what the relay adds to a request on a destination with
// rules: the path's normal form and the first match among ten rules
// (the last one matching).
func BenchmarkJudge(b *testing.B) {
	rs := &HTTPRules{Default: HTTPRule{Name: "default"}}
	for i := range 9 {
		r, _ := ParseHTTPRule("deny POST /orgs/*/repos/x" + string(rune('a'+i)) + "/**")
		rs.Rules = append(rs.Rules, r)
	}
	last, _ := ParseHTTPRule("allow GET,HEAD /repos/**")
	rs.Rules = append(rs.Rules, last)
	for b.Loop() {
		p, err := NormalPath("/repos/acme/shellbox/pulls/123/files?per_page=100")
		if err != nil || !rs.Decide("GET", p).Allow {
			b.Fatal(p, err)
		}
	}
}

// FuzzNormalPath: whatever a client sends, a path NormalPath accepts has
// one form: rooted, no empty or dot segments but a trailing /, valid
// UTF-8, and sent (EncodePath) it reads back as itself.
func FuzzNormalPath(f *testing.F) {
	for _, s := range []string{"/", "/a//b/./c/../%7e", "/%2e%2e/x", "/a%2Fb", "http://h/a?b", "/a;b", "/%C3%A9/%20", "/a/..", "//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		p, err := NormalPath(target)
		if err != nil {
			if !errors.Is(err, ErrAmbiguousPath) {
				t.Fatalf("%q: %v", target, err)
			}
			return
		}
		segs := strings.Split(p[1:], "/")
		for i, s := range segs {
			if s == "." || s == ".." || s == "" && i < len(segs)-1 {
				t.Fatalf("%q: %q has segment %q", target, p, s)
			}
		}
		if !strings.HasPrefix(p, "/") || !utf8.ValidString(p) || strings.ContainsAny(p, "\\;\x00") {
			t.Fatalf("%q: %q", target, p)
		}
		if again, err := NormalPath(EncodePath(p)); err != nil || again != p {
			t.Fatalf("%q: %q sent as %q reads %q, %v", target, p, EncodePath(p), again, err)
		}
	})
}

// FuzzMatchSegments: the greedy matcher agrees with the plain recursive
// definition of ** (any number of segments) and * (a run inside one).
func FuzzMatchSegments(f *testing.F) {
	f.Add("/a/**/b/*", "/a/x/b/y")
	f.Add("/**/a*b/**", "/q/acb/b/")
	f.Fuzz(func(t *testing.T, pattern, path string) {
		if len(pattern) > 64 || len(path) > 64 {
			return
		}
		pat, err := parsePattern(pattern)
		if err != nil || !strings.HasPrefix(path, "/") {
			return
		}
		segs := strings.Split(path[1:], "/")
		if got, want := matchSegments(pat, segs), refMatch(pat, segs); got != want {
			t.Fatalf("%q against %q: %v, want %v", pattern, path, got, want)
		}
	})
}

func refMatch(pat, path []string) bool {
	if len(pat) == 0 {
		return len(path) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(path); i++ {
			if refMatch(pat[1:], path[i:]) {
				return true
			}
		}
		return false
	}
	return len(path) > 0 && refSegment(pat[0], path[0]) && refMatch(pat[1:], path[1:])
}

func refSegment(pat, s string) bool {
	if pat == "*" {
		return s != ""
	}
	return refGlob(pat, s)
}

func refGlob(pat, s string) bool {
	if pat == "" {
		return s == ""
	}
	if pat[0] == '*' {
		for i := 0; i <= len(s); i++ {
			if refGlob(pat[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	return s != "" && s[0] == pat[0] && refGlob(pat[1:], s[1:])
}
