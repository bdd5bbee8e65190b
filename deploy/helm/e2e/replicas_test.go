package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	osexec "os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// replicaPolicy is the replica tests' tenant: small runc sandboxes (the
// rolling update runs 50 at once on one node), uname asked.
const replicaPolicy = `version: 1
description: the replica tests' tenant
default: allow
askTimeout: 2m
sandbox:
  runtime: runc
  cpus: 0.2
  memory: 128MiB
  disk: 16MiB
  tmp: 16MiB
limits:
  sessions: 128
  spillBytes: 16MiB
rules:
  - name: ask-uname
    decision: ask
    reason: uname needs a human
    match:
      command: [uname]
`

// TestReplicas installs the chart with two server replicas and holds
// them to what "many replicas" promises, calling each replica by its pod
// IP where it matters and the Service otherwise: the calls of one session
// alternate between the replicas over REST and MCP (2026-07-28) and see
// one sandbox; streamed MCP calls through either replica deliver their
// output live and then their whole result; an ask held on one replica is approved on the other; a
// session pod deleted or evicted behind shellbox's back loses no file
// (pod-deleted: the leader saves it in the pod's grace); a
// replica deleted mid-background-task loses none of the task's output or
// its exit status; and a rolling update under load (20 sessions calling in
// a loop through the Service) fails no call.
func TestReplicas(t *testing.T) {
	c := kubetest.Connect(t)
	// Suspended sessions go to an S3 bucket both replicas reach.
	storeVals, storeSecrets, store, storeClient := SnapshotStore(t, c)
	r := Install(t, c, Options{
		Tenants: []Tenant{{Name: "rep", Policy: replicaPolicy}, {Name: "big", Policy: bigPolicy}},
		Secrets: storeSecrets,
		Values: map[string]any{
			"snapshots":    storeVals["snapshots"],
			"replicaCount": 2,
			// Spread the load over both replicas (no legacy MCP here).
			"service": map[string]any{"sessionAffinity": "None"},
			"sandbox": map[string]any{"maxCreating": 12},
			// The chart's default drain: on this 2-core node under the
			// test's load a call can take seconds, and one still running
			// at the shutdown deadline is cut (the first run's one EOF
			// of 10,071 calls, with the suite's 5 s).
			"server": map[string]any{"shutdownTimeoutSeconds": 30},
		},
	})
	ctx := context.Background()
	tok := r.Tokens["rep"]
	// Keep-alive connections, as a busy client holds them: the case a
	// replica leaving must not fail.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 128
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}

	pods := r.readyServerPods(t, 2)
	urls := []string{podURL(pods[0]), podURL(pods[1])}
	rest := []*client.Client{client.New(urls[0], tok, hc), client.New(urls[1], tok, hc)}
	call := func(t *testing.T, c *client.Client, session, command string, background bool) tools.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		res, err := c.Call(ctx, session, tools.ToolBash, bashArgs(command, background))
		if err != nil {
			t.Fatalf("%q: %v", command, err)
		}
		if res.IsError {
			t.Fatalf("%q: %s", command, res.Text)
		}
		return res
	}

	t.Run("alternate", func(t *testing.T) {
		mcps := make([]*mcp.ClientSession, 2)
		for i, u := range urls {
			mc := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
			cs, err := mc.Connect(ctx, client.MCPTransport(u+"/mcp", tok, "alt", tr), nil)
			if err != nil {
				t.Fatalf("MCP to %s: %v", pods[i].Name, err)
			}
			if ir := cs.InitializeResult(); ir == nil || ir.ProtocolVersion != "2026-07-28" {
				t.Errorf("MCP initialize result %+v, want revision 2026-07-28", ir)
			}
			defer cs.Close()
			mcps[i] = cs
		}
		run := func(t *testing.T, replica int, overMCP bool, command string) string {
			t.Helper()
			if !overMCP {
				return call(t, rest[replica], "alt", command, false).Text
			}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			res, err := client.CallMCP(cctx, mcps[replica], tools.ToolBash, bashArgs(command, false))
			if err != nil || res.IsError {
				t.Fatalf("MCP %q via %s: %v %s", command, pods[replica].Name, err, res.Text)
			}
			return res.Text
		}
		host := run(t, 0, false, "cat /etc/hostname")
		const rounds = 10
		lat := [2][]time.Duration{}
		for i := range rounds {
			for _, overMCP := range []bool{false, true} {
				// Written through one replica, read through the other:
				// the same file in the same pod.
				w, rd := i%2, 1-i%2
				line := fmt.Sprintf("%d-%v", i, overMCP)
				start := time.Now()
				run(t, w, overMCP, "echo "+line+" >> /workspace/alt")
				lat[w] = append(lat[w], time.Since(start))
				start = time.Now()
				got := run(t, rd, overMCP, "tail -n 1 /workspace/alt; cat /etc/hostname")
				lat[rd] = append(lat[rd], time.Since(start))
				if want := line + "\n" + host; got != want {
					t.Fatalf("round %d (MCP %v): read through %s %q, want %q (written through %s)", i, overMCP, pods[rd].Name, got, want, pods[w].Name)
				}
			}
		}
		for i := range lat {
			t.Logf("warm calls through %s (%s): n=%d p50=%s p99=%s", pods[i].Name, pods[i].Status.PodIP, len(lat[i]), pct(lat[i], 50), pct(lat[i], 99))
		}
		if got := run(t, 1, false, "wc -l < /workspace/alt"); got != fmt.Sprint(2*rounds) {
			t.Errorf("lines written: %s, want %d", got, 2*rounds)
		}
	})

	t.Run("suspend", func(t *testing.T) {
		// Suspended through one replica, resumed by a call through the
		// other: the session's pod is gone between, its files come back
		// from the bucket, and the record and snapshot are in the store
		// both replicas read.
		const s = "durable"
		call(t, rest[0], s, "mkdir -p /workspace/d && echo kept > /workspace/d/f && ln -s d/f /workspace/link && chmod 0640 /workspace/d/f", false)
		podUID := func() string {
			t.Helper()
			p, err := c.CS.CoreV1().Pods(r.SessionsNamespace).Get(ctx, kube.PodName("rep", s), metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the session's pod: %v", err)
			}
			return string(p.UID)
		}
		before := podUID()
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		si, err := rest[0].SuspendSession(sctx, s)
		if err != nil || si.State != "suspended" || si.Snapshot == "" {
			t.Fatalf("suspend via %s: %+v %v", pods[0].Name, si, err)
		}
		for p, err := r.SessionPods(sctx); ; p, err = r.SessionPods(sctx) {
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(p, kube.PodName("rep", s)) {
				break
			}
			if sctx.Err() != nil {
				t.Fatalf("the suspended session's pod is still there: %v", p)
			}
			time.Sleep(500 * time.Millisecond)
		}
		var objects []string
		for o := range storeClient.ListObjects(sctx, store.Bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err != nil {
				t.Fatalf("listing the bucket: %v", o.Err)
			}
			objects = append(objects, o.Key)
		}
		if !slices.ContainsFunc(objects, func(k string) bool { return strings.Contains(k, "rep/"+s+"/") && strings.Contains(k, si.Snapshot) }) {
			t.Errorf("the bucket holds %v, want rep/%s's snapshot %s", objects, s, si.Snapshot)
		}
		start := time.Now()
		got := call(t, rest[1], s, "cat /workspace/link; stat -c %a /workspace/d/f", false).Text
		t.Logf("resumed through %s, first result %s after the call began", pods[1].Name, time.Since(start).Round(time.Millisecond))
		if got != "kept\n640" {
			t.Fatalf("after resume through %s: %q, want the file through its link, mode 640", pods[1].Name, got)
		}
		if after := podUID(); after == before {
			t.Errorf("the same pod (uid %s) after a suspend", before)
		}
	})

	t.Run("pod-deleted", func(t *testing.T) {
		// Deleted and evicted behind shellbox's back: nothing lost.
		podDeleted(t, c, r, rest, client.New(urls[0], r.Tokens["big"], hc))
	})

	t.Run("live", func(t *testing.T) {
		// A streamed call over MCP (progress notifications) through each
		// replica, with several at once as a harness makes them: the
		// output arrives while the command runs, then the whole result,
		// the same as without streaming. (The chart's one conformance run
		// is REST: this is MCP's streaming through the chart.)
		var pr client.ProgressRouter
		mcps := make([]*mcp.ClientSession, 2)
		for i, u := range urls {
			mc := mcp.NewClient(&mcp.Implementation{Name: "e2e-live", Version: "1"}, &mcp.ClientOptions{ProgressNotificationHandler: pr.Handle})
			cs, err := mc.Connect(ctx, client.MCPTransport(u+"/mcp", tok, "live", tr), nil)
			if err != nil {
				t.Fatalf("MCP to %s: %v", pods[i].Name, err)
			}
			defer cs.Close()
			mcps[i] = cs
		}
		const perReplica = 4
		errs := make(chan error, 2*perReplica)
		for i := range 2 * perReplica {
			replica := i % 2
			go func() {
				cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
				defer cancel()
				var mu sync.Mutex
				var live strings.Builder
				cmd := fmt.Sprintf("echo ready-%d; sleep 1; echo warn >&2; echo after", i)
				res, err := client.CallMCPLive(cctx, mcps[replica], &pr, tools.ToolBash, bashArgs(cmd, false), func(msg string) {
					mu.Lock()
					live.WriteString(msg)
					mu.Unlock()
				})
				mu.Lock()
				got := live.String()
				mu.Unlock()
				want := fmt.Sprintf("ready-%d\nafter\n[stderr]\nwarn", i)
				switch {
				case err != nil:
					errs <- fmt.Errorf("streamed call %d via %s: %w (live so far %q)", i, pods[replica].Name, err, got)
				case res.Text != want:
					errs <- fmt.Errorf("streamed call %d via %s: result %q, want %q", i, pods[replica].Name, res.Text, want)
				case !strings.Contains(got, fmt.Sprintf("ready-%d", i)):
					errs <- fmt.Errorf("streamed call %d via %s: live output %q, want ready-%d while it ran", i, pods[replica].Name, got, i)
				default:
					errs <- nil
				}
			}()
		}
		for range 2 * perReplica {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("curl", func(t *testing.T) {
		// An outsider's client: curl, by each replica's pod IP in turn,
		// one session, plain and streamed answers.
		curlPath, err := osexec.LookPath("curl")
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("curl: %v (CI installs it)", err)
			}
			t.Skipf("no curl on this machine: %v", err)
		}
		curl := func(t *testing.T, replica int, stream bool, command string) string {
			t.Helper()
			u := urls[replica] + "/v1/sessions/curl/tools/bash"
			args := []string{"-sS", "--fail-with-body", "--max-time", "120", "-X", "POST",
				"-H", "Authorization: Bearer " + tok, "-H", "Content-Type: application/json",
				"--data-binary", string(bashArgs(command, false))}
			if stream {
				args = append(args, "-N", "-H", "Accept: text/event-stream", u+"?stream=1")
			} else {
				args = append(args, u)
			}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			out, err := osexec.CommandContext(cctx, curlPath, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("curl via %s: %v: %s", pods[replica].Name, err, out)
			}
			return string(out)
		}
		var hosts [2]string
		for i := range 4 {
			replica := i % 2
			var body struct {
				Text    string `json:"text"`
				IsError bool   `json:"isError"`
			}
			out := curl(t, replica, false, fmt.Sprintf("echo %d >> /workspace/curl; cat /etc/hostname", i))
			if err := json.Unmarshal([]byte(out), &body); err != nil || body.IsError {
				t.Fatalf("curl via %s: %v: %s", pods[replica].Name, err, out)
			}
			if hosts[replica] == "" {
				hosts[replica] = body.Text
			}
			if body.Text != hosts[0] && hosts[0] != "" {
				t.Fatalf("curl via %s ran in sandbox %q, via %s in %q: two sandboxes for one session", pods[replica].Name, body.Text, pods[0].Name, hosts[0])
			}
		}
		// Streamed: the command's output as server-sent "output" events
		// while it runs, then the result, all of one sandbox's file.
		out := curl(t, 1, true, "cat /workspace/curl; sleep 0.3; echo end")
		if !strings.Contains(out, "event: output") || !strings.Contains(out, "event: result") {
			t.Fatalf("curl -N ?stream=1 via %s: no output and result events in:\n%s", pods[1].Name, out)
		}
		_, result, _ := strings.Cut(out, "event: result\ndata: ")
		result, _, _ = strings.Cut(result, "\n")
		var body struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal([]byte(result), &body); err != nil || body.Text != "0\n1\n2\n3\nend" {
			t.Errorf("the streamed result via %s: %v %q, want the 4 lines written through both replicas and end; stream:\n%s", pods[1].Name, err, body.Text, out)
		}
	})

	t.Run("ask-on-A-approved-on-B", func(t *testing.T) {
		type answer struct {
			res tools.Result
			err error
		}
		got := make(chan answer, 1)
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			res, err := rest[0].Call(ctx, "ask", tools.ToolBash, bashArgs("uname -s", false))
			got <- answer{res, err}
		}()
		var id string
		for deadline := time.Now().Add(time.Minute); id == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			aps, err := rest[1].Approvals(ctx, "pending")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range aps {
				if a.Session == "ask" && a.Command == "uname -s" {
					id = a.ID
				}
			}
		}
		if id == "" {
			t.Fatalf("%s lists no pending approval for uname -s held by %s after 1m", pods[1].Name, pods[0].Name)
		}
		if _, err := rest[1].Decide(ctx, id, true, "e2e-approver", "fine"); err != nil {
			t.Fatalf("approve %s through %s: %v", id, pods[1].Name, err)
		}
		select {
		case a := <-got:
			if a.err != nil || a.res.IsError || a.res.Text != "Linux" {
				t.Errorf("the call held by %s: %+v %v", pods[0].Name, a.res, a.err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the call held by %s did not return 1m after %s approved it", pods[0].Name, pods[1].Name)
		}
	})

	t.Run("replica-deleted-mid-task", func(t *testing.T) {
		const ticks = 40
		script := fmt.Sprintf(`for i in $(seq 1 %d); do echo tick $i; sleep 0.25; done; echo done; exit 7`, ticks)
		res := call(t, rest[0], "bg", script, true)
		bg, ok := res.Value.(*tools.Background)
		if !ok {
			t.Fatalf("the background start's value: %#v", res.Value)
		}
		var out strings.Builder
		read := func(c *client.Client) executor.Output {
			t.Helper()
			args, _ := json.Marshal(map[string]string{"task_id": bg.TaskID})
			res, err := c.Call(ctx, "bg", tools.ToolBashOutput, args)
			if err != nil || res.IsError {
				t.Fatalf("bash_output: %v %+v", err, res)
			}
			o := res.Value.(*tools.TaskOutput).Output
			out.WriteString(o.Stdout)
			if o.Lost != 0 {
				t.Errorf("%d bytes lost", o.Lost)
			}
			return o
		}
		time.Sleep(time.Second)
		// Read some of it through B before A goes, the rest after.
		if o := read(rest[1]); o.Status.State != executor.Running {
			t.Fatalf("the task read through %s before the delete: %+v", pods[1].Name, o.Status)
		}
		zero := int64(0)
		if err := c.CS.CoreV1().Pods(r.Namespace).Delete(ctx, pods[0].Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatalf("delete %s: %v", pods[0].Name, err)
		}
		var o executor.Output
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
			if o = read(rest[1]); o.Status.State != executor.Running || time.Now().After(deadline) {
				break
			}
		}
		if o.Status.State != executor.Completed || o.Status.ExitCode != 7 {
			t.Errorf("the task after %s was deleted, read through %s: %+v", pods[0].Name, pods[1].Name, o.Status)
		}
		var want strings.Builder
		for i := 1; i <= ticks; i++ {
			fmt.Fprintf(&want, "tick %d\n", i)
		}
		want.WriteString("done\n")
		if out.String() != want.String() {
			t.Errorf("the task's output read across the delete:\n%q\nwant\n%q", out.String(), want.String())
		}
	})

	t.Run("rolling-update-under-load", func(t *testing.T) {
		// The Deployment's replacement for the deleted pod first.
		r.readyServerPods(t, 2)
		rollingUpdate(t, r, tok, hc, tr)
	})
}

// rollingUpdate runs 10 REST and 10 MCP sessions calling in a loop through
// the Service while a helm upgrade (a new pod annotation) rolls both
// replicas, until the old pods are gone: no call may fail. (25 and 25 until
// 2026-12-07: their 50 pods took 77 s to make on the loaded CI node and
// their calls loaded it through the rollout; 20 still call 20-60 times a
// second.)
func rollingUpdate(t *testing.T, r *Release, tok string, hc *http.Client, tr http.RoundTripper) {
	ctx := context.Background()
	const perTransport = 10
	type sample struct {
		at, took time.Duration
		err      error
	}
	type caller struct {
		name string
		call func(ctx context.Context, command string) (tools.Result, error)
	}
	var callers []caller
	rc := client.New(r.URL, tok, hc)
	for i := range perTransport {
		s := fmt.Sprintf("roll-rest-%d", i)
		callers = append(callers, caller{s, func(ctx context.Context, command string) (tools.Result, error) {
			return rc.Call(ctx, s, tools.ToolBash, bashArgs(command, false))
		}})
	}
	for i := range perTransport {
		s := fmt.Sprintf("roll-mcp-%d", i)
		mc := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		cs, err := mc.Connect(ctx, client.MCPTransport(r.URL+"/mcp", tok, s, tr), nil)
		if err != nil {
			t.Fatalf("MCP %s: %v", s, err)
		}
		defer cs.Close()
		callers = append(callers, caller{s, func(ctx context.Context, command string) (tools.Result, error) {
			return client.CallMCP(ctx, cs, tools.ToolBash, bashArgs(command, false))
		}})
	}
	// Every session's pod first (8 made at once), so that the rollout's
	// calls are warm ones.
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			if res, err := c.call(ctx, "true"); err != nil || res.IsError {
				t.Errorf("%s: first call: %v %s", c.name, err, res.Text)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d sessions ready in %s", len(callers), time.Since(start).Round(time.Millisecond))

	old, err := r.ServerPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	samples := make([][]sample, len(callers))
	t0 := time.Now()
	for i, c := range callers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				word := fmt.Sprintf("%s-%d", c.name, n)
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				s := time.Now()
				res, err := c.call(cctx, "echo "+word)
				cancel()
				if err == nil && (res.IsError || res.Text != word) {
					err = fmt.Errorf("answer %q, want %q", res.Text, word)
				}
				samples[i] = append(samples[i], sample{at: s.Sub(t0), took: time.Since(s), err: err})
				// At most ~60 calls/s in all: the 2-core node stays able to
				// run the rollout (its probes, the new pods' start).
				time.Sleep(300 * time.Millisecond)
			}
		})
	}
	time.Sleep(3 * time.Second)
	rollStart := time.Since(t0)
	r.Upgrade(t, map[string]any{"podAnnotations": map[string]any{"e2e/roll": randomHex(4)}})
	// The upgrade returns once the new pods are ready; the old ones are
	// still leaving (preStop sleep, drain delay, drain).
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		pods, err := r.c.CS.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=server,app.kubernetes.io/instance=" + r.Name})
		if err != nil {
			t.Fatal(err)
		}
		left := slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
			return slices.ContainsFunc(old, func(o corev1.Pod) bool { return o.UID == p.UID })
		})
		if !left {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("old server pods still there 2m after the upgrade")
			break
		}
	}
	rollEnd := time.Since(t0)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	var during, all []time.Duration
	failed := 0
	for i, ss := range samples {
		for _, s := range ss {
			all = append(all, s.took)
			if s.at >= rollStart && s.at <= rollEnd {
				during = append(during, s.took)
			}
			if s.err == nil {
				continue
			}
			failed++
			if failed > 10 {
				continue
			}
			why := ""
			if keepAliveRace(s.err) {
				// The client's POSTs carry an Idempotency-Key, so Go's
				// transport resends one whose kept-alive connection the
				// leaving server closed; this one was not, or failed again.
				why = " (a kept-alive connection closed under the request, not resent)"
			}
			t.Errorf("%s, %s after the upgrade began: %v%s", callers[i].name, (s.at - rollStart).Round(time.Millisecond), s.err, why)
		}
	}
	t.Logf("rolling update of %d replicas took %s; %d calls during it (%d in all) from %d sessions, %d failed; during: p50=%s p99=%s max=%s; all: p50=%s p99=%s",
		len(old), (rollEnd - rollStart).Round(time.Millisecond), len(during), len(all), len(callers), failed,
		pct(during, 50), pct(during, 99), pct(during, 100), pct(all, 50), pct(all, 99))
	if len(during) == 0 {
		t.Errorf("no calls during the rollout")
	}
}

// keepAliveRace reports whether err is a call's connection ending before
// any answer: the server closed a kept-alive connection as the request
// went out on it (url.Error wrapping io.EOF, or Go's "server closed idle
// connection").
func keepAliveRace(err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) && errors.Is(ue.Err, io.EOF) {
		return true
	}
	// Go's transport says so in words when it saw the close (the MCP SDK
	// passes the text on, not the error).
	return err != nil && strings.Contains(err.Error(), "http: server closed idle connection")
}

// readyServerPods is ReadyServerPods.
func (r *Release) readyServerPods(t *testing.T, n int) []corev1.Pod { return r.ReadyServerPods(t, n) }

// podURL is PodURL.
func podURL(p corev1.Pod) string { return PodURL(p) }

// pct is the p-th percentile of ds (100: the maximum).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))].Round(100 * time.Microsecond)
}

func TestKeepAliveRace(t *testing.T) {
	race := &url.Error{Op: "Post", URL: "http://x/v1/sessions/s/tools/bash", Err: io.EOF}
	if !keepAliveRace(race) || !keepAliveRace(fmt.Errorf("call: %w", race)) {
		t.Error("a POST ended by EOF before any answer is the keep-alive race")
	}
	if !keepAliveRace(errors.New(`calling "tools/call": sending "tools/call": rejected by transport: Post "http://x/mcp": http: server closed idle connection`)) {
		t.Error("an MCP call ended by a server-closed idle connection is the keep-alive race")
	}
	for _, err := range []error{io.EOF, errors.New("EOF"), &url.Error{Op: "Post", Err: errors.New("connection refused")}} {
		if keepAliveRace(err) {
			t.Errorf("%v taken for the keep-alive race", err)
		}
	}
}
