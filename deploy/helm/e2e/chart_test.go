package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// runtimes are the policy runtimes the chart tests run every case on, and
// the tenants that have them.
var runtimes = []struct{ tenant, runtime string }{{"acme", "runc"}, {"gv", "runsc"}}

// chartPolicy is the tenants' policy: rm denied, uname asked, egress to
// allow only.
func chartPolicy(runtime, allow string) string {
	return fmt.Sprintf(`version: 1
description: the chart tests' tenant on %[1]s
default: allow
askTimeout: 2m
sandbox:
  runtime: %[1]s
  memory: 512MiB
  disk: 64MiB
  network:
    allow: ["%[2]s"]
limits:
  sessions: 32
rules:
  - name: no-delete
    decision: deny
    reason: deleting files is not allowed here
    match:
      command: [rm]
  - name: ask-uname
    decision: ask
    reason: uname needs a human
    match:
      command: [uname]
`, runtime, allow)
}

// hostServer serves "hello <path>" on the node's address; it counts the
// requests it answers.
func hostServer(t *testing.T, ip string) (addr string, hits *atomic.Int64) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	hits = new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), hits
}

func bashArgs(command string, background bool) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"command": command, "description": "e2e", "run_in_background": background})
	return b
}

// TestChart installs the chart and holds the shellbox it gives, through
// its Service, to what a tenant and an operator expect, on runc and on
// gVisor: policy decisions (deny, ask approved through the API), the
// egress allowlist through the server's relay, what a session pod cannot
// reach, and a server pod killed while background tasks run: the new pod
// serves their output and status, the workspace and the sessions' pods are
// the same, over REST and MCP.
func TestChart(t *testing.T) {
	c := kubetest.Connect(t)
	ip := NodeIP(t, c)
	allowed, hits := hostServer(t, ip)
	denied, _ := hostServer(t, ip)
	var tenants []Tenant
	for _, rt := range runtimes {
		tenants = append(tenants, Tenant{Name: rt.tenant, Policy: chartPolicy(rt.runtime, allowed)},
			Tenant{Name: "h" + rt.tenant, Policy: hostilePolicy(rt.runtime)})
	}
	r := Install(t, c, Options{Tenants: tenants, Values: usageValues})
	ctx := context.Background()

	clients := map[string]*client.Client{}
	call := func(t *testing.T, tenant, session, command string) tools.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		res, err := clients[tenant].Call(ctx, session, tools.ToolBash, bashArgs(command, false))
		if err != nil {
			t.Fatalf("%s %q: %v", tenant, command, err)
		}
		return res
	}
	run := func(t *testing.T, tenant, session, command string) string {
		t.Helper()
		res := call(t, tenant, session, command)
		if res.IsError {
			t.Fatalf("%s %q: %s", tenant, command, res.Text)
		}
		return res.Text
	}
	for _, rt := range runtimes {
		clients[rt.tenant] = client.New(r.URL, r.Tokens[rt.tenant], nil)
		clients["h"+rt.tenant] = client.New(r.URL, r.Tokens["h"+rt.tenant], nil)
	}
	// The usage case's session makes its pod and spills while the cases
	// below run (usage_test.go).
	usageRun := startChartUsage(t, clients[runtimes[0].tenant], allowed)
	for _, rt := range runtimes {
		t.Run("hostile/"+rt.runtime, func(t *testing.T) { hostile(t, clients["h"+rt.tenant], rt.runtime) })
	}

	for _, rt := range runtimes {
		t.Run("policy/"+rt.runtime, func(t *testing.T) {
			res := call(t, rt.tenant, "pol", "rm -f x")
			if !res.IsError || !strings.Contains(res.Text, "denied by policy "+rt.tenant+"/no-delete: deleting files is not allowed here") {
				t.Errorf("rm: %+v", res)
			}
			// An ask: held until an approver decides it through the API.
			type answer struct {
				res tools.Result
				err error
			}
			got := make(chan answer, 1)
			go func() {
				ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
				defer cancel()
				res, err := clients[rt.tenant].Call(ctx, "pol", tools.ToolBash, bashArgs("uname -s", false))
				got <- answer{res, err}
			}()
			var id string
			for deadline := time.Now().Add(time.Minute); id == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				aps, err := clients[rt.tenant].Approvals(ctx, "pending")
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range aps {
					if a.Session == "pol" && a.Command == "uname -s" && a.Rule == "ask-uname" {
						id = a.ID
					}
				}
			}
			if id == "" {
				t.Fatal("no pending approval for uname -s after 1m")
			}
			// The tenant's own approver (its token) decides it.
			if _, err := clients[rt.tenant].Decide(ctx, id, true, "e2e-approver", "fine"); err != nil {
				t.Errorf("approve %s: %v", id, err)
			}
			if a := <-got; a.err != nil || a.res.IsError || a.res.Text != "Linux" {
				t.Errorf("the approved call: %+v %v", a.res, a.err)
			}
		})

		t.Run("egress/"+rt.runtime, func(t *testing.T) {
			before := hits.Load()
			if got := run(t, rt.tenant, "net", "curl -sS -m 30 http://"+allowed+"/curl"); got != "hello /curl" {
				t.Errorf("curl to the allowlisted host: %q", got)
			}
			got := run(t, rt.tenant, "net", "curl -sS -m 30 -D - -o /dev/null http://"+denied+"/; echo \"exit $?\"")
			if !strings.HasPrefix(got, "HTTP/1.1 403 Forbidden\r\n") || !strings.Contains(got, "egress to "+denied+" is not allowed by policy "+rt.tenant) {
				t.Errorf("curl to a host off the list: %q", got)
			}
			if n := hits.Load() - before; n != 1 {
				t.Errorf("the allowlisted host saw %d requests, want 1", n)
			}
		})

		t.Run("isolation/"+rt.runtime, func(t *testing.T) {
			// Around the proxy: the session pod's NetworkPolicy (the
			// server's) lets nothing out, not even to the API server, the
			// shellbox Service or the allowlisted host directly.
			host, port, _ := net.SplitHostPort(allowed)
			svc := strings.TrimPrefix(r.URL, "http://")
			shost, sport, _ := net.SplitHostPort(svc)
			api, err := c.CS.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			probe := func(h, p string) string {
				return fmt.Sprintf(`timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s' 2>/dev/null && echo open || echo closed`, h, p)
			}
			for _, dst := range [][2]string{{host, port}, {shost, sport}, {api.Spec.ClusterIP, "443"}} {
				// kube-router applies the policy to a new pod within
				// moments of its start (kube TestClusterIsolation
				// measures that window): closed within 30 s, and for good.
				got := ""
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
					if got = run(t, rt.tenant, "iso", probe(dst[0], dst[1])); got == "closed" || time.Now().After(deadline) {
						break
					}
				}
				if got != "closed" {
					t.Errorf("a session pod connecting to %s:%s directly: %s after 30 s", dst[0], dst[1], got)
				}
			}
			if got := run(t, rt.tenant, "iso", `grep CapEff /proc/self/status; ls /var/run/secrets/kubernetes.io 2>&1 | head -1`); !strings.HasPrefix(got, "CapEff:\t0000000000000000\n") || !strings.Contains(got, "No such file or directory") {
				t.Errorf("capabilities and service-account token in a session pod: %q", got)
			}
		})
	}

	t.Run("usage", func(t *testing.T) { usageRun.check(t) })

	t.Run("server-killed", func(t *testing.T) {
		// A background task per runtime, a file in each workspace; then
		// the server pod goes mid-task.
		const ticks = 40
		script := fmt.Sprintf(`for i in $(seq 1 %d); do echo tick $i; sleep 0.25; done; echo done`, ticks)
		tasks := map[string]string{}
		for _, rt := range runtimes {
			run(t, rt.tenant, "bg", "echo kept > /workspace/f")
			res, err := clients[rt.tenant].Call(ctx, "bg", tools.ToolBash, bashArgs(script, true))
			if err != nil || res.IsError {
				t.Fatalf("%s: start the background task: %v %+v", rt.runtime, err, res)
			}
			bg, ok := res.Value.(*tools.Background)
			if !ok {
				t.Fatalf("%s: the background start's value: %#v", rt.runtime, res.Value)
			}
			tasks[rt.tenant] = bg.TaskID
		}
		before, err := r.SessionPods(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Some output read before the kill, the rest after.
		outs := map[string]*strings.Builder{}
		read := func(tenant string) executor.Output {
			t.Helper()
			args, _ := json.Marshal(map[string]string{"task_id": tasks[tenant]})
			res, err := clients[tenant].Call(ctx, "bg", tools.ToolBashOutput, args)
			if err != nil || res.IsError {
				t.Fatalf("%s: bash_output: %v %+v", tenant, err, res)
			}
			o := res.Value.(*tools.TaskOutput).Output
			if outs[tenant] == nil {
				outs[tenant] = new(strings.Builder)
			}
			outs[tenant].WriteString(o.Stdout)
			if o.Lost != 0 {
				t.Errorf("%s: %d bytes lost", tenant, o.Lost)
			}
			return o
		}
		for _, rt := range runtimes {
			read(rt.tenant)
		}
		killed := time.Now()
		newPod := r.KillServer(t)
		t.Logf("server pod replaced by %s, serving again after %s", newPod, time.Since(killed).Round(time.Millisecond))

		after, err := r.SessionPods(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(before, ",") != strings.Join(after, ",") {
			t.Errorf("session pods before the kill %v, after %v: want the same pods", before, after)
		}
		for _, rt := range runtimes {
			var o executor.Output
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
				o = read(rt.tenant)
				if o.Status.State != executor.Running || time.Now().After(deadline) {
					break
				}
			}
			if o.Status.State != executor.Completed || o.Status.ExitCode != 0 {
				t.Errorf("%s: the task after the server's replacement: %+v", rt.runtime, o.Status)
			}
			var want strings.Builder
			for i := 1; i <= ticks; i++ {
				fmt.Fprintf(&want, "tick %d\n", i)
			}
			want.WriteString("done\n")
			if got := outs[rt.tenant].String(); got != want.String() {
				t.Errorf("%s: the task's output read across the kill:\n%q\nwant\n%q", rt.runtime, got, want.String())
			}
			if got := run(t, rt.tenant, "bg", "cat /workspace/f"); got != "kept" {
				t.Errorf("%s: the workspace after the kill: %q", rt.runtime, got)
			}
		}
		// MCP (the stateless revision) reaches the same session through
		// the new pod.
		mc := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		cs, err := mc.Connect(ctx, client.MCPTransport(r.URL+"/mcp", r.Tokens["acme"], "bg", nil), nil)
		if err != nil {
			t.Fatalf("MCP after the kill: %v", err)
		}
		defer cs.Close()
		res, err := client.CallMCP(ctx, cs, tools.ToolBash, bashArgs("cat /workspace/f", false))
		if err != nil || res.IsError || res.Text != "kept" {
			t.Errorf("MCP call after the kill: %v %+v", err, res)
		}
	})
}

// hostilePolicy is the hostile cases' tenant: small limits to hit.
func hostilePolicy(runtime string) string {
	return fmt.Sprintf(`version: 1
description: the chart tests' hostile tenant on %[1]s
default: allow
sandbox:
  runtime: %[1]s
  memory: 256MiB
  pids: 256
  disk: 32MiB
  tmp: 16MiB
limits:
  grace: 500ms
  spillLimit: 8MiB
  spillBytes: 16MiB
`, runtime)
}

// hostile runs what a hostile command does against a session of c's
// tenant (hostilePolicy) through the Service, the cases of
// executor/sandboxed TestHostile that a remote caller can observe: every
// one ends in a result, and the session answers the next call.
func hostile(t *testing.T, c *client.Client, runtime string) {
	const s = "hostile"
	ctx := context.Background()
	call := func(t *testing.T, args map[string]any) tools.Result {
		t.Helper()
		b, _ := json.Marshal(args)
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		res, err := c.Call(ctx, s, tools.ToolBash, b)
		if err != nil {
			t.Fatalf("%v: %v", args["command"], err)
		}
		return res
	}
	bash := func(command string, kv ...any) map[string]any {
		m := map[string]any{"command": command, "description": "hostile"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	fg := func(t *testing.T, res tools.Result) *tools.Foreground {
		t.Helper()
		f, ok := res.Value.(*tools.Foreground)
		if !ok {
			t.Fatalf("not a foreground result: %q", res.Text)
		}
		return f
	}
	alive := func(t *testing.T) {
		t.Helper()
		if got := call(t, bash("echo alive")); got.Text != "alive" {
			t.Fatalf("session not usable afterwards: %q", got.Text)
		}
	}
	alive(t)
	t.Run("fork bomb", func(t *testing.T) {
		call(t, bash(`b() { b | b & }; b`, "timeoutMs", 3000))
		alive(t)
	})
	t.Run("memory bomb", func(t *testing.T) {
		// A string doubling in bash: past the 256 MiB limit in seconds,
		// also under gVisor, where a pipe read costs a trip to the sentry.
		res := call(t, bash(`x=a; while :; do x=$x$x; done`, "timeoutMs", 60000))
		// runc: the kernel kills the command; gVisor: the whole pod goes
		// and the next call gets a new one.
		if f := fg(t, res); f.Signal != "SIGKILL" {
			t.Errorf("want SIGKILL, got %q", res.Text)
		}
		alive(t)
	})
	t.Run("fill workspace and tmp", func(t *testing.T) {
		for _, dir := range []string{"/workspace", "/tmp"} {
			res := call(t, bash("head -c 100000000 /dev/zero > "+dir+"/fill; echo rc=$?; rm -f "+dir+"/fill"))
			if !strings.Contains(res.Text, "No space left on device") || !strings.Contains(res.Text, "rc=1") {
				t.Errorf("%s: want ENOSPC, got %q", dir, res.Text)
			}
		}
		alive(t)
	})
	t.Run("2G of output", func(t *testing.T) {
		// Under gVisor the pod's pipes and sockets carry ~10 MB/s on
		// this 2-core node: 300 MB there hits the same bounds (the
		// 8 MiB spill cap, the tail) as 2 GB does on runc.
		n := "2000000000"
		if runtime == "runsc" {
			n = "300000000"
		}
		res := call(t, bash("head -c "+n+" /dev/zero", "timeoutMs", 300000))
		f := fg(t, res)
		if !f.Truncated || !strings.Contains(res.Text, "[output truncated; full output unavailable: spill limit of 8388608 bytes reached") {
			t.Errorf("want a truncated tail with an honest marker, got truncated=%v %q", f.Truncated, res.Text[max(0, len(res.Text)-300):])
		}
		alive(t)
	})
	t.Run("trap TERM loop", func(t *testing.T) {
		res := call(t, bash(`trap '' TERM; while :; do :; done`, "timeoutMs", 500))
		if f := fg(t, res); !f.TimedOut || f.Signal != "SIGKILL" {
			t.Errorf("got %q", res.Text)
		}
		alive(t)
	})
	t.Run("setsid and nohup escapes", func(t *testing.T) {
		call(t, bash(`setsid sleep 300 & nohup sleep 301 >/dev/null 2>&1 & (setsid -f sleep 302); sleep 30`, "timeoutMs", 500))
		res := call(t, bash(`for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\0' ' '; echo; done | grep -c '^sleep 30[012]'`))
		if !strings.HasPrefix(res.Text, "0") {
			t.Errorf("escapees survived: %q", res.Text)
		}
	})
	t.Run("workdir escapes", func(t *testing.T) {
		call(t, bash("ln -sfn / /workspace/root"))
		for _, wd := range []string{"../../etc", "/etc", "root", "/workspace/root/etc"} {
			res := call(t, bash("pwd", "workdir", wd))
			if !res.IsError || !strings.Contains(res.Text, "outside the session root") {
				t.Errorf("workdir %s: %q", wd, res.Text)
			}
		}
	})
}
