package policies

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad: no file, however broken, panics the loader; a file it accepts
// decides any command without panicking.
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"default", "ci-agent", "mirror"} {
		src, err := os.ReadFile(filepath.Join("examples", name+".yaml"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte(goodPolicy))
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
	p := loadExample(f, "ci-agent")
	f.Fuzz(func(t *testing.T, cmd string) {
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
