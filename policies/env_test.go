package policies

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/tools"
)

const envPolicy = `default: allow
env:
  GOFLAGS: -mod=mod
  Mixed_Case: kept as written
  mixed_case: another variable
  EMPTY: ""
  PATH: /opt/tools/bin:/usr/bin:/bin
`

// The names keep their case (viper would fold them), and the values are
// exactly as written.
func TestLoadEnv(t *testing.T) {
	p, err := Parse("/p/acme.yaml", []byte(envPolicy))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"GOFLAGS": "-mod=mod", "Mixed_Case": "kept as written", "mixed_case": "another variable",
		"EMPTY": "", "PATH": "/opt/tools/bin:/usr/bin:/bin"}
	if !maps.Equal(p.Env, want) {
		t.Errorf("Env = %v, want %v", p.Env, want)
	}
	if p, err := Parse("/p/acme.yaml", []byte("default: allow\n")); err != nil || p.Env != nil {
		t.Errorf("no env: %v, %v", p.Env, err)
	}
}

// Bad names and values are load errors naming the file, the line and the
// variable.
func TestLoadEnvErrors(t *testing.T) {
	var many, big strings.Builder
	many.WriteString("env:\n")
	for i := range maxEnvVars + 1 {
		fmt.Fprintf(&many, "  V%d: x\n", i)
	}
	fmt.Fprintf(&big, "env:\n  A: %s\n  B: %s\n", strings.Repeat("a", maxEnvBytes/2), strings.Repeat("b", maxEnvBytes/2))
	cases := []struct {
		name, src, want string
	}{
		{"not a name", "env:\n  OK: x\n  1X: y\n", `acme.yaml:3: env.1X: "1X" is not a variable name: letters, digits and _, not starting with a digit`},
		{"dash", "env:\n  MY-VAR: y\n", `acme.yaml:2: env.MY-VAR: "MY-VAR" is not a variable name`},
		{"managed", "env:\n  DSH_SESSION_ID: mine\n", "acme.yaml:2: env.DSH_SESSION_ID: DSH_* variables are shellbox's managed environment; a policy cannot set them"},
		{"managed fact", "env:\n  DSH_PROJECT: x\n", "acme.yaml:2: env.DSH_PROJECT: DSH_* variables"},
		{"agent's", "env:\n  SHELLBOX_SPILL_BYTES: \"1\"\n", "acme.yaml:2: env.SHELLBOX_SPILL_BYTES: SHELLBOX_* variables configure shellbox and its agent"},
		{"NUL", "env:\n  A: \"x\\0y\"\n", "acme.yaml:2: env.A: the value contains a NUL byte"},
		{"integer", "env:\n  A: 1\n", "acme.yaml:2: env.A: expected a string, got integer 1 (quote it)"},
		{"no value", "env:\n  A:\n", `acme.yaml:2: env.A: no value (write "" for an empty one)`},
		{"twice", "env:\n  A: x\n  A: y\n", "acme.yaml:3: env.A: key given twice"},
		{"list", "env: [A]\n", "acme.yaml:1: env: expected a mapping, got a list"},
		{"integer name", "env:\n  7: x\n", "acme.yaml:2: env.7: expected a name as key, got integer 7"},
		{"too many", many.String(), fmt.Sprintf("acme.yaml:1: env: %d variables: at most %d", maxEnvVars+1, maxEnvVars)},
		{"too big", big.String(), fmt.Sprintf("acme.yaml:1: env: %d bytes (NAME=VALUE summed): at most %d", maxEnvBytes+4, maxEnvBytes)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("/p/acme.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), "/p/"+c.want) {
				t.Errorf("err = %v\nwant %s", err, c.want)
			}
		})
	}
}

// Check adds the policy's variables to an allowed call's request, over what
// the request had, without changing the caller's map.
func TestCheckAddsEnv(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", envPolicy)
	e := openEngine(t, dir, Options{NoWatch: true})
	c := bashCall("acme", "ls")
	c.Request.Env = map[string]string{"GOFLAGS": "from the request", "OTHER": "kept"}
	req, err := e.Check(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if req.Env["GOFLAGS"] != "-mod=mod" || req.Env["OTHER"] != "kept" || req.Env["Mixed_Case"] != "kept as written" {
		t.Errorf("Env = %v", req.Env)
	}
	if c.Request.Env["GOFLAGS"] != "from the request" || len(c.Request.Env) != 2 {
		t.Errorf("the caller's map changed: %v", c.Request.Env)
	}
}

// A command sees the policy's variables, over the executor's base
// environment (PATH here), and the managed DSH_* over everything.
func TestPolicyEnvReachesCommand(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", envPolicy)
	e := openEngine(t, dir, Options{NoWatch: true})
	root := t.TempDir()
	ex, err := local.New(local.Config{Root: root, SpillDir: t.TempDir(), Limits: executor.DefaultLimits(),
		BaseEnv: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + root}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close(context.Background()) })
	ts, err := tools.New(ex, tools.Config{Gate: e, Home: root, Facts: map[string]string{"DSH_PROJECT": "p"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Close)
	res := ts.Call(context.Background(), tools.Invocation{Tenant: "acme", Session: "s1", Tool: tools.ToolBash,
		Args: []byte(`{"command":"echo \"$GOFLAGS|$Mixed_Case|$mixed_case|$PATH|$LANG|$DSH_SESSION_ID|$DSH_PROJECT\"","description":"show the environment"}`)})
	want := "-mod=mod|kept as written|another variable|/opt/tools/bin:/usr/bin:/bin|C.UTF-8|s1|p"
	if res.IsError || res.Text != want {
		t.Errorf("got %q, want %q", res.Text, want)
	}
}
