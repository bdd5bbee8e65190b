package policies

import (
	"fmt"
	"path"
	"slices"

	"github.com/shellbox/shellbox/internal/clip"
	"github.com/shellbox/shellbox/internal/cmdmatch"
)

// call is what a decision is about.
type call struct {
	tool        string // "bash" or "pwsh"
	command     string
	workdir     string
	background  bool
	permissions []string
}

// verdict is a decision and where it came from.
type verdict struct {
	Decision Decision
	Rule     string
	Reason   string
	// Command is the simple command that decided (as written), or the whole
	// command for a call-level decision.
	Command string
	// Permission is set when an escalation rule decided.
	Permission string
}

// stricter reports whether v should replace cur: strictly stricter only, so
// among equals the first (in command order, then rule order) stays.
func (v verdict) stricter(cur verdict) bool { return v.Decision.rank() > cur.Decision.rank() }

// evaluate is the whole decision on c: the tool and background switches,
// then the rules.
func (p *Policy) evaluate(c call) verdict {
	cmd := clip.To(c.command, maxTextBytes)
	switch {
	case c.tool == "bash" && !p.Tools.Bash, c.tool == "pwsh" && !p.Tools.Pwsh:
		return verdict{Decision: Deny, Rule: RuleTool, Command: cmd,
			Reason: fmt.Sprintf("the %s tool is disabled for this tenant (tools.%s: false)", c.tool, c.tool)}
	case c.tool != "bash" && c.tool != "pwsh":
		return verdict{Decision: Deny, Rule: RuleTool, Command: cmd, Reason: fmt.Sprintf("unknown tool %q", clip.To(c.tool, 40))}
	case c.background && !p.Tools.Background:
		return verdict{Decision: Deny, Rule: RuleTool, Command: cmd,
			Reason: "background tasks are disabled for this tenant (tools.background: false)"}
	}
	return p.decide(c)
}

// decide evaluates c against the policy: every simple command against every
// rule, strictest wins; a simple command no rule matches takes the default;
// then the escalations. It never panics on any input (fuzzed) and does no
// I/O.
func (p *Policy) decide(c call) verdict {
	best := verdict{Decision: "", Rule: ""}
	first := true
	take := func(v verdict) {
		if first || v.stricter(best) {
			best, first = v, false
		}
	}

	// Call-level matchers are the same for every simple command.
	wd := c.workdir
	if wd == "" {
		wd = "."
	}
	wd = path.Clean(wd)
	var okBuf [256]bool // on the stack for policies of up to 256 rules
	okCall := okBuf[:0]
	if len(p.rules) > len(okBuf) {
		okCall = make([]bool, 0, len(p.rules))
	}
	okCall = okCall[:len(p.rules)]
	for i, r := range p.rules {
		okCall[i] = r.matchCall(c, wd)
		if okCall[i] && !r.perCommand {
			take(r.verdict(clip.To(c.command, maxTextBytes)))
		}
	}

	analyzeTool := analyze
	if c.tool == "pwsh" {
		analyzeTool = analyzePwsh
	}
	cmds, err := analyzeTool(c.command)
	switch {
	case err != nil:
		take(verdict{Decision: p.Unparseable, Rule: RuleUnparseable,
			Reason:  fmt.Sprintf("the command cannot be read statically (%s)", clip.To(err.Error(), 200)),
			Command: clip.To(c.command, maxTextBytes)})
	case len(cmds) == 0 && first:
		take(p.defaultVerdict(clip.To(c.command, maxTextBytes)))
	}
	for i := range cmds {
		p.decideCommand(&cmds[i], okCall, take)
	}

	if first {
		// Only redirections or wrappers, and no rule said anything.
		take(p.defaultVerdict(clip.To(c.command, maxTextBytes)))
	}
	for _, perm := range c.permissions {
		take(p.decideEscalation(perm))
	}
	return best
}

func (p *Policy) decideCommand(sc *simpleCommand, okCall []bool, take func(verdict)) {
	if sc.Dynamic {
		why := sc.why
		if why == "" {
			why = fmt.Sprintf("the command name %s is not a literal", quoteName(sc))
		}
		take(verdict{Decision: p.Unparseable, Rule: RuleDynamic,
			Reason: why + ": a static policy cannot tell what runs", Command: sc.display()})
		return
	}
	matched, byName := false, false
	try := func(i int) {
		if okCall[i] && p.matchCommand(i, sc) {
			matched = true
			r := p.rules[i]
			byName = byName || r.Named()
			take(r.verdict(sc.display()))
		}
	}
	// Candidates in rule order: the rules indexed under the command's name
	// merged with the generic ones.
	named, generic := p.byName[sc.name], p.generic
	if sc.pwsh {
		named, generic = p.pwsh.byName[sc.fold], p.pwsh.generic
	}
	if len(sc.Argv) == 0 {
		named = nil
	}
	for len(named) > 0 || len(generic) > 0 {
		if len(generic) == 0 || (len(named) > 0 && named[0] < generic[0]) {
			try(named[0])
			named = named[1:]
		} else {
			try(generic[0])
			generic = generic[1:]
		}
	}
	if sc.opaque != "" && !byName {
		// Code the command does not show: a rule that names the command
		// decides; else the policy's opaque (and the default, if it is
		// stricter).
		take(verdict{Decision: p.Opaque, Rule: RuleOpaque,
			Reason: "`" + clip.To(sc.name, 80) + "` " + sc.opaque + ": code a static policy cannot see takes " + p.opaqueNote +
				", unless a rule names the command",
			Command: sc.display()})
	}
	if !matched && !sc.Wrapper {
		take(p.defaultVerdict(sc.display()))
	}
}

// display is the simple command as explanations show it.
func (sc *simpleCommand) display() string {
	if sc.Via == "" {
		return sc.Text
	}
	return sc.Text + " (via " + sc.Via + ")"
}

func quoteName(sc *simpleCommand) string {
	if len(sc.Argv) == 0 {
		return "(none)"
	}
	return "`" + clip.To(sc.Argv[0], 80) + "`"
}

// defaultReasons are the reasons of default verdicts, made once: a decision
// takes one per simple command no rule matches.
var defaultReasons = map[Decision]string{
	Allow: "no rule matches; the tenant's default is allow",
	Ask:   "no rule matches; the tenant's default is ask",
	Deny:  "no rule matches; the tenant's default is deny",
}

func (p *Policy) defaultVerdict(cmd string) verdict {
	return verdict{Decision: p.Default, Rule: RuleDefault,
		Reason: defaultReasons[p.Default], Command: cmd}
}

func (p *Policy) decideEscalation(perm string) verdict {
	var best verdict
	found := false
	for _, e := range p.escalations {
		for _, re := range e.permissions {
			if re.MatchString(perm) {
				v := verdict{Decision: e.Decision, Rule: e.Name, Reason: e.Reason, Permission: perm}
				if v.Reason == "" {
					v.Reason = fmt.Sprintf("sandbox permission %q (rule %s)", perm, e.Name)
				}
				if !found || v.stricter(best) {
					best, found = v, true
				}
				break
			}
		}
	}
	if !found {
		best = verdict{Decision: p.escDefault, Rule: RuleEscalation, Permission: perm,
			Reason: fmt.Sprintf("sandbox permission %q: no escalation rule matches; the default is %s", perm, p.escDefault)}
	}
	best.Command = "sandbox_permissions: " + clip.To(perm, 80)
	return best
}

func (r *rule) verdict(cmd string) verdict {
	reason := r.Reason
	if reason == "" {
		reason = "matched rule " + r.Name
	}
	return verdict{Decision: r.Decision, Rule: r.Name, Reason: reason, Command: cmd}
}

// matchCall checks the call-level matchers: tool, workdir, background, text.
func (r *rule) matchCall(c call, wd string) bool {
	if len(r.tools) > 0 && !slices.Contains(r.tools, c.tool) {
		return false
	}
	if r.background != nil && *r.background != c.background {
		return false
	}
	if len(r.workdirs) > 0 && !anyMatch(r.workdirs, wd) {
		return false
	}
	if r.text != nil && !r.text.MatchString(c.command) {
		return false
	}
	return true
}

// matchCommand reports whether the rule at position i matches sc.
func (p *Policy) matchCommand(i int, sc *simpleCommand) bool {
	if sc.pwsh {
		return p.matchPwshCommand(i, sc)
	}
	return p.rules[i].matchCommand(sc)
}

// matchCommand checks the per-command matchers; all given must hold.
func (r *rule) matchCommand(sc *simpleCommand) bool {
	return r.Rule.Match(sc.name, sc.Argv) && r.matchRedirects(sc)
}

// matchRedirects checks the matchers on redirections.
func (r *rule) matchRedirects(sc *simpleCommand) bool {
	if r.redirects == nil {
		return true
	}
	for _, t := range sc.Redirects {
		if anyMatch(r.redirects, t) {
			return true
		}
	}
	return false
}

func anyMatch[T interface{ MatchString(string) bool }](res []T, s string) bool {
	return cmdmatch.AnyMatch(res, s)
}

// ruleMatches reports whether rule r matches command (for examples): call
// level matchers other than text are taken as met, since an example is only
// a command. The example is a pwsh command if the rule's first tool is
// pwsh, else a bash command.
func (p *Policy) ruleMatches(r *rule, command string) (bool, error) {
	if r.text != nil && !r.text.MatchString(command) {
		return false, nil
	}
	if !r.perCommand {
		return true, nil
	}
	analyzeTool := analyze
	if len(r.tools) > 0 && r.tools[0] == "pwsh" {
		analyzeTool = analyzePwsh
	}
	cmds, err := analyzeTool(command)
	if err != nil {
		return false, err
	}
	at := slices.Index(p.rules, r)
	for i := range cmds {
		if !cmds[i].Dynamic && p.matchCommand(at, &cmds[i]) {
			return true, nil
		}
	}
	return false, nil
}

// checkExamples proves the policy's intent at load: every rule's examples
// and every test.
func checkExamples(l *located, p *Policy, f *fileSchema) {
	byName := map[string]*rule{}
	for _, r := range p.rules {
		byName[r.Name] = r
	}
	for i := range f.Rules {
		r := byName[f.Rules[i].Name]
		if r == nil || r.index != i {
			continue
		}
		for j, ex := range r.examples.Match {
			key := fmt.Sprintf("rules[%d].examples.match[%d]", i, j)
			ok, err := p.ruleMatches(r, ex)
			switch {
			case err != nil:
				l.addf(key, "%q cannot be parsed: %v", clip.To(ex, 80), err)
			case !ok:
				l.addf(key, "rule %s does not match %q", r.Name, clip.To(ex, 80))
			}
		}
		for j, ex := range r.examples.NotMatch {
			key := fmt.Sprintf("rules[%d].examples.not_match[%d]", i, j)
			if ok, _ := p.ruleMatches(r, ex); ok {
				l.addf(key, "rule %s matches %q, which it should not", r.Name, clip.To(ex, 80))
			}
		}
	}
	for i, t := range f.Tests {
		key := fmt.Sprintf("tests[%d]", i)
		want, ok := parseDecision(t.Decision)
		if !ok {
			l.addf(key+".decision", "%q is not a decision (allow, ask or deny)", t.Decision)
			continue
		}
		tool := t.Tool
		if tool == "" {
			tool = "bash"
		}
		if tool != "bash" && tool != "pwsh" {
			l.addf(key+".tool", "%q: must be bash or pwsh", t.Tool)
			continue
		}
		v := p.evaluate(call{tool: tool, command: t.Command, workdir: t.Workdir, background: t.Background, permissions: t.Permissions})
		if v.Decision != want {
			l.addf(key, "%q is %s (rule %s: %s), want %s", clip.To(t.Command, 80), v.Decision, v.Rule, v.Reason, want)
		}
	}
}

// execRules is what the exec check enforces for call c, which was allowed
// (approved: by an approver, after an ask): the rules that deny or ask,
// match commands by their argv alone (not by redirections, which an exec
// does not show), and whose call-level matchers hold for c. An ask rule
// that matched a command the approver was shown is left out of an
// approved call: the approver saw what it runs. nil when none applies.
func (p *Policy) execRules(c call, approved bool) *cmdmatch.Set {
	wd := c.workdir
	if wd == "" {
		wd = "."
	}
	wd = path.Clean(wd)
	var seen []simpleCommand
	if approved {
		analyzeTool := analyze
		if c.tool == "pwsh" {
			analyzeTool = analyzePwsh
		}
		seen, _ = analyzeTool(c.command)
	}
	var out []cmdmatch.Spec
	for i, r := range p.rules {
		if r.Decision == Allow || r.Rule.Empty() || r.redirects != nil || !r.matchCall(c, wd) {
			continue
		}
		if r.Decision == Ask && approved && slices.ContainsFunc(seen, func(sc simpleCommand) bool { return p.matchCommand(i, &sc) }) {
			continue
		}
		out = append(out, r.exec)
	}
	if len(out) == 0 {
		return nil
	}
	return &cmdmatch.Set{Policy: p.Tenant, Rules: out}
}
