package cmdmatch

import (
	"encoding/json"
	"testing"
)

// TestMatch: the per-command matchers, as both sides use them; a spelled
// rule (ask, deny) also matches the option spellings, an unspelled one
// (allow) only what is written.
func TestMatch(t *testing.T) {
	spec := Spec{Rule: "r", Decision: Deny, Command: []string{"rm", "shr?d"}, Prefix: []string{"git push --force"},
		Args: []string{"-r*"}, ArgsRegex: []string{"^--no-preserve-root$"}}
	cases := []struct {
		spec    Spec
		spelled bool
		name    string
		argv    []string
		want    bool
	}{
		{Spec{Command: []string{"rm"}}, true, "rm", []string{"rm", "x"}, true},
		{Spec{Command: []string{"rm"}}, true, "del", []string{"del", "x"}, false},
		{Spec{Command: []string{"shr?d"}}, true, "shred", []string{"shred"}, true},
		{Spec{Prefix: []string{"/usr/bin/git push --force"}}, true, "git", []string{"git", "push", "--forc"}, true},
		{Spec{Prefix: []string{"git push --force"}}, true, "git", []string{"git", "-C", "/x", "push", "--force"}, true},
		{Spec{Prefix: []string{"git push --force"}}, false, "git", []string{"git", "push", "--forc"}, false},
		{Spec{Prefix: []string{"git push --force"}}, true, "git", []string{"git", "pull", "--force"}, false},
		{Spec{Command: []string{"rm"}, Args: []string{"-r"}}, true, "rm", []string{"rm", "-fr", "x"}, true},
		{Spec{Command: []string{"rm"}, Args: []string{"-r"}}, false, "rm", []string{"rm", "-fr", "x"}, false},
		{Spec{Command: []string{"rm"}, Args: []string{"--recursive"}}, true, "rm", []string{"rm", "--recur", "x"}, true},
		{Spec{ArgsRegex: []string{"^--no-preserve-root$"}}, true, "rm", []string{"rm", "--no-preserve-root"}, true},
		{spec, true, "rm", []string{"rm", "x"}, false}, // every matcher must hold
		{Spec{}, true, "anything", []string{"anything"}, true},
		// Options past 64 words still lead to the next one.
		{Spec{Prefix: []string{"git push"}}, true, "git", append(append([]string{"git"}, manyOpts(70)...), "push", "--force"), true},
	}
	for _, c := range cases {
		r, err := Compile(c.spec, c.spelled, nil)
		if err != nil {
			t.Fatalf("%+v: %v", c.spec, err)
		}
		if got := r.Match(c.name, c.argv); got != c.want {
			t.Errorf("%+v spelled=%v: %s %q: got %v, want %v", c.spec, c.spelled, c.name, c.argv, got, c.want)
		}
	}
}

// TestCompileErrors: each bad pattern is named by field and index.
func TestCompileErrors(t *testing.T) {
	var got []string
	Compile(Spec{Command: []string{"/bin/rm", "ok"}, Prefix: []string{" "}, Args: []string{"[x"}, ArgsRegex: []string{"("}}, true,
		func(e *FieldError) { got = append(got, e.Field) })
	want := []string{"command", "prefix", "args", "argsRegex"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if _, err := Compile(Spec{Args: []string{"[x"}}, true, nil); err == nil {
		t.Error("a bad glob compiled")
	}
	many := make([]string, MaxPatterns+1)
	for i := range many {
		many[i] = "x"
	}
	if _, err := Compile(Spec{Command: many}, true, nil); err == nil {
		t.Error("more than MaxPatterns compiled")
	}
}

// TestSetWire: a Set survives the wire the way the agent reads it.
func TestSetWire(t *testing.T) {
	in := Set{Policy: "acme", Rules: []Spec{{Rule: "no-rm", Decision: Deny, Reason: "why", Command: []string{"rm"}, Prefix: []string{"git push"}}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Set
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Policy != in.Policy || len(out.Rules) != 1 || out.Rules[0].Reason != "why" || out.Rules[0].Prefix[0] != "git push" {
		t.Errorf("%s -> %+v", b, out)
	}
}

// manyOpts is n words of "-c a.b=1"-style options.
func manyOpts(n int) []string {
	out := make([]string, 0, n)
	for i := 0; i < n; i += 2 {
		out = append(out, "-c", "a.b=1")
	}
	return out
}
