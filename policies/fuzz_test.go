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
		if v.Decision == Allow && (v.Rule == RuleDynamic || v.Rule == RuleUnparseable) {
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
		if v.Decision == Allow && (v.Rule == RuleDynamic || v.Rule == RuleUnparseable) {
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
