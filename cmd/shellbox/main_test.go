package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cli runs the command in-process with a fresh root and spill dir.
func cli(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

func isolate(t *testing.T) (root, spill string) {
	t.Helper()
	// The environment of the test process (CI exports the containerd
	// address, say) must not reach the configuration under test.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SHELLBOX_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	root, spill = t.TempDir(), t.TempDir()
	t.Setenv("SHELLBOX_LOCAL_ROOT", root)
	t.Setenv("SHELLBOX_LOCAL_SPILLDIR", spill)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Chdir(root)
	return root, spill
}

// isolateLocal is isolate on the local backend, named (SHELLBOX_BACKEND),
// for tests of what every backend does: the default, auto, would take the
// host's sandbox engine, or refuse without one.
func isolateLocal(t *testing.T) (root, spill string) {
	t.Helper()
	root, spill = isolate(t)
	t.Setenv("SHELLBOX_BACKEND", "local")
	return root, spill
}

func TestCallExitCodes(t *testing.T) {
	isolateLocal(t)
	cases := []struct {
		name string
		args []string
		want string
		code int
	}{
		{"result", []string{"call", "bash", `{"command":"echo hi; echo no >&2; exit 3","description":"mixed output"}`},
			"hi\n[stderr]\nno\n[exit code: 3]\n", 0},
		{"malformed", []string{"call", "bash", `{"command":`}, "Error: invalid arguments: malformed JSON: unexpected end of JSON input (at byte 11)\n", 1},
		{"wrong type", []string{"call", "bash", `{"command":["ls"],"description":"x"}`}, "Error: invalid command: expected a non-empty string\n", 1},
		{"unknown tool", []string{"call", "zsh", `{}`}, "Error: unknown tool: zsh\n", 1},
		{"no such task", []string{"call", "bash_output", `{"task_id":"abc"}`}, "Error: no such task: abc\n", 1},
		{"timeout", []string{"call", "bash", `{"command":"sleep 5","description":"wait","timeoutMs":200}`},
			"(no output)\n[timed out after 200ms]\n[killed by signal: SIGTERM]\n", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := cli(t, "", c.args...)
			if out != c.want || code != c.code {
				t.Fatalf("got %q (exit %d, stderr %q), want %q (exit %d)", out, code, errs, c.want, c.code)
			}
		})
	}
}

func TestCallStdinAndJSON(t *testing.T) {
	isolateLocal(t)
	out, _, code := cli(t, `{"command":"pwd","description":"print dir"}`, "call", "--json", "bash", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var res struct {
		Text    string         `json:"text"`
		IsError bool           `json:"isError"`
		Result  map[string]any `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Result["kind"] != "foreground" || res.Result["exitCode"] != float64(0) || res.IsError {
		t.Fatalf("typed result: %+v", res)
	}
}

func TestCallBigOutputSpills(t *testing.T) {
	_, spill := isolateLocal(t)
	out, _, code := cli(t, "", "call", "bash", `{"command":"head -c 50000000 /dev/zero | tr \\0 a","description":"big output"}`)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	m := regexp.MustCompile(`\n\[output truncated; full output: (\S+)\]\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no truncation marker in the last bytes: %q", out[max(0, len(out)-200):])
	}
	if tail := len(out) - len(m[0]); tail != 30000 {
		t.Fatalf("kept tail is %d bytes, want 30000", tail)
	}
	if !strings.HasPrefix(m[1], filepath.Join(spill, "default")+"/") {
		t.Fatalf("spill path %s not under %s", m[1], spill)
	}
	fi, err := os.Stat(m[1])
	if err != nil || fi.Size() != 50_000_000 {
		t.Fatalf("spill file: %v, size %d", err, fi.Size())
	}
}

func TestConfigErrors(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("limits:\n  tailBytez: 5\n"), 0o644)
	_, errs, code := cli(t, "", "call", "--config", bad, "bash", `{"command":"true","description":"noop"}`)
	if code != 2 || !strings.Contains(errs, "tailbytez") {
		t.Fatalf("unknown key: exit %d, %q", code, errs)
	}
	_, errs, code = cli(t, "", "call", "--config", filepath.Join(dir, "missing.yaml"), "bash", `{}`)
	if code != 2 || !strings.Contains(errs, "missing.yaml") {
		t.Fatalf("missing file: exit %d, %q", code, errs)
	}
	_, errs, code = cli(t, "", "call", "--backend", "nope", "bash", `{"command":"true","description":"noop"}`)
	if code != 2 || !strings.Contains(errs, `unknown backend "nope"`) {
		t.Fatalf("backend: exit %d, %q", code, errs)
	}
	_, errs, code = cli(t, "", "call", "--session", "../x", "bash", `{"command":"true","description":"noop"}`)
	if code != 2 || !strings.Contains(errs, "invalid session id") {
		t.Fatalf("session: exit %d, %q", code, errs)
	}
}

func TestConfigFileAndEnv(t *testing.T) {
	root, _ := isolateLocal(t)
	os.WriteFile(filepath.Join(root, "shellbox.yaml"), []byte("facts:\n  DSH_PROJECT: demo\nlimits:\n  tailBytes: 4\n"), 0o644)
	t.Setenv("SHELLBOX_SESSION", "from-env")
	out, errs, code := cli(t, "", "call", "bash", `{"command":"echo $DSH_PROJECT $DSH_SESSION_ID","description":"show facts"}`)
	if code != 0 || !strings.HasPrefix(out, "env\n[output truncated; full output: ") {
		t.Fatalf("got %q (exit %d, %s)", out, code, errs)
	}
	out, _, _ = cli(t, "", "call", "--session", "from-flag", "bash", `{"command":"echo $DSH_SESSION_ID","description":"show session"}`)
	if !strings.HasPrefix(out, "lag\n") { // the tail of "from-flag\n" under tailBytes: 4
		t.Fatalf("flag precedence: %q", out)
	}
}

func TestToolsAndVersion(t *testing.T) {
	isolate(t)
	out, _, code := cli(t, "", "tools")
	if code != 0 || out != "bash\nbash_output\nbash_kill\npwsh\n" {
		t.Fatalf("tools: %q", out)
	}
	for _, format := range []string{"mcp", "openai"} {
		out, _, code = cli(t, "", "tools", "--schema", "--format", format)
		var defs []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &defs) != nil || len(defs) != 4 {
			t.Fatalf("%s schema: exit %d %q", format, code, out)
		}
	}
	t.Setenv("SHELLBOX_ENABLERUNINBACKGROUND", "false")
	out, _, _ = cli(t, "", "tools", "--schema")
	if strings.Contains(out, "run_in_background") || strings.Contains(out, "bash_output") {
		t.Fatalf("background disabled but offered: %s", out)
	}
	if out, _, _ := cli(t, "", "version"); !strings.HasPrefix(out, "shellbox ") {
		t.Fatalf("version: %q", out)
	}
}
