package pwsh

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// What Parse hands back: names resolved, words as the reader sees them,
// and the scripts and programs that commands run, each after its runner.
func TestParse(t *testing.T) {
	type cmd struct {
		Name    string
		Args    []string
		Literal []bool
		Via     string
		Depth   int
		Scripts []string
		Flags   string // d(ynamic) w(rapper) n(ative) p(rogram)
	}
	flags := func(c Command) string {
		var b strings.Builder
		for _, f := range []struct {
			on bool
			c  byte
		}{{c.Dynamic, 'd'}, {c.Wrapper, 'w'}, {c.Native, 'n'}, {c.Program, 'p'}} {
			if f.on {
				b.WriteByte(f.c)
			}
		}
		return b.String()
	}
	T, F := true, false
	cases := []struct {
		src  string
		opts Options
		want []cmd
	}{
		{"ri -Recurse $x", Options{}, []cmd{
			{"Remove-Item", []string{"Remove-Item", "-Recurse", "$x"}, []bool{T, T, F}, "", 0, nil, "p"}}},
		{"& $cmd a", Options{}, []cmd{{"", []string{"$cmd", "a"}, []bool{F, T}, "", 0, nil, "d"}}},
		{"date", Options{}, []cmd{
			{"date", []string{"date"}, []bool{T}, "", 0, nil, "p"},
			{"Get-Date", []string{"Get-Date"}, []bool{T}, "", 0, nil, "wp"}}},
		{"iex 'bash -c ''rm x'''", Options{Depth: 1, Via: "pwsh -c"}, []cmd{
			{"Invoke-Expression", []string{"Invoke-Expression", "bash -c 'rm x'"}, []bool{T, T}, "pwsh -c", 1, nil, "w"},
			{"bash", []string{"bash", "-c", "rm x"}, []bool{T, T, T}, "Invoke-Expression", 2, []string{"Invoke-Expression"}, "p"}}},
		{"Start-Process sh '-c', 'rm x'", Options{}, []cmd{
			{"Start-Process", []string{"Start-Process", "sh", "-c", "rm x"}, []bool{T, T, T, T}, "", 0, nil, "w"},
			{"", []string{"sh", "-c", "rm", "x"}, []bool{T, T, T, T}, "Start-Process", 1, nil, "np"}}},
		{"Start-Process $p", Options{}, []cmd{
			{"Start-Process", []string{"Start-Process", "$p"}, []bool{T, F}, "", 0, nil, "w"},
			{"", nil, nil, "", 0, nil, "d"}}},
		{"x y; Set-Alias x Remove-Item", Options{}, []cmd{ // the alias applies above its definition
			{"Remove-Item", []string{"Remove-Item", "y"}, []bool{T, T}, "", 0, nil, "p"},
			{"x", []string{"x", "y"}, []bool{T, T}, "", 0, nil, "p"},
			{"Set-Alias", []string{"Set-Alias", "x", "Remove-Item"}, []bool{T, T, T}, "", 0, nil, ""},
			{"Remove-Item", []string{"Remove-Item"}, []bool{T}, "", 0, nil, "w"}}},
	}
	for _, c := range cases {
		cmds, err := Parse(c.src, c.opts)
		if err != nil {
			t.Errorf("%q: %v", c.src, err)
			continue
		}
		var got []cmd
		for _, x := range cmds {
			got = append(got, cmd{x.Name, x.Args, x.Literal, x.Via, x.Depth, x.Scripts, flags(x)})
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", c.src, got, c.want)
		}
	}
}

// A command the reader cannot see into says why.
func TestParseDynamic(t *testing.T) {
	for src, why := range map[string]string{
		"iex $x":                          "Invoke-Expression runs a string that is not a literal",
		"[scriptblock]::Create($s)":       "[scriptblock]::Create of a script that is not a literal string",
		"$ExecutionContext.InvokeCommand": "$ExecutionContext runs code rules cannot see",
		"Add-Type -TypeDefinition $src":   "Add-Type compiles and loads code rules cannot see",
	} {
		cmds, err := Parse(src, Options{})
		if err != nil {
			t.Errorf("%q: %v", src, err)
			continue
		}
		found := false
		for _, c := range cmds {
			found = found || c.Dynamic && c.Why == why
		}
		if !found {
			t.Errorf("%q: no dynamic command saying %q in %+v", src, why, cmds)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for src, want := range map[string]string{
		"Get-Date (":              "pwsh: 1:11: missing closing ')'",
		"iex 'Get-Date ('":        "Invoke-Expression: pwsh: 1:11: missing closing ')'",
		"Get-Date\x00":            "pwsh: the command contains a NUL character",
		"Write-Output 'x":         "pwsh: 1:16: missing the closing ' of a string",
		"workflow w { Get-Date }": "pwsh: 1:1: workflow is not supported here",
	} {
		if _, err := Parse(src, Options{}); err == nil || err.Error() != want {
			t.Errorf("%q: err = %v, want %s", src, err, want)
		}
	}
	if _, err := Parse("Get-Date (", Options{Depth: 1, Via: "pwsh -c"}); err == nil || !strings.HasPrefix(err.Error(), "pwsh -c: ") {
		t.Errorf("an inner script's error does not name its wrapper: %v", err)
	}
	for _, src := range []string{
		strings.Repeat("(", maxNesting+1) + "ls" + strings.Repeat(")", maxNesting+1),
		strings.Repeat("a;", maxCommands+1),
		strings.Repeat("x", maxScriptBytes+1),
	} {
		if _, err := Parse(src, Options{}); !errors.Is(err, ErrTooComplex) {
			t.Errorf("%.20q...: err = %v, want too complex", src, err)
		}
	}
	if _, err := Parse(strings.Repeat("x", maxInnerBytes+1), Options{Depth: 1, Via: "pwsh -c"}); !errors.Is(err, ErrTooComplex) {
		t.Errorf("a long inner script: err = %v, want too complex", err)
	}
	// A Budget is shared: readings that together read too much fail.
	b := &Budget{}
	src := strings.Repeat("Get-Date;", (maxInnerBytes-1)/9)
	var err error
	for i := 0; i <= maxWork/len(src) && err == nil; i++ {
		_, err = Parse(src, Options{Depth: 1, Via: "pwsh -c", Budget: b})
	}
	if !errors.Is(err, ErrTooComplex) {
		t.Errorf("a spent budget: err = %v, want too complex", err)
	}
}

func TestSplitDotnetArgs(t *testing.T) {
	for in, want := range map[string][]string{
		`-c "rm -rf /"`:     {"-c", "rm -rf /"},
		`a  b`:              {"a", "b"},
		`"a ""b"" c"`:       {`a "b" c`},
		`a\"b \\"c d"`:      {`a"b`, `\c d`},
		`'single quoted' x`: {"'single", "quoted'", "x"},
		`C:\dir\file "x y"`: {`C:\dir\file`, "x y"},
		``:                  nil,
	} {
		if got := splitDotnetArgs(in); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
