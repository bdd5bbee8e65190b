// Package cmdmatch matches one command's argv against the per-command
// matchers of a policy rule: the command's name (literal or glob), argv
// prefixes, and globs and regular expressions over its arguments, with
// the option spellings GNU getopt and git accept.
//
// It has two users, one on each side of the sandbox wall, and is the one
// place the matching is written so that they cannot drift: policies (the
// host), which matches the simple commands its reader finds in a call's
// text, and agent/execguard (inside the sandbox), which matches the argv
// of every execve a call's process tree makes. What crosses the wall is a
// Set of Specs, the matchers as the policy file wrote them, compiled again
// on the other side with Compile.
//
// Standard library only: a leaf both sides import.
package cmdmatch

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Decisions a Spec carries: only rules that refuse travel to the exec
// check (an allow rule never overrides a stricter one).
const (
	Deny = "deny"
	Ask  = "ask"
)

// Spec is a rule's per-command matchers as its policy file wrote them,
// the form that travels to the sandbox in a call's spec.
type Spec struct {
	// Rule is the rule's name in its policy; Decision is Deny or Ask;
	// Reason is the rule's reason, shown when it refuses an exec.
	Rule     string `json:"rule"`
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// Command are names (basenames of argv[0]) or name globs.
	Command []string `json:"command,omitempty"`
	// Prefix are argv prefixes, words separated by spaces; the first word
	// is taken by its basename.
	Prefix []string `json:"prefix,omitempty"`
	// Args are globs one argument must match; ArgsRegex regular
	// expressions.
	Args      []string `json:"args,omitempty"`
	ArgsRegex []string `json:"argsRegex,omitempty"`
}

// Set is what a call's exec check enforces: the refusing rules of its
// tenant's policy that apply to this call.
type Set struct {
	// Policy names the tenant whose policy the rules are from, for the
	// messages ("denied by policy <tenant>/<rule>").
	Policy string `json:"policy"`
	Rules  []Spec `json:"rules,omitempty"`
}

// Limits of a Set a sandbox accepts (agentapi bounds the whole spec too).
const (
	MaxRules    = 1024
	MaxPatterns = 256 // per field of a Spec
)

// Rule is the compiled per-command part of a rule. Every matcher given
// must hold; within one field's list, any entry may.
type Rule struct {
	Names     map[string]bool // argv0 basenames, literal
	NameGlobs []Matcher       // argv0 basenames, globs
	Prefixes  [][]string      // argv prefixes, argv0 by basename
	Args      []Matcher       // any argument (argv[1:]) matches one
	ArgsRegex []Matcher
	// Spelled: the rule also matches every option spelling that may mean
	// the words it names (rules that ask or deny); else words match as
	// written only (--force is also a prefix of --force-with-lease).
	Spelled bool
}

// Empty reports whether r has no per-command matcher.
func (r *Rule) Empty() bool {
	return r.Names == nil && r.NameGlobs == nil && r.Prefixes == nil && r.Args == nil && r.ArgsRegex == nil
}

// Named reports whether r can only match commands it names (by a name,
// a name glob or a prefix).
func (r *Rule) Named() bool { return r.Names != nil || r.NameGlobs != nil || r.Prefixes != nil }

// Match reports whether the command argv, whose name (the basename of
// argv[0], or what it resolves to) is name, meets every matcher of r.
func (r *Rule) Match(name string, argv []string) bool {
	if r.Names != nil || r.NameGlobs != nil {
		if len(argv) == 0 || !(r.Names[name] || AnyMatch(r.NameGlobs, name)) {
			return false
		}
	}
	if r.Prefixes != nil && !r.matchPrefix(name, argv) {
		return false
	}
	return r.MatchArgs(argv)
}

// MatchArgs checks the matchers on arguments alone (Args, ArgsRegex).
func (r *Rule) MatchArgs(argv []string) bool {
	if r.Args != nil && !r.argsMatch(r.Args, argv) {
		return false
	}
	if r.ArgsRegex != nil && !r.argsMatch(r.ArgsRegex, argv) {
		return false
	}
	return true
}

func (r *Rule) matchPrefix(name string, argv []string) bool {
	for _, pfx := range r.Prefixes {
		if len(argv) < len(pfx) || name != pfx[0] {
			continue
		}
		if r.Spelled {
			if PrefixSpelled(argv, pfx) {
				return true
			}
			continue
		}
		ok := true
		for i := 1; i < len(pfx); i++ {
			if argv[i] != pfx[i] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// argsMatch reports whether an argument of argv matches one of res; a rule
// that asks or denies also sees the arguments' option spellings.
func (r *Rule) argsMatch(res []Matcher, argv []string) bool {
	if ArgsMatch(res, argv) {
		return true
	}
	if !r.Spelled || len(argv) < 2 {
		return false
	}
	for _, a := range argv[1:] {
		if len(a) < 3 || a[0] != '-' {
			continue
		}
		for i := range res {
			if argSpelled(&res[i], a) {
				return true
			}
		}
	}
	return false
}

// FieldError is a pattern of a Spec that does not compile: Field is the
// Spec's field as a policy file names it (command, prefix, args,
// argsRegex), Index its position.
type FieldError struct {
	Field string
	Index int
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s[%d]: %v", e.Field, e.Index, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

// Compile compiles s's matchers. Every pattern that does not compile is
// reported to bad (nil: the first one is returned as a *FieldError) and
// left out; spelled is Rule.Spelled.
func Compile(s Spec, spelled bool, bad func(*FieldError)) (Rule, error) {
	var first error
	fail := func(field string, i int, err error) {
		fe := &FieldError{Field: field, Index: i, Err: err}
		if bad != nil {
			bad(fe)
		} else if first == nil {
			first = fe
		}
	}
	for _, p := range [][]string{s.Command, s.Prefix, s.Args, s.ArgsRegex} {
		if len(p) > MaxPatterns {
			return Rule{}, fmt.Errorf("rule %q: more than %d patterns in one field", s.Rule, MaxPatterns)
		}
	}
	r := Rule{Spelled: spelled}
	for i, c := range s.Command {
		switch {
		case c == "" || strings.Contains(c, "/"):
			fail("command", i, fmt.Errorf("%q: give a command name (its basename), not a path", c))
		case strings.ContainsAny(c, "*?") || strings.Contains(c, "[") && strings.Contains(c, "]"):
			m, err := Glob(c)
			if err != nil {
				fail("command", i, err)
				continue
			}
			r.NameGlobs = append(r.NameGlobs, m)
		default:
			if r.Names == nil {
				r.Names = map[string]bool{}
			}
			r.Names[c] = true
		}
	}
	for i, pfx := range s.Prefix {
		words := strings.Fields(pfx)
		if len(words) == 0 {
			fail("prefix", i, fmt.Errorf("empty prefix"))
			continue
		}
		words[0] = path.Base(words[0])
		r.Prefixes = append(r.Prefixes, words)
	}
	for i, g := range s.Args {
		m, err := Glob(g)
		if err != nil {
			fail("args", i, err)
			continue
		}
		r.Args = append(r.Args, m)
	}
	for i, x := range s.ArgsRegex {
		m, err := ArgsRegexp(x)
		if err != nil {
			fail("argsRegex", i, err)
			continue
		}
		r.ArgsRegex = append(r.ArgsRegex, m)
	}
	return r, first
}

// Matcher matches strings against a glob or a regexp, with the cheap checks
// first: a glob without wildcards is a string comparison, and a regexp
// needs its literal prefix somewhere in the string before it runs.
type Matcher struct {
	re    *regexp.Regexp
	lit   string // the whole pattern, when literal
	isLit bool
	need  string // a substring every match contains
	// opt is the long option every match starts with (--force for
	// --force*), "" if none: an abbreviation of it (--forc) may mean it
	// (optionSpelled).
	opt string
	// shorts has bit c set when the pattern matches the short option -c,
	// which a cluster (-fr) may hold.
	shorts [4]uint64
}

// withShorts fills m.shorts: which short options -c the pattern matches.
func withShorts(m Matcher) Matcher {
	for c := range 256 {
		if isAlnum(byte(c)) && m.MatchString(shortOpts[c]) {
			m.shorts[c/64] |= 1 << (c % 64)
		}
	}
	return m
}

// matchesShort reports whether the pattern matches the short option -c.
func (m *Matcher) matchesShort(c byte) bool { return m.shorts[c/64]&(1<<(c%64)) != 0 }

// MatchString reports whether s matches the pattern.
func (m Matcher) MatchString(s string) bool {
	if m.isLit {
		return s == m.lit
	}
	if m.need != "" && !strings.Contains(s, m.need) {
		return false
	}
	return m.re.MatchString(s)
}

// Regexp is the pattern as a regular expression (a literal quoted).
func (m Matcher) Regexp() *regexp.Regexp {
	if m.isLit {
		return regexp.MustCompile(`^(?s:` + regexp.QuoteMeta(m.lit) + `)$`)
	}
	return m.re
}

// Glob compiles a shell-style glob (GlobRegexp) into a Matcher.
func Glob(g string) (Matcher, error) {
	opt := g
	if i := strings.IndexAny(g, `*?[\`); i >= 0 {
		opt = g[:i]
	}
	opt = longOption(opt)
	if !strings.ContainsAny(g, `*?[\`) {
		return withShorts(Matcher{lit: g, isLit: true, opt: opt}), nil
	}
	re, err := GlobRegexp(g)
	if err != nil {
		return Matcher{}, err
	}
	m := Regexp(re)
	m.opt = opt
	return withShorts(m), nil
}

// ArgsRegexp compiles a regular expression over arguments; one anchored at
// ^ on a long option also matches that option's abbreviations.
func ArgsRegexp(x string) (Matcher, error) {
	re, err := regexp.Compile(x)
	if err != nil {
		return Matcher{}, fmt.Errorf("bad regular expression: %v", err)
	}
	m := Regexp(re)
	if strings.HasPrefix(x, "^") {
		m.opt = longOption(x[1:])
	}
	return withShorts(m), nil
}

// Regexp makes a Matcher of re, with its literal prefix as the cheap check.
func Regexp(re *regexp.Regexp) Matcher {
	prefix, _ := re.LiteralPrefix()
	return Matcher{re: re, need: prefix}
}

// longOption is the --name that s starts with, "" if none.
func longOption(s string) string {
	if !strings.HasPrefix(s, "--") {
		return ""
	}
	i := 2
	for i < len(s) && (isAlnum(s[i]) || s[i] == '-' || s[i] == '_') {
		i++
	}
	if i < 3 {
		return ""
	}
	return s[:i]
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// GlobRegexp compiles a shell-style glob into an anchored regexp: * matches
// any run of characters (slashes included), ? one character, [...] a class
// ([!...] or [^...] negated), and \ quotes the next character.
func GlobRegexp(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(g); i++ {
		switch c := g[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(g) {
				return nil, fmt.Errorf("bad glob %q: trailing backslash", g)
			}
			i++
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		case '[':
			end := strings.IndexByte(g[i+1:], ']')
			if end == 0 { // []...] : a leading ] is literal
				if e2 := strings.IndexByte(g[i+2:], ']'); e2 >= 0 {
					end = e2 + 1
				} else {
					end = -1
				}
			}
			if end < 0 {
				return nil, fmt.Errorf("bad glob %q: unterminated [", g)
			}
			class := g[i+1 : i+1+end]
			i += end + 1
			neg := false
			if class != "" && (class[0] == '!' || class[0] == '^') {
				neg, class = true, class[1:]
			}
			if class == "" {
				return nil, fmt.Errorf("bad glob %q: empty class", g)
			}
			b.WriteByte('[')
			if neg {
				b.WriteByte('^')
			}
			for _, r := range class {
				if r == '-' {
					b.WriteRune(r)
					continue
				}
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
			b.WriteByte(']')
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		}
	}
	b.WriteString(`)$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("bad glob %q: %v", g, err)
	}
	return re, nil
}

// Option spellings. GNU getopt_long and git's parse-options accept a long
// option abbreviated to any unambiguous prefix (--forc is --force), short
// options clustered (-fr is -f -r) with a value attached (-C/path), a long
// option's value after = (--exec-path=/x), and options before a
// subcommand (git -C /x push). A rule that asks or denies matches every
// spelling that may mean the words it names; one that allows matches them
// as written only (--force is also a prefix of --force-with-lease).

// stackWords is how many words PrefixSpelled reads without allocating.
const stackWords = 64

// PrefixSpelled reports whether argv starts with the words of pfx in one of
// their spellings, options (and a value each may take) allowed in between.
// It reads every word (options may put the next word anywhere): O(len(argv)
// × len(pfx)).
func PrefixSpelled(argv []string, pfx []string) bool {
	n := len(argv)
	// reach[i] holds whether argv[i:] may still match pfx[j:] for the j of
	// this round; rounds go over pfx.
	var buf [2 * (stackWords + 2)]bool
	var reach, next []bool
	if n <= stackWords {
		reach, next = buf[:n+2], buf[stackWords+2:stackWords+2+n+2]
	} else {
		big := make([]bool, 2*(n+2))
		reach, next = big[:n+2], big[n+2:]
	}
	reach[1] = true
	for j := 1; j < len(pfx); j++ {
		clear(next)
		any := false
		for i := 1; i < n; i++ {
			if !reach[i] {
				continue
			}
			if optionSpelled(argv[i], pfx[j]) {
				next[i+1], any = true, true
			}
			if strings.HasPrefix(argv[i], "-") && argv[i] != pfx[j] {
				// An option before the next word, alone or with its value.
				reach[i+1] = true
				if i+2 <= n {
					reach[i+2] = true
				}
			}
		}
		if !any {
			return false
		}
		reach, next = next, reach
	}
	return true
}

// optionSpelled reports whether the argument a may mean the word p: a
// itself, an abbreviation of p's long option (--forc), p with a value
// (--exec-path=/x, -C/path), or a short cluster holding p's letter (-fr).
func optionSpelled(a, p string) bool {
	if a == p {
		return true
	}
	switch {
	case strings.HasPrefix(p, "--") && strings.HasPrefix(a, "--") && len(a) > 2:
		name, _, _ := strings.Cut(a, "=")
		return len(name) > 2 && strings.HasPrefix(p, name)
	case len(p) == 2 && p[0] == '-' && p[1] != '-' && len(a) > 2 && a[0] == '-' && a[1] != '-':
		for k := 1; k < len(a) && isAlnum(a[k]); k++ {
			if a[k] == p[1] {
				return true
			}
		}
	}
	return false
}

// argSpelled reports whether a spelling of the option argument a matches m:
// each letter of a short cluster (-fr: -f, -r; -C/path: -C), the name of a
// long option with a value (--force-with-lease=x: --force-with-lease), or
// the long option m starts with, of which a is an abbreviation.
func argSpelled(m *Matcher, a string) bool {
	if a[1] == '-' {
		name, _, hasVal := strings.Cut(a, "=")
		if len(name) < 3 {
			return false
		}
		if hasVal && m.MatchString(name) {
			return true
		}
		return m.opt != "" && strings.HasPrefix(m.opt, name)
	}
	for k := 1; k < len(a) && isAlnum(a[k]); k++ {
		if m.matchesShort(a[k]) {
			return true
		}
	}
	return false
}

// shortOpts holds "-c" for every byte c, so that matching a cluster's
// letters allocates nothing.
var shortOpts = func() (t [256]string) {
	for c := range t {
		t[c] = "-" + string(rune(c))
	}
	return t
}()

// ArgsMatch reports whether an argument of argv (argv[1:]) matches one of
// res, as written.
func ArgsMatch[T interface{ MatchString(string) bool }](res []T, argv []string) bool {
	if len(argv) < 2 {
		return false
	}
	for _, a := range argv[1:] {
		for _, re := range res {
			if re.MatchString(a) {
				return true
			}
		}
	}
	return false
}

// AnyMatch reports whether s matches one of res.
func AnyMatch[T interface{ MatchString(string) bool }](res []T, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}
