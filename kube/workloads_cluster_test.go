package kube_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/egress"
	"github.com/shellbox/shellbox/secrets/origintest"
)

// TestClusterWorkloads: cmd/shellbox TestServeWorkloads' everyday agent
// workloads in a session pod of the clients image on the cluster (runc and
// gVisor, in parallel; one pod each, the workloads in sequence, each
// logging its time), driven through the pod's agent as the server drives
// it: a dev server in a background task answering the next command's
// curl, then killed; git init, two commits, git log; python3 -m venv and
// its pip installing from a PEP 503 index of this host through an egress
// relay that lets only that index through (another host's index is
// refused and never asked); compileall printing past the tail bound (the
// spill file, read in the pod, holds every line); unittest of a hanging
// test ended by its timeout, with no python left.
func TestClusterWorkloads(t *testing.T) {
	c := kubetest.Connect(t)
	for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		t.Run(runtime, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			t.Cleanup(func() { t.Logf("%s: %.1fs", runtime, time.Since(start).Seconds()) })
			clusterWorkloads(t, c, runtime)
		})
	}
}

func clusterWorkloads(t *testing.T, c *kubetest.Cluster, runtime string) {
	ns := c.Namespace(t)
	cfg := kubetest.Config(ns)
	cfg.ImagePullPolicy = corev1.PullNever
	rt := c.New(t, cfg, runtime)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	sb, err := rt.Create(ctx, kubetest.Spec(t, "workloads", "work", "workloads-test", runtime,
		sandbox.WithImage(clientsImage), sandbox.WithNetwork(sandbox.NetworkEgress)))
	if err != nil && strings.Contains(err.Error(), "ErrImageNeverPull") {
		dockertest.Require(t, false, fmt.Sprintf("the cluster's node has no %s (%v): .ci/setup-kube.sh imports it from Docker", clientsImage, err))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Remove(context.Background(), sb.ID) })

	index := origintest.NewPipIndex(t, "127.0.0.5:0")
	refused := origintest.NewPipIndex(t, "127.0.0.6:0")
	rctx, rcancel := context.WithCancel(ctx)
	r, err := egress.NewRelay(egress.RelayConfig{
		Agent:      sb.Agent,
		PollHeader: map[string]string{agentapi.HeaderProtocol: fmt.Sprint(agentapi.Protocol)},
		Check: func(conn egress.Conn) (egress.Decision, error) {
			if conn.Target != index.Addr {
				return egress.Decision{}, fmt.Errorf("egress to %s is not allowed (test)", conn.Target)
			}
			return egress.Decision{}, nil
		},
	})
	if err != nil {
		rcancel()
		t.Fatal(err)
	}
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(rctx) }()
	t.Cleanup(func() {
		rcancel()
		<-relayDone
	})

	cl, err := agentapi.DialEndpoint(ctx, sb.Agent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	env := egresswire.Env(egresswire.DefaultListen)
	env["NO_PROXY"], env["no_proxy"] = "127.0.0.1,::1", "127.0.0.1,::1"
	spec := func(t *testing.T, command string, timeout time.Duration, background bool) executor.Spec {
		t.Helper()
		s, err := executor.DefaultLimits().Resolve(ctx, executor.Request{Session: sb.Session, Command: command, Timeout: timeout, Background: background, Env: env},
			cl.Hello().Root, []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	run := func(t *testing.T, command string, timeout time.Duration) executor.Result {
		t.Helper()
		start := time.Now()
		res, err := cl.Run(ctx, spec(t, command, timeout, false))
		if err != nil {
			t.Fatalf("run %.60q: %v", command, err)
		}
		t.Logf("%.1fs: %.60q", time.Since(start).Seconds(), command)
		return res
	}
	out := func(res executor.Result) string { return strings.TrimSpace(res.Stdout + res.Stderr) }
	workload := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			defer func() { t.Logf("%s %s: %.1fs", runtime, name, time.Since(start).Seconds()) }()
			f(t)
		})
	}
	run(t, "true", time.Minute)

	workload("devserver", func(t *testing.T) {
		run(t, "mkdir -p /workspace/site && echo 'served from the workspace' >/workspace/site/hello.txt", time.Minute)
		task, err := cl.Start(ctx, spec(t, "cd /workspace/site && exec python3 -m http.server 8765 --bind 127.0.0.1", 0, true))
		if err != nil {
			t.Fatal(err)
		}
		got := out(run(t, `for i in $(seq 150); do
  code=$(curl -s --noproxy '*' -m 5 -o /tmp/hello.out -w '%{http_code}' http://127.0.0.1:8765/hello.txt) && { cat /tmp/hello.out; echo " $code"; exit 0; }
  sleep 0.2
done; echo never answered; exit 1`, time.Minute))
		if got != "served from the workspace\n 200" {
			t.Errorf("curl of the dev server: %q", got)
		}
		o, err := task.Read(ctx)
		if err != nil || !strings.Contains(o.Stderr, `"GET /hello.txt HTTP/1.1" 200`) || o.Status.State != executor.Running {
			t.Errorf("the dev server's output: %+v, %v", o, err)
		}
		if k, err := task.Kill(ctx); err != nil || k.AlreadyDone {
			t.Errorf("kill: %+v, %v", k, err)
		}
		if got := out(run(t, "ps -eo args | grep -c '[h]ttp.server'", time.Minute)); got != "0" {
			t.Errorf("after the kill the dev server lives on: %q", got)
		}
	})
	workload("git", func(t *testing.T) {
		got := out(run(t, `set -e
git init -q -b main /workspace/repo && cd /workspace/repo
git config user.name 'Shellbox Agent' && git config user.email agent@example.com
echo 'print("hi")' >app.py && git add app.py && git commit -q -m 'Add the app'
echo '# app' >README.md && git add README.md && git commit -q -m 'Add a README'
git log --oneline --format='%s' && git ls-files`, time.Minute))
		if got != "Add a README\nAdd the app\nREADME.md\napp.py" {
			t.Errorf("git: %q", got)
		}
	})
	workload("pip", func(t *testing.T) {
		if got := out(run(t, "python3 -m venv /workspace/venv && /workspace/venv/bin/pip --version", 4*time.Minute)); !strings.HasPrefix(got, "pip ") {
			t.Fatalf("venv: %q", got)
		}
		pip := "/workspace/venv/bin/pip install --force-reinstall --disable-pip-version-check --retries 0 --timeout 30 --index-url http://%s/simple/ " + origintest.PipProject + " 2>&1"
		got := out(run(t, fmt.Sprintf(pip, index.Addr)+"; /workspace/venv/bin/python -c 'import shellbox_workload as m; print(m.GREETING)'", 2*time.Minute))
		if !strings.Contains(got, "Successfully installed "+origintest.PipProject+"-1.0") || !strings.HasSuffix(got, "\n"+origintest.PipGreeting) {
			t.Errorf("pip install from the allowed index: %q", got)
		}
		if reqs := index.Requests(); !slices.Contains(reqs, "GET /packages/"+origintest.PipWheel) {
			t.Errorf("the allowed index served %q", reqs)
		}
		res := run(t, fmt.Sprintf(pip, refused.Addr), 2*time.Minute)
		if strings.Contains(out(res), "Successfully installed") || res.ExitCode != 1 {
			t.Errorf("pip install from a host the relay does not allow: %d %q", res.ExitCode, out(res))
		}
		if reqs := refused.Requests(); len(reqs) != 0 {
			t.Errorf("the index the relay does not allow was asked %q", reqs)
		}
	})
	workload("compile", func(t *testing.T) {
		run(t, `set -e; mkdir -p /workspace/build/src/pkg && cd /workspace/build/src/pkg
for i in $(seq -w 1000); do printf 'def f():\n    return "%s"\n' "$i" >"mod_$i.py"; done
printf 'def broken(:\n' >zz_broken.py`, time.Minute)
		res := run(t, "python3 -m compileall -f /workspace/build/src", 4*time.Minute)
		if !res.Truncated || res.SpillPath == "" || res.ExitCode != 1 || len(res.Stdout) > 30000 || !strings.Contains(res.Stdout, "SyntaxError") || strings.Contains(res.Stdout, "mod_0001.py") {
			t.Fatalf("compileall: truncated %v, spill %q, exit %d, %d bytes kept", res.Truncated, res.SpillPath, res.ExitCode, len(res.Stdout))
		}
		got := out(run(t, fmt.Sprintf("head -n 1 %[1]s; grep -c \"^Compiling '/workspace/build/src/pkg/mod_\" %[1]s", res.SpillPath), time.Minute))
		if got != "Listing '/workspace/build/src'...\n1000" {
			t.Errorf("the spill file %s: %q", res.SpillPath, got)
		}
	})
	workload("timeout", func(t *testing.T) {
		run(t, `mkdir -p /workspace/tests && printf 'import time, unittest\n\nclass T(unittest.TestCase):\n    def test_hangs(self):\n        time.sleep(100000)\n' >/workspace/tests/test_hang.py`, time.Minute)
		res := run(t, "cd /workspace/tests && python3 -m unittest -v test_hang", 3*time.Second)
		if !res.TimedOut || res.Signal == "" || !strings.Contains(res.Stderr, "test_hangs") {
			t.Errorf("unittest past its timeout: %+v", res)
		}
		if got := out(run(t, "ps -eo pid,args | grep '[p]ython3' || echo none", time.Minute)); got != "none" {
			t.Errorf("after the timeout the pod still runs:\n%s", got)
		}
	})
}
