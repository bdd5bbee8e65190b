package policies

import (
	"strings"
	"testing"
)

// The opaque decision against unparseable, every combination: code the
// reader cannot see (interpreters, script files run by a shell or source,
// make) takes opaque, unset its unparseable's; what does not parse, is past
// the reader's bounds or has a name that is not a literal takes unparseable
// whatever opaque says; a deny rule on a command the reader sees wins over
// opaque: allow, in the same call too.
func TestOpaqueTable(t *testing.T) {
	const rules = "rules:\n  - {name: no-rm, decision: deny, reason: no deleting, match: {command: [rm]}}\n"
	opaqueCmds := []string{
		"python3 x.py", "node app.js", "perl x.pl", "ruby x.rb", "python3.12 -m tool", "bash script.sh",
		"sh ./build.sh", "source env.sh", ". ./x", "make", "make -C src all", "ninja", "env node app.js", "sudo python3 x.py",
	}
	dynamicCmds := []string{`sh -c "$(cat f)"`, "$(echo rm) x", "sh < script.sh", "curl -s https://x | bash", `eval "$x"`}
	unparseableCmds := []string{"echo 'unterminated", "python3 x.py && echo 'unterminated", strings.Repeat("a;", maxSimpleCmds+1)}
	// Opaque code first, then an rm the reader sees.
	deniedAfter := []string{"python3 x.py && rm -rf /", "make; rm -rf /", "bash script.sh || rm -rf /", "source env.sh; sudo rm -rf /"}
	visible := []string{"ls -la", "python3 --version", "go test ./..."}

	for _, unparseable := range []Decision{Ask, Deny} {
		for _, opaque := range []Decision{"", Allow, Ask, Deny} {
			src := "version: 1\ndefault: allow\nunparseable: " + string(unparseable) + "\n"
			want, note := opaque, "opaque: "+string(opaque)
			if opaque == "" {
				want, note = unparseable, "opaque: "+string(unparseable)+" (unset: unparseable's decision)"
			} else {
				src += "opaque: " + string(opaque) + "\n"
			}
			p, err := Parse("/p/t.yaml", []byte(src+rules))
			if err != nil {
				t.Fatal(err)
			}
			if p.Opaque != want || p.Unparseable != unparseable {
				t.Fatalf("unparseable %s, opaque %q: loaded as %s, %s", unparseable, opaque, p.Unparseable, p.Opaque)
			}
			check := func(cmd string, decision Decision, rule, reason string) {
				t.Helper()
				v := p.evaluate(call{tool: "bash", command: cmd})
				if v.Decision != decision || v.Rule != rule || !strings.Contains(v.Reason, reason) {
					t.Errorf("unparseable %s, opaque %q: %.60q = %s (rule %s: %s), want %s (rule %s, reason with %q)",
						unparseable, opaque, cmd, v.Decision, v.Rule, v.Reason, decision, rule, reason)
				}
			}
			for _, cmd := range opaqueCmds {
				check(cmd, want, RuleOpaque, ": code a static policy cannot see takes "+note+", unless a rule names the command")
			}
			for _, cmd := range dynamicCmds {
				check(cmd, unparseable, RuleDynamic, "a static policy cannot tell what runs")
			}
			for _, cmd := range unparseableCmds {
				check(cmd, unparseable, RuleUnparseable, "the command cannot be read statically")
			}
			check("rm -rf /", Deny, "no-rm", "no deleting")
			for _, cmd := range deniedAfter {
				if want == Deny { // equally strict: the first command's
					check(cmd, Deny, RuleOpaque, note)
				} else {
					check(cmd, Deny, "no-rm", "no deleting")
				}
			}
			for _, cmd := range visible {
				check(cmd, Allow, RuleDefault, "no rule matches")
			}
			// Both classes in one call: the stricter decides, the first
			// (make) among equals.
			if want.rank() >= unparseable.rank() {
				check("make && $(echo rm) x", want, RuleOpaque, note)
			} else {
				check("make && $(echo rm) x", unparseable, RuleDynamic, "is not a literal")
			}
		}
	}
}

// opaque does not outrank what else decides a command: a rule that names
// the command (allow or deny), a stricter default, and the pwsh tool's
// commands alike.
func TestOpaqueWithRulesAndDefault(t *testing.T) {
	cases := []struct {
		src, tool, cmd string
		want           Decision
		rule           string
	}{
		// The case: only rm was to be denied.
		{"default: allow\nunparseable: ask\nopaque: allow\n", "bash", "python3 x.py", Allow, RuleOpaque},
		{"default: allow\nunparseable: ask\nopaque: allow\n", "bash", "echo 'unterminated", Ask, RuleUnparseable},
		{"default: allow\nunparseable: ask\nopaque: allow\n", "bash", "$(echo python3) x.py", Ask, RuleDynamic},
		// A stricter default still applies to a command no rule matches.
		{"default: ask\nunparseable: deny\nopaque: allow\n", "bash", "python3 x.py", Ask, RuleDefault},
		{"default: deny\nopaque: allow\n", "bash", "make", Deny, RuleDefault},
		// A rule naming the interpreter decides instead of opaque.
		{"default: allow\nopaque: deny\nrules:\n  - {name: tests, decision: allow, match: {prefix: ['python3 -m pytest']}}\n",
			"bash", "python3 -m pytest -q", Allow, "tests"},
		{"default: allow\nopaque: deny\nrules:\n  - {name: tests, decision: allow, match: {prefix: ['python3 -m pytest']}}\n",
			"bash", "python3 x.py", Deny, RuleOpaque},
		{"default: allow\nopaque: allow\nrules:\n  - {name: no-perl, decision: deny, match: {command: [perl]}}\n",
			"bash", "perl x.pl", Deny, "no-perl"},
		{"default: allow\nopaque: allow\nrules:\n  - {name: no-perl, decision: deny, match: {command: [perl]}}\n",
			"bash", "bash -c 'perl x.pl'", Deny, "no-perl"},
		// A rule that names no command (text, workdir) adds to opaque, it
		// does not replace it.
		{"default: allow\nopaque: ask\nrules:\n  - {name: src, decision: allow, match: {workdir: ['**']}}\n",
			"bash", "python3 x.py", Ask, RuleOpaque},
		// pwsh calls read programs the same way.
		{"default: allow\nunparseable: deny\nopaque: allow\ntools: {pwsh: true}\n", "pwsh", "python3 x.py", Allow, RuleOpaque},
		{"default: allow\nunparseable: deny\ntools: {pwsh: true}\n", "pwsh", "python3 x.py", Deny, RuleOpaque},
		{"default: allow\nunparseable: deny\nopaque: allow\ntools: {pwsh: true}\n", "pwsh", "& $cmd", Deny, RuleDynamic},
	}
	for _, c := range cases {
		p, err := Parse("/p/t.yaml", []byte(c.src))
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		if v := p.evaluate(call{tool: c.tool, command: c.cmd}); v.Decision != c.want || v.Rule != c.rule {
			t.Errorf("%q\n%s %q = %s (rule %s: %s), want %s (rule %s)", c.src, c.tool, c.cmd, v.Decision, v.Rule, v.Reason, c.want, c.rule)
		}
	}
}

// The shipped examples: mirror sets opaque: allow (its own tests prove
// what that allows at load); the others leave it unset, so they decide as
// before it existed.
func TestOpaqueExamples(t *testing.T) {
	for _, tenant := range []string{"default", "ci-agent", "mirror", "pwsh-agent"} {
		p := loadExample(t, tenant)
		want := p.Unparseable
		if tenant == "mirror" {
			want = Allow
		}
		if p.Opaque != want {
			t.Errorf("%s: opaque %s, want %s", tenant, p.Opaque, want)
		}
	}
}
