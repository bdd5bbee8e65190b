package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/secrets/origintest"
)

// TestServeWorkloads: what agents do every day, through `shellbox serve`
// in a sandbox of the clients image on each engine and runtime (Docker and
// containerd, runc and gVisor; the four in parallel, each one server and
// one session running the workloads in sequence, each workload's time
// logged):
//   - devserver: python3 -m http.server in a background task serves a file
//     of /workspace to the next call's curl; bash_kill ends it.
//   - git: init, two commits, git log shows both.
//   - pip: python3 -m venv, then the venv's pip installs a wheel (made
//     here) from a PEP 503 index of the host reached through the egress
//     relay because the tenant's policy allows it, and the package
//     imports; the same index on a host the policy does not allow is
//     refused and never asked.
//   - compile: python3 -m compileall over a tree of 1000 modules (the
//     image has no C compiler: Python's byte compiler is its build step)
//     prints more than the tail bound; the result is the bounded tail
//     ending in the broken module's error, exit code 1, and the spill
//     file, read back with the bash tool, holds every line.
//   - timeout: python3 -m unittest of a test that sleeps forever, with
//     timeoutMs: the result says it timed out, and the next call's ps
//     finds no python left.
func TestServeWorkloads(t *testing.T) { eachClientsRuntime(t, serveWorkloads) }

func serveWorkloads(t *testing.T, eng enginetest.Engine, runtime, bin string) {
	// The credential's origin is unused here: serveCredentialImage wants one.
	secret := "ghp_workloads" + strings.ToLower(strings.ReplaceAll(runtime+eng.Name, "-", ""))
	o := origintest.Credential(t, secret, http.NotFoundHandler())
	index := origintest.NewPipIndex(t, "127.0.0.5:0")
	refused := origintest.NewPipIndex(t, "127.0.0.6:0")
	session := "workloads-" + eng.Name + "-" + runtime
	cs := serveCredentialImage(t, eng, bin, clientsImage, runtime, secret, o.Port, o.CAFile, []string{index.Addr}, "", session)
	t.Cleanup(func() {
		if t.Failed() {
			for len(cs.p.logs) > 0 {
				t.Log(<-cs.p.logs)
			}
		}
	})
	w := &workloads{t: t, cs: cs}
	// The session's sandbox starts on its first call, not in a workload.
	w.bash(map[string]any{"command": "true"})

	w.run("devserver", w.devServer)
	w.run("git", w.git)
	w.run("pip", func(t *testing.T) { w.pip(t, index, refused) })
	w.run("compile", w.compile)
	w.run("timeout", w.timeout)
}

// workloads calls the tools of one session.
type workloads struct {
	t  *testing.T
	cs credentialServe
	tt *testing.T // the running workload's
}

func (w *workloads) run(name string, f func(t *testing.T)) {
	w.t.Run(name, func(t *testing.T) {
		w.tt = t
		start := time.Now()
		defer func() { t.Logf("%s: %.1fs", name, time.Since(start).Seconds()) }()
		f(t)
	})
}

// tool calls name with args, failing the workload on an error result.
func (w *workloads) tool(name string, args map[string]any) string {
	t := w.tt
	if t == nil {
		t = w.t
	}
	t.Helper()
	if _, ok := args["description"]; name == "bash" && !ok {
		args["description"] = "workload test step"
	}
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	r, err := w.cs.client.Call(ctx, w.cs.session, name, b)
	if err != nil || r.IsError {
		t.Fatalf("%s %s: %v %q", name, b, err, r.Text)
	}
	t.Logf("%.1fs: %s %.70q", time.Since(start).Seconds(), name, args["command"])
	return r.Text
}

func (w *workloads) bash(args map[string]any) string { return w.tool("bash", args) }

func (w *workloads) devServer(t *testing.T) {
	w.bash(map[string]any{"command": "mkdir -p /workspace/site && echo 'served from the workspace' >/workspace/site/hello.txt"})
	started := w.bash(map[string]any{
		"command":           "exec python3 -m http.server 8765 --bind 127.0.0.1",
		"workdir":           "/workspace/site",
		"run_in_background": true,
	})
	id, ok := strings.CutPrefix(started, "started background task ")
	if !ok {
		t.Fatalf("background start: %q", started)
	}
	// The next call: the server may still be starting.
	got := w.bash(map[string]any{"command": `for i in $(seq 150); do
  code=$(curl -s --noproxy '*' -m 5 -o /tmp/hello.out -w '%{http_code}' http://127.0.0.1:8765/hello.txt) && { cat /tmp/hello.out; echo " $code"; exit 0; }
  sleep 0.2
done; echo never answered; exit 1`})
	if got != "served from the workspace\n 200" {
		t.Errorf("curl of the dev server: %q", got)
	}
	out := w.tool("bash_output", map[string]any{"task_id": id})
	if !strings.Contains(out, `"GET /hello.txt HTTP/1.1" 200`) || !strings.HasSuffix(out, "status: running") {
		t.Errorf("bash_output of the dev server: %q", out)
	}
	if got := w.tool("bash_kill", map[string]any{"task_id": id}); got != "killed background task "+id {
		t.Errorf("bash_kill: %q", got)
	}
	if got := w.bash(map[string]any{"command": "ps -eo args | grep -c '[h]ttp.server'; curl -sS --noproxy '*' -m 5 http://127.0.0.1:8765/ 2>&1 | head -c 200"}); !strings.HasPrefix(got, "0\n") || !strings.Contains(got, "Failed to connect") {
		t.Errorf("after bash_kill the dev server lives on: %q", got)
	}
}

func (w *workloads) git(t *testing.T) {
	got := w.bash(map[string]any{"command": `set -e
git init -q -b main /workspace/repo && cd /workspace/repo
git config user.name 'Shellbox Agent' && git config user.email agent@example.com
echo 'print("hi")' >app.py && git add app.py && git commit -q -m 'Add the app'
echo '# app' >README.md && git add README.md && git commit -q -m 'Add a README'
git log --oneline --format='%s' && git ls-files`})
	if got != "Add a README\nAdd the app\nREADME.md\napp.py" {
		t.Errorf("git: %q", got)
	}
}

func (w *workloads) pip(t *testing.T, index, refused *origintest.PipIndex) {
	if got := w.bash(map[string]any{"command": "python3 -m venv /workspace/venv && /workspace/venv/bin/pip --version", "timeoutMs": 240000}); !strings.HasPrefix(got, "pip ") {
		t.Fatalf("venv: %q", got)
	}
	pip := "/workspace/venv/bin/pip install --force-reinstall --disable-pip-version-check --retries 0 --timeout 30 --index-url http://%s/simple/ " + origintest.PipProject + " 2>&1"
	got := w.bash(map[string]any{"command": fmt.Sprintf(pip, index.Addr) + "; /workspace/venv/bin/python -c 'import shellbox_workload as m; print(m.GREETING)'", "timeoutMs": 120000})
	if !strings.Contains(got, "Successfully installed "+origintest.PipProject+"-1.0") || !strings.HasSuffix(got, "\n"+origintest.PipGreeting) {
		t.Errorf("pip install from the allowed index: %q", got)
	}
	if reqs := index.Requests(); !slices.Contains(reqs, "GET /simple/"+origintest.PipProject+"/") || !slices.Contains(reqs, "GET /packages/"+origintest.PipWheel) {
		t.Errorf("the allowed index served %q", reqs)
	}
	got = w.bash(map[string]any{"command": fmt.Sprintf(pip, refused.Addr), "timeoutMs": 120000})
	if strings.Contains(got, "Successfully installed") || !strings.Contains(got, "[exit code: 1]") {
		t.Errorf("pip install from a host the policy does not allow: %q", got)
	}
	if reqs := refused.Requests(); len(reqs) != 0 {
		t.Errorf("the index the policy does not allow was asked %q", reqs)
	}
	// The relay refused it (egress to hosts without a credential is not
	// audited: the refusal is what the client sees).
	if got := w.bash(map[string]any{"command": "curl -sS -m 30 -D - -o /dev/null http://" + refused.Addr + "/simple/ | head -n 1 | tr -d '\\r'"}); got != "HTTP/1.1 403 Forbidden" {
		t.Errorf("the relay's answer for a host the policy does not allow: %q", got)
	}
	t.Logf("refused: %.300s", got)
}

func (w *workloads) compile(t *testing.T) {
	// 1000 modules and a broken one, compiled last: about 52 KB, more than
	// the 30,000 bytes of the tail bound.
	w.bash(map[string]any{"command": `set -e; mkdir -p /workspace/build/src/pkg && cd /workspace/build/src/pkg
for i in $(seq -w 1000); do printf 'def f():\n    return "%s"\n' "$i" >"mod_$i.py"; done
printf 'def broken(:\n' >zz_broken.py`})
	got := w.bash(map[string]any{"command": "python3 -m compileall -f /workspace/build/src", "timeoutMs": 240000})
	m := regexp.MustCompile(`\n\[output truncated; full output: (\S+)\]\n\[exit code: 1\]$`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("compileall: no truncation marker and exit code 1 at the end of %d bytes: %q", len(got), tailOf(got, 400))
	}
	kept := strings.TrimSuffix(got, m[0])
	if len(kept) > 30000 || len(kept) < 25000 || !strings.Contains(kept, "zz_broken.py") || !strings.Contains(kept, "SyntaxError") || strings.Contains(kept, "mod_0001.py") {
		t.Errorf("compileall's kept tail (%d bytes) is not the last 30,000 bytes ending in the error: %q ... %q", len(kept), kept[:min(len(kept), 200)], tailOf(kept, 400))
	}
	// The model reads the spill file with its own tool.
	// Its end is the kept tail (and the newline the result drops).
	sum := sha256.Sum256([]byte(kept + "\n"))
	spill := w.bash(map[string]any{"command": fmt.Sprintf("wc -c <%[1]s; head -n 2 %[1]s; grep -c \"^Compiling '/workspace/build/src/pkg/mod_\" %[1]s; tail -c %d %[1]s | sha256sum", m[1], len(kept)+1)})
	t.Logf("compileall: %d bytes kept; spill %s: %.200q", len(kept), m[1], spill)
	lines := strings.Split(spill, "\n")
	size, _ := strconv.Atoi(lines[0])
	if len(lines) != 5 || size < 50000 || size > 60000 || lines[1] != "Listing '/workspace/build/src'..." || lines[2] != "Listing '/workspace/build/src/pkg'..." || lines[3] != "1000" || lines[4] != fmt.Sprintf("%x  -", sum) {
		t.Errorf("the spill file: %q", spill)
	}
}

func (w *workloads) timeout(t *testing.T) {
	w.bash(map[string]any{"command": `mkdir -p /workspace/tests && printf 'import time, unittest\n\nclass T(unittest.TestCase):\n    def test_hangs(self):\n        time.sleep(100000)\n' >/workspace/tests/test_hang.py`})
	got := w.bash(map[string]any{"command": "python3 -m unittest -v test_hang", "workdir": "/workspace/tests", "timeoutMs": 3000})
	if !strings.Contains(got, "test_hangs (test_hang.T.test_hangs)") || !strings.Contains(got, "\n[timed out after 3000ms]\n[killed by signal: ") {
		t.Errorf("unittest past its timeout: %q", got)
	}
	if got := w.bash(map[string]any{"command": "ps -eo pid,args | grep '[p]ython3' || echo none"}); got != "none" {
		t.Errorf("after the timeout the sandbox still runs:\n%s", got)
	}
}

func tailOf(s string, n int) string { return s[max(0, len(s)-n):] }
