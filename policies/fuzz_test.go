package policies

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzLoad: no file, however broken, panics the loader; a file it accepts
// decides any command without panicking.
func FuzzLoad(f *testing.F) {
	// Small seeds: the fuzzer minimizes every new interesting input by
	// running it many times, and a whole example file makes that take the
	// whole run. The examples are covered by TestExamplesLoad.
	f.Add([]byte(goodPolicy))
	f.Add([]byte("default: allow\nrules:\n  - {name: a, decision: deny, match: {command: [rm], prefix: [git push]}, examples: {match: [rm x], not_match: [ls]}}\n"))
	f.Add([]byte("tests: [{command: 'ls', tool: pwsh, decision: allow, permissions: [network]}]\nescalations: {default: ask, rules: [{name: n, permissions: ['net*'], decision: allow}]}\n"))
	f.Add([]byte("rules:\n  - {name: a, decision: deny, match: {args: ['[a'], argsRegex: ['(']}}\n"))
	f.Add([]byte("a: &x [1]\nb: *x\n"))
	f.Add([]byte("sandbox: {memory: 99999999999999999999TiB}\n"))
	f.Add([]byte("limits: {defaultTimeout: -5s}\ntests: [{command: 'rm x', decision: allow}]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := parse("/p/fz.yaml", src)
		if err != nil {
			if _, ok := err.(*LoadError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		p.evaluate(call{tool: "bash", command: "ls | xargs rm; $(x)", permissions: []string{"network"}})
	})
}

// FuzzDecide: no command panics the matcher, and a command that cannot be
// read statically is never allowed by a policy whose default is allow.
func FuzzDecide(f *testing.F) {
	for _, c := range decisionCases {
		f.Add(c.cmd)
	}
	for _, c := range bypassCases {
		f.Add(c.cmd)
	}
	// Shapes of the bypass classes the fuzzer can mutate: option clusters,
	// later-evaluated strings, variables, command options.
	for _, c := range []string{"env -vS 'rm x' -u A", "xargs --rep=X -iY -I Z rm", "sudo -uroot -EH -- A=1 rm",
		"bash /dev/fd/3 3<<<'rm x'", "source /dev/stdin <<<'rm x'", "trap -- 'rm x' EXIT INT", "mapfile -tC 'rm x' -c1 a",
		"x='a[$(rm x)]'; (( x )); echo ${!x} ${x@P}", "declare -n r='a[`rm x`]'; read -r 'b[$(rm)]'; test -v 'c[${x}]'",
		"export BASH_ENV=/tmp/x PATH=/tmp:$PATH; PS4='$(rm x)' PROMPT_COMMAND=('rm x')", "flock -w5 /tmp/l -c 'rm x'",
		"script -qc 'rm x' /dev/null", "sed -ne '1!G;h;$p;s/a/b/e' f", "tar -xf a --to-c='rm x' --checkpoint-action=exec=ls",
		"git -c core.pager='rm x' -C d config alias.x '!rm'", `awk -v x=1 'BEGIN{print | "rm"}'`, "ssh -oProxyCommand='rm' h",
		`tmux -L s ls \; new 'rm'`, "setarch x86_64 -R unshare -r nsenter -t1 -m chrt 1 taskset 1 prlimit -n1 rm x",
		`local "x=$1" 'y[$(rm)]=2'`, "complete -W '$(rm x)' -C 'rm' x"} {
		f.Add(c)
	}
	for _, c := range []string{"ls -la", "git status", "sudo -u x rm y", "timeout 5 nice -n 3 rm -- x", "env A=1 B=2 ls",
		"xargs -n 1 rm", "eval rm x", "bash -c ls", "make  -j4\t all", "if", "export A=1", "a=b c"} {
		f.Add(c)
	}
	p := loadExample(f, "ci-agent")
	f.Fuzz(func(t *testing.T, cmd string) {
		if _, ok := plainWords(cmd); ok {
			fast, err1 := analyze(cmd)
			slow, err2 := analyzeParsed(cmd)
			if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%q: plain words\n%+v (%v)\nparsed\n%+v (%v)", cmd, fast, err1, slow, err2)
			}
		}
		v := p.evaluate(call{tool: "bash", command: cmd})
		switch v.Decision {
		case Allow, Ask, Deny:
		default:
			t.Fatalf("%q: decision %q", cmd, v.Decision)
		}
		if v.Decision == Allow && (v.Rule == RuleDynamic || v.Rule == RuleUnparseable || v.Rule == RuleOpaque) {
			t.Fatalf("%q: allowed by %s", cmd, v.Rule)
		}
	})
}

// FuzzPwsh: no pwsh command panics the analysis or the matcher, and one
// that cannot be read statically is never allowed by a policy whose default
// is allow.
func FuzzPwsh(f *testing.F) {
	for _, c := range pwshCases {
		f.Add(c.cmd)
	}
	for _, c := range []string{"Get-ChildItem | % { $_.Name }", "param([Parameter(Mandatory)][string]$x = (gci))",
		"@'\nx\n'@ | iex", "class A : B { static [int]$x = 1; A() : base(1) { } }", "enum E { A = 1; B }",
		"$a = @{ k = { ri x } }; & $a.k", "`u{72}m x", "switch -regex -file x.txt { 'a' { ri $_ } }",
		"data -SupportedCommand ConvertFrom-StringData { 'x' }", "trap [Exception] { continue }; 1/0",
		"[int[]]$a = 1,2; $a[0]++", "$x ?? 'y'; $c ? 'a' : 'b'", "using module ./m.psm1", ":outer foreach ($i in 1..2) { break outer }"} {
		f.Add(c)
	}
	p := loadPwshPolicy(f)
	f.Fuzz(func(t *testing.T, cmd string) {
		v := p.evaluate(call{tool: "pwsh", command: cmd})
		switch v.Decision {
		case Allow, Ask, Deny:
		default:
			t.Fatalf("%q: decision %q", cmd, v.Decision)
		}
		if v.Decision == Allow && (v.Rule == RuleDynamic || v.Rule == RuleUnparseable || v.Rule == RuleOpaque) {
			t.Fatalf("%q: allowed by %s", cmd, v.Rule)
		}
		// The same command run by pwsh -c from bash is not allowed when the
		// pwsh tool's call is not (no-psdrive is a rule for the pwsh tool only).
		if strings.ContainsAny(cmd, "'\x00") || len(cmd) > 1000 || v.Rule == "no-psdrive" {
			return
		}
		if b := p.evaluate(call{tool: "bash", command: "pwsh -c '" + cmd + "'"}); b.Decision == Allow && v.Decision != Allow {
			t.Fatalf("%q: %s as pwsh, %s as pwsh -c from bash (%s)", cmd, v.Decision, b.Decision, b.Rule)
		}
	})
}

// spellingsPolicy denies rm by name, a force push by prefix and a
// recursive cp by argument; everything else is allowed.
const spellingsPolicy = `default: allow
unparseable: ask
rules:
  - {name: no-rm, decision: deny, match: {command: [rm]}}
  - {name: no-force-push, decision: deny, match: {prefix: ["git push --force"]}}
  - {name: no-recursive, decision: deny, match: {command: [cp], args: ["-r*", "--recursive"]}}
`

// spelling builds, from the fuzzer's bytes, a command that runs what
// spellingsPolicy denies, spelled as bash (or sh, dash, a wrapper) would
// still run it: quote splits, brace and glob patterns, tilde expansions,
// here-document escapes, option clusters and abbreviations, and values
// built at run time that arithmetic evaluates.
type spelling struct {
	b []byte
	i int
}

// pick is the next choice among n (0 once the bytes run out).
func (s *spelling) pick(n int) int {
	if s.i >= len(s.b) {
		return 0
	}
	v := int(s.b[s.i]) % n
	s.i++
	return v
}

// split spells word with quotes and escapes that bash removes.
func (s *spelling) split(word string) string {
	var b strings.Builder
	for i := 0; i < len(word); i++ {
		c := string(word[i])
		switch s.pick(6) {
		case 1:
			b.WriteString("''" + c)
		case 2:
			b.WriteString(`""` + c)
		case 3:
			b.WriteString(`\` + c)
		case 4:
			b.WriteString("'" + c + "'")
		case 5:
			b.WriteString(`"` + c + `"`)
		default:
			b.WriteString(c)
		}
	}
	return b.String()
}

// rm is a statement that runs rm x, with what must run before it.
func (s *spelling) rm() (prelude, cmd string) {
	switch s.pick(8) {
	case 1:
		return "", "/usr/bin/" + s.split("rm") + " x"
	case 2:
		return "", "{" + s.split("rm") + ",} x"
	case 3:
		return "", s.split("r") + "{" + s.split("m") + ",} x"
	case 4:
		return "", s.split("r") + "[" + s.split("m") + "] x"
	case 5:
		return "", s.split("r") + "?" + " x"
	case 6:
		v := []string{"HOME", "~", "OLDPWD", "~-", "PWD", "~+"}
		k := 2 * s.pick(3)
		return v[k] + "=/usr/bin/rm; ", v[k+1] + " x"
	case 7:
		return "", "~/" + s.split("rm") + " x"
	}
	return "", s.split("rm") + " -" + []string{"rf", "fr", "r -f"}[s.pick(3)] + " x"
}

// push is a force push: git's own options first, --force abbreviated.
func (s *spelling) push() string {
	global := []string{"", " -C /x", " --no-pager", " -c a.b=c", " --git-dir=/x/.git", " -P"}[s.pick(6)]
	force := "--force"[:3+s.pick(5)]
	return "git" + global + " push " + force + " origin main"
}

// cp is a recursive cp: -r clustered, or --recursive abbreviated.
func (s *spelling) cp() string {
	opt := []string{"-r", "-fr", "-rv", "-vfr", "-f -r", "--recursive", "--recur", "--rec"}[s.pick(8)]
	return "cp " + opt + " a b"
}

// arith builds a value at run time that arithmetic evaluates with rm in a
// subscript.
func (s *spelling) arith() string {
	set := []string{`b='$(rm y)'; a="x[$b]"`, `a=$'x[$(rm y)]'`, `printf -v a 'x[$(r%s y)]' m`,
		`read -r a <<< "$(printf 'x[$(rm y)]')"`, `a=$(printf 'x[$(rm y)]')`}[s.pick(5)]
	use := []string{"(( a ))", "echo $(( a ))", "let a", "[[ $a -eq 1 ]]", "echo ${arr[a]}", "for ((i=0; i<a; i++)); do :; done"}[s.pick(6)]
	return set + "; " + use
}

// wrap runs the script through a wrapper that keeps its meaning.
func (s *spelling) wrap(prelude, cmd string) string {
	quote := func(x string) string { return "'" + strings.ReplaceAll(x, "'", `'\''`) + "'" }
	switch s.pick(7) {
	case 1:
		return "bash -c " + quote(prelude+cmd)
	case 2:
		return "sh -c " + quote(prelude+cmd)
	case 3:
		// An unquoted here-document: each backslash doubled, and a
		// backslash-newline that the shell removes.
		body := strings.ReplaceAll(prelude+cmd, `\`, `\\`)
		if k := s.pick(len(body) + 1); k > 0 && k < len(body) && body[k-1] != '\\' {
			body = body[:k] + "\\\n" + body[k:]
		}
		return "bash <<EOF\n" + body + "\nEOF"
	case 4:
		if prelude == "" {
			return "env " + cmd
		}
	case 5:
		if prelude == "" {
			return "sudo -u root " + cmd
		}
	case 6:
		return "eval " + quote(prelude+cmd)
	}
	return prelude + cmd
}

// FuzzSpellings: no spelling of a denied command is allowed.
func FuzzSpellings(f *testing.F) {
	for _, seed := range [][]byte{{0}, {1, 2, 3, 4}, {2, 1, 5}, {3, 2, 2}, {4, 0, 1}, {5}, {6, 2}, {7, 3, 1, 4},
		{8, 1}, {9, 2, 3}, {10, 4}, {11, 5, 5}, {0, 6, 3}, {1, 1, 1, 1, 3}, {3, 0, 0, 0, 3, 7}} {
		f.Add(seed)
	}
	p, err := Parse("/p/spellings.yaml", []byte(spellingsPolicy))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &spelling{b: b}
		var prelude, cmd string
		switch s.pick(4) {
		case 0:
			prelude, cmd = s.rm()
		case 1:
			cmd = s.push()
		case 2:
			cmd = s.cp()
		case 3:
			cmd = s.arith()
		}
		command := s.wrap(prelude, cmd)
		if v := p.evaluate(call{tool: "bash", command: command}); v.Decision == Allow {
			t.Fatalf("%q is allowed (rule %s: %s)", command, v.Rule, v.Reason)
		}
	})
}
