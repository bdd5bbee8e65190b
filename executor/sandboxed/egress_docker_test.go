package sandboxed_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/egress"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/session/sandboxconn"
	"github.com/shellbox/shellbox/tools"
)

// hostServer serves "hello from the host <path>" on addr (a loopback
// address of the host, which the sandbox cannot reach but through the
// relay) and counts its requests.
func hostServer(t *testing.T, addr string) (hostport string, hits *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hits = new(atomic.Int64)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hello from the host %s", r.URL.Path)
	})}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return l.Addr().String(), hits
}

// TestEgress: a sandbox with egress reaches the allowlisted destination
// through its agent's proxy and the relay, with curl (which follows
// HTTP_PROXY) and with a bare /dev/tcp request; a destination off the list
// is refused with the policy's reason and never contacted; and nothing
// reaches the host without the proxy. A sandbox without egress has neither
// the proxy nor its variables.
func TestEgress(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			t.Run(runtime, func(t *testing.T) { egressOn(t, e, runtime) })
		}
	})
}

func egressOn(t *testing.T, e enginetest.Engine, runtime string) {
	// Every result's notices are kept: a task's end is told once, with
	// whichever call of its session is answered next, which need not be
	// one of waitTask's (the thief below ends as the call that lets it go
	// ends).
	ended := map[string]bool{}
	call := func(t *testing.T, ts *tools.Toolset, session, tool string, args any) tools.Result {
		t.Helper()
		res := sandboxedtest.Call(t, ts, session, tool, args)
		for _, n := range res.Notices {
			ended[n.TaskID] = true
		}
		return res
	}
	waitTask := func(t *testing.T, ts *tools.Toolset, session, id string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ended[id]; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("task %s did not end within a minute", id)
			}
			call(t, ts, session, tools.ToolBash, bash(`true`))
		}
	}
	allowed, allowedHits := hostServer(t, "127.0.0.2:0")
	denied, deniedHits := hostServer(t, "127.0.0.3:0")
	list, err := confine.NewAllowlist([]string{allowed})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes atomic.Int64
	relay := func(ctx context.Context, sb sandbox.Sandbox, granted func(string) (context.Context, bool)) {
		r, err := egress.NewRelay(egress.RelayConfig{
			Agent:      sb.Agent,
			PollHeader: map[string]string{agentapi.HeaderProtocol: strconv.Itoa(agentapi.Protocol)},
			// The hosts are on the host's loopback: no address ranges are
			// refused here (cmd/shellbox's relay refuses them).
			Check: func(c egress.Conn) (egress.Decision, error) {
				if until, ok := granted(c.Credential); ok {
					return egress.Decision{Until: until}, nil
				}
				if !list.Allows(c.Target) {
					return egress.Decision{}, fmt.Errorf("shellbox: egress to %s is not allowed by policy test (sandbox.network.allow: %s)", c.Target, allowed)
				}
				return egress.Decision{}, nil
			},
			Observe: func(string, egress.Outcome) { outcomes.Add(1) },
		})
		if err != nil {
			t.Error(err)
			return
		}
		if err := r.Run(ctx); err != nil {
			t.Errorf("relay of %s: %v", sb.Session, err)
		}
	}
	r := sandboxedtest.NewWith(t, e, runtime, executor.DefaultLimits(), func(c *sandboxconn.Config) { c.Egress = sandboxconn.RelayFunc(relay) })
	ts, err := tools.New(r.Exec, tools.Config{Home: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	r.Opts = append(r.Opts, sandbox.WithNetwork(sandbox.NetworkEgress))

	run := func(command string) string {
		t.Helper()
		res := call(t, ts, "net", tools.ToolBash, bash(command))
		if res.IsError {
			t.Fatalf("%s: %s", command, res.Text)
		}
		return res.Text
	}
	dockertest.Require(t, run(`command -v curl || echo missing`) != "missing",
		"the test image has no curl (the host had none when images/testimage/build.sh ran: apt-get install curl, then rebuild it)")
	if got := run(`echo "$HTTP_PROXY $https_proxy $NO_PROXY"`); got != "http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1" {
		t.Errorf("proxy variables: %q", got)
	}
	if got := run(`curl -sS -m 30 http://` + allowed + `/curl`); got != "hello from the host /curl" {
		t.Errorf("curl to the allowlisted host: %q", got)
	}
	raw := run(`exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'GET http://` + allowed + `/raw HTTP/1.1\r\nHost: ` + allowed + `\r\n\r\n' >&3 && cat <&3`)
	if !strings.HasPrefix(raw, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(raw, "hello from the host /raw") {
		t.Errorf("raw request through the proxy: %q", raw)
	}
	got := run(`curl -sS -m 30 -D - -o /dev/null http://` + denied + `/; echo "exit $?"`)
	want := "Shellbox-Error: shellbox: egress to " + denied + " is not allowed by policy test"
	if !strings.HasPrefix(got, "HTTP/1.1 403 Forbidden\r\n") || !strings.Contains(got, want) {
		t.Errorf("curl to a host off the list: %q, want a 403 with %q", got, want)
	}
	got = run(`curl -sS -m 30 https://` + denied + `/ 2>&1; echo "exit $?"`)
	if !strings.Contains(got, "403") || !strings.Contains(got, "exit 56") {
		t.Errorf("CONNECT to a host off the list: %q", got)
	}
	// No way around the proxy: the sandbox has no route to the host.
	got = run(`curl -sS -m 10 --noproxy '*' http://` + allowed + `/direct 2>&1; echo "exit $?"; (exec 3<>/dev/tcp/` + strings.Replace(allowed, ":", "/", 1) + `) 2>&1; echo "tcp $?"`)
	if !strings.Contains(got, "tcp 1") || strings.Contains(got, "hello") {
		t.Errorf("direct connections: %q", got)
	}
	if n := allowedHits.Load(); n != 2 {
		t.Errorf("allowlisted host saw %d requests, want 2", n)
	}
	if n := deniedHits.Load(); n != 0 {
		t.Errorf("denied host saw %d requests", n)
	}
	if n := outcomes.Load(); n != 4 {
		t.Errorf("relay saw %d connections, want 4", n)
	}

	// A call holding the network permission reaches what the list does not,
	// with no credential in its environment: the proxy knows its processes.
	// On runsc as on runc: under gVisor the agent reads the fd links with
	// CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH raised on the lookup's thread.
	fetched := func(out string, paths ...string) bool {
		want := ""
		for _, p := range paths {
			want += "hello from the host " + p + "\n"
		}
		return strings.TrimRight(out, "\n") == strings.TrimRight(want, "\n")
	}
	const granted = 2
	res := call(t, ts, "net", tools.ToolBash, bash(`curl -sS -m 30 http://`+denied+`/granted; echo; echo "$HTTPS_PROXY"`,
		"sandbox_permissions", []string{"network"}, "justification", "fetch from the other host"))
	if out, proxy, _ := strings.Cut(res.Text, "\nhttp://"); !fetched(out, "/granted") || proxy != "127.0.0.1:3128" {
		t.Fatalf("granted call: %q", res.Text)
	}
	// A background task holds its grant until it ends.
	res = call(t, ts, "net", tools.ToolBash, bash(`sleep 1; curl -sS -m 30 http://`+denied+`/bg`, "run_in_background", true,
		"sandbox_permissions", []string{"network"}, "justification", "fetch in the background"))
	id := res.Value.(*tools.Background).TaskID
	waitTask(t, ts, "net", id)
	if got := call(t, ts, "net", tools.ToolBashOutput, map[string]any{"task_id": id}).Text; !fetched(strings.TrimSuffix(got, "\nstatus: completed, exit code: 0"), "/bg") {
		t.Errorf("granted background task: %q", got)
	}
	if n := deniedHits.Load(); n != granted {
		t.Errorf("the other host saw %d requests, want %d (the granted ones)", n, granted)
	}

	// The attack of issue 15: a background task of another call, while a
	// granted foreground call runs, looks for the grant in that call's
	// environment (nothing there), then uses the proxy as the granted call
	// does, and with a credential: refused both times, with the policy's
	// and the proxy's reasons. Nor can it hijack the granted process (open
	// its /proc/<pid>/mem to write into it: refused by the calls' Landlock
	// domains on runc, by the sentry under gVisor). The granted call itself,
	// and a setsid'd process of its tree, still get through meanwhile.
	thief := call(t, ts, "net", tools.ToolBash, bash(`while [ ! -s /tmp/granted-pid ]; do sleep 0.1; done
pid=$(cat /tmp/granted-pid)
echo "environ: $(tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -ci 'shellbox:')"
if (exec 3<>/proc/$pid/mem) 2>/dev/null; then echo "mem: open"; else echo "mem: refused"; fi
curl -sS -m 30 -D - -o /dev/null http://`+denied+`/stolen | grep -i '^shellbox-error'
curl -sS -m 30 -D - -o /dev/null -x http://shellbox:guess@127.0.0.1:3128 http://`+denied+`/stolen | grep -i '^shellbox-error'
touch /tmp/thief-done
while [ ! -e /tmp/call-ended ]; do sleep 0.1; done`, "run_in_background", true))
	thiefID := thief.Value.(*tools.Background).TaskID
	res = call(t, ts, "net", tools.ToolBash, bash(`echo $$ > /tmp/granted-pid
while [ ! -e /tmp/thief-done ]; do sleep 0.1; done
curl -sS -m 30 http://`+denied+`/robbed; echo
setsid curl -sS -m 30 http://`+denied+`/setsid < /dev/null`,
		"sandbox_permissions", []string{"network"}, "justification", "be robbed"))
	if !fetched(res.Text, "/robbed", "/setsid") {
		t.Errorf("the granted call while another call's task tried its grant: %q", res.Text)
	}
	// (Ended after the call, so that its notice is not that call's.)
	run(`touch /tmp/call-ended`)
	waitTask(t, ts, "net", thiefID)
	loot := call(t, ts, "net", tools.ToolBashOutput, map[string]any{"task_id": thiefID}).Text
	for _, want := range []string{
		"environ: 0\n",
		"mem: refused\n",
		"Shellbox-Error: shellbox: egress to " + denied + " is not allowed by policy test",
		"Shellbox-Error: shellbox egress proxy: Proxy-Authorization is not accepted: a network grant holds only for the processes of the call it was granted to",
		"status: completed, exit code: 0",
	} {
		if !strings.Contains(loot, want) {
			t.Errorf("the other call's task:\n%s\nlacks %q", loot, want)
		}
	}
	if strings.Contains(loot, "/stolen") || strings.Contains(loot, "hello") {
		t.Errorf("the other call's task reached the host:\n%s", loot)
	}
	if n := deniedHits.Load(); n != 2*granted {
		t.Errorf("the other host saw %d requests, want %d (the granted ones)", n, 2*granted)
	}

	// While the proxy looks connections up (with its lookup capabilities
	// raised, under gVisor), the agent's threads stay root's: a command
	// can signal none of them (kill(2) with a thread's id is checked
	// against that thread's ids).
	probe := run(`(for i in $(seq 3); do curl -s -m 30 -o /dev/null http://` + denied + `/probe; done) &
n=0; hits=0
while kill -0 $! 2>/dev/null; do
  for d in /proc/1/task/*; do n=$((n+1)); kill -0 ${d##*/} 2>/dev/null && hits=$((hits+1)); done
done
wait
echo "signalled $hits of $n"`)
	t.Logf("%s: %s", runtime, probe)
	if !strings.HasPrefix(probe, "signalled 0 of ") || probe == "signalled 0 of 0" {
		t.Errorf("signalling the agent's threads during lookups: %q, want none of some", probe)
	}

	// A sandbox without egress: no variables, no proxy.
	r.Opts = r.Opts[:len(r.Opts)-1]
	res = call(t, ts, "nonet", tools.ToolBash, bash(`echo "[${HTTP_PROXY-unset}]"; (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null; echo "proxy $?"`))
	if res.Text != "[unset]\nproxy 1" {
		t.Errorf("sandbox without egress: %q", res.Text)
	}
	res = call(t, ts, "nonet", tools.ToolBash, bash(`curl -sS http://`+allowed+`/`, "sandbox_permissions", []string{"network"}, "justification", "no proxy"))
	if !res.IsError || !strings.Contains(res.Text, "the network permission was granted, but session nonet's sandbox has no egress proxy") {
		t.Errorf("network granted in a sandbox without a proxy: %q", res.Text)
	}
}
