package policies

import (
	"regexp"
	"slices"

	"github.com/shellbox/shellbox/policies/pwsh"
)

// How rules name commands in a pwsh call. PowerShell resolves names
// case-insensitively, so rule names match pwsh commands case-insensitively
// (`command: [Remove-Item]` matches remove-item, REMOVE-ITEM, and the
// aliases ri, del, erase, rd, which resolve to it). A rule name that is
// itself a built-in alias also matches what the alias runs (echo is
// Write-Output in pwsh). A native name matches the native command
// (`command: [rm]` matches rm and /bin/rm; rm is not an alias on Linux).

// pwshIndex is the policy's per-command rules as pwsh commands see them.
type pwshIndex struct {
	// byName indexes the rules that can only match a command of that
	// folded name; generic lists the others. Positions in Policy.rules,
	// ascending.
	byName  map[string][]int
	generic []int
	rules   []pwshRule // by position in Policy.rules
}

type pwshRule struct {
	names map[string]bool // folded names, and what the aliases among them run
	globs []matcher       // the name globs, case-insensitive
	heads [][]string      // per prefix: the folded names its first word matches
}

// indexPwsh builds p.pwsh from p.rules.
func (p *Policy) indexPwsh() {
	ix := &pwshIndex{byName: map[string][]int{}, rules: make([]pwshRule, len(p.rules))}
	add := func(name string, i int) {
		if l := ix.byName[name]; len(l) == 0 || l[len(l)-1] != i {
			ix.byName[name] = append(l, i)
		}
	}
	for i, r := range p.rules {
		// A rule for the bash tool is here too: a bash call's pwsh -c
		// runs pwsh commands. The call matchers pick the rules that apply.
		if !r.perCommand {
			continue
		}
		pr := &ix.rules[i]
		for n := range r.Names {
			if pr.names == nil {
				pr.names = map[string]bool{}
			}
			for _, k := range pwshRuleKeys(n) {
				pr.names[k] = true
			}
		}
		for _, g := range r.NameGlobs {
			pr.globs = append(pr.globs, regexMatcher(regexp.MustCompile("(?i)"+g.Regexp().String())))
		}
		for _, pfx := range r.Prefixes {
			pr.heads = append(pr.heads, pwshRuleKeys(pfx[0]))
		}
		switch {
		case r.Names != nil && r.NameGlobs == nil:
			for k := range pr.names {
				add(k, i)
			}
		case r.Names == nil && r.NameGlobs == nil && r.Prefixes != nil:
			for _, h := range pr.heads {
				for _, k := range h {
					add(k, i)
				}
			}
		default:
			ix.generic = append(ix.generic, i)
		}
	}
	p.pwsh = ix
}

// matchPwshCommand is matchCommand for a pwsh command: the rule at i
// matches sc.
func (p *Policy) matchPwshCommand(i int, sc *simpleCommand) bool {
	r, pr := p.rules[i], &p.pwsh.rules[i]
	if r.Names != nil || r.NameGlobs != nil {
		if len(sc.Argv) == 0 || !(pr.names[sc.fold] || anyMatch(pr.globs, sc.name)) {
			return false
		}
	}
	if r.Prefixes != nil && !pr.matchPrefix(r, sc) {
		return false
	}
	return r.Rule.MatchArgs(sc.Argv) && r.matchRedirects(sc)
}

func (pr *pwshRule) matchPrefix(r *rule, sc *simpleCommand) bool {
	for j, pfx := range r.Prefixes {
		if len(sc.Argv) < len(pfx) || !slices.Contains(pr.heads[j], sc.fold) {
			continue
		}
		if slices.Equal(sc.Argv[1:len(pfx)], pfx[1:]) {
			return true
		}
	}
	return false
}

// pwshRuleKeys are the folded names a rule's command name matches in a pwsh
// call: the name itself and, when it is a built-in alias, what the alias
// runs (a rule naming echo also matches Write-Output, which is what echo is
// in pwsh).
func pwshRuleKeys(name string) []string {
	base, _ := pwsh.Base(name)
	keys := []string{pwsh.Fold(base)}
	if t, ok := pwsh.AliasTarget(base); ok {
		keys = append(keys, pwsh.Fold(t))
	}
	return keys
}
