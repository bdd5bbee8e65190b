package faults_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/shellbox/shellbox/deploy/helm/e2e"
	"github.com/shellbox/shellbox/kube/approvals"
	"github.com/shellbox/shellbox/kube/events"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// chartSoak stands for the Helm chart in soakTargets (the target
// "chart"): soak hands it to soakChart.
var chartSoak = enginetest.Engine{Name: "chart"}

// chartSoakPolicy is the chart soak's tenant: runc pods, uname asked
// (chartAsk), sessions beyond one per worker (a deleted session's pod may
// still be going while the worker's next one starts).
func chartSoakPolicy(sessions int) string {
	return fmt.Sprintf(`version: 1
description: the chart soak's tenant
default: allow
askTimeout: 2m
sandbox:
  runtime: runc
  cpus: 0.5
  memory: 128MiB
  disk: 32MiB
  tmp: 16MiB
limits:
  sessions: %d
  spillBytes: 16MiB
rules:
  - name: ask-uname
    decision: ask
    reason: the soak asks
    match:
      command: [uname]
`, 2*sessions)
}

// chartOp makes the op-th call of a session on the chart if it is one of
// the release's kinds (op%soakChurn 12: an ask, 24: files in and out, 30:
// suspend and resume; each in place of a foreground call), through a,
// then b, the other replica. It reports whether it did.
func chartOp(op int, session string, a, b *client.Client, check soakCheck) bool {
	switch op % soakChurn {
	case 12:
		chartAsk(session, a, b, check)
	case 24:
		chartFiles(op, session, a, b, check)
	case 30:
		chartSuspend(op, session, a, b, check)
	default:
		return false
	}
	return true
}

// chartAsk: a call the policy asks about, held by holder; the ask is
// listed and approved through approver, the other replica; the held call
// then runs.
func chartAsk(session string, holder, approver *client.Client, check soakCheck) {
	type answer struct {
		r    tools.Result
		err  error
		took time.Duration
	}
	got := make(chan answer, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hung)
		defer cancel()
		r, err := holder.Call(ctx, session, tools.ToolBash, json.RawMessage(`{"command":"uname -s","description":"soak: asked"}`))
		got <- answer{r, err, time.Since(start)}
	}()
	id, ended := "", false
	var lerr error
	for deadline := time.Now().Add(hung); id == "" && !ended && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), hung)
		aps, err := approver.Approvals(ctx, "pending")
		cancel()
		if lerr = err; err != nil {
			continue
		}
		for _, a := range aps {
			if a.Session == session && a.Command == "uname -s" {
				id = a.ID
			}
		}
		select {
		case a := <-got:
			got <- a
			ended = true // answered before it was approved: a failure below
		default:
		}
	}
	if id == "" {
		check("approve (other replica)", time.Since(start), fmt.Errorf("no pending approval of %s listed through the other replica (the call ended: %v; last list error: %v)", session, ended, lerr), tools.Result{}, false)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), hung)
		t0 := time.Now()
		_, err := approver.Decide(ctx, id, true, "soak", "fine")
		cancel()
		check("approve (other replica)", time.Since(t0), err, tools.Result{}, err == nil)
	}
	a := <-got
	check("asked call", a.took, a.err, a.r, a.err == nil && !a.r.IsError && a.r.Text == "Linux")
}

// chartFiles: 64 KiB of random bytes put into the workspace through in,
// read back whole through out.
func chartFiles(op int, session string, in, out *client.Client, check soakCheck) {
	body := make([]byte, 64<<10)
	rand.Read(body)
	path := fmt.Sprintf("/workspace/in-%d", op)
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	start := time.Now()
	w, err := in.PutFile(ctx, session, path, bytes.NewReader(body), client.PutOptions{Size: int64(len(body))})
	check("file in", time.Since(start), err, tools.Result{Text: fmt.Sprintf("%+v", w)}, err == nil && w.Bytes == int64(len(body)))
	if err != nil {
		return
	}
	start = time.Now()
	var got []byte
	_, rc, err := out.GetFile(ctx, session, path, false)
	if err == nil {
		got, err = io.ReadAll(io.LimitReader(rc, 1<<20))
		rc.Close()
	}
	check("file out (other replica)", time.Since(start), err, tools.Result{Text: fmt.Sprintf("%d bytes, not the %d put", len(got), len(body))},
		err == nil && bytes.Equal(got, body))
}

// chartSuspend: the session suspended through a (its pod gone, its
// workspace in the bucket); its next call, through b, resumes it and
// reads the file the previous op (op%6 5) wrote.
func chartSuspend(op int, session string, a, b *client.Client, check soakCheck) {
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	start := time.Now()
	si, err := a.SuspendSession(ctx, session)
	check("suspend", time.Since(start), err, tools.Result{Text: fmt.Sprintf("%+v", si)}, err == nil && si.State == "suspended" && si.Snapshot != "")
	if err != nil {
		return
	}
	start = time.Now()
	r, err := b.Call(ctx, session, tools.ToolBash, json.RawMessage(`{"command":"cat /workspace/f","description":"soak: resumed"}`))
	check("resume (other replica)", time.Since(start), err, r, err == nil && !r.IsError && r.Text == strconv.Itoa(op-1))
}

// replicaSample is one replica's figures, from its /metrics.
type replicaSample struct {
	rss, heap       int64
	goroutines, fds int
}

// chartSample is one look at the release during the chart soak.
type chartSample struct {
	at        time.Duration
	replicas  []replicaSample
	kube      kubeCounts // the sessions namespace
	approvals int        // the release's Approvals
	pending   int        // of them pending
	restarts  int        // the server pods' container restarts
	calls     int
}

func (s chartSample) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%s", s.at.Round(time.Second))
	for i, r := range s.replicas {
		fmt.Fprintf(&b, " r%d[rss=%dMiB heap=%dMiB goroutines=%d fds=%d]", i, r.rss>>20, r.heap>>20, r.goroutines, r.fds)
	}
	fmt.Fprintf(&b, " pods=%d secrets=%d other=%d approvals=%d pending=%d events=%d (oldest %s) restarts=%d calls=%d",
		s.kube.pods, s.kube.secrets, s.kube.other, s.approvals, s.pending, s.kube.events, s.kube.eventsOldest.Round(time.Second), s.restarts, s.calls)
	return b.String()
}

// eventsBound is the oldest a relayed Event may be while the release
// runs: kube/events deletes its own at DefaultKeep, looked at every
// tenth of it, one delete at a time; a minute of slack for those deletes
// on a loaded API server.
const eventsBound = events.DefaultKeep + time.Minute

// soakChart is TestSoak on the chart (target "chart"): the Helm release
// as it is deployed (e2e.Install: the chart's own Deployment, Service,
// RBAC and CRD), 2 server replicas, session pods of runc, suspended
// sessions in an S3 bucket both replicas reach (e2e.SnapshotStore),
// Approvals and relayed Events as cluster objects. The workers call
// each replica by its pod IP in turn, every call of a session going to
// the other replica than the one before (a Service without affinity),
// with the chart's kinds besides the soak's mix (chartOp). Every 10 s:
// each replica's RSS, Go heap, goroutines and open fds (its /metrics:
// the replicas are pods), the sessions namespace's pods, Secrets and
// other objects, the release's Approvals (pending ones too) and relayed
// Events (and the oldest's age), the server pods' restarts.
//
// Pass, besides TestSoak's (no call failed; each replica's fds, goroutines
// and RSS as a server's there): no server pod restarted; after the last
// session is deleted no session pod, the Secrets and other objects of the
// start, no pending Approval and at most approvals.DefaultMaxHistory
// decided ones (the tenant's history the store keeps); no relayed Event
// older than eventsBound at any sample (they are deleted, not left to the
// API server's hour).
func soakChart(t *testing.T, duration time.Duration, sessions int) {
	c := kubetest.Connect(t)
	storeVals, storeSecrets, store, mc := e2e.SnapshotStore(t, c)
	r := e2e.Install(t, c, e2e.Options{
		Tenants: []e2e.Tenant{{Name: "soak", Policy: chartSoakPolicy(sessions)}},
		Secrets: storeSecrets,
		Values: map[string]any{
			"snapshots":    storeVals["snapshots"],
			"replicaCount": 2,
			"service":      map[string]any{"sessionAffinity": "None"},
			// Debug lines of 30 minutes of calls are load of their own.
			"server": map[string]any{"logLevel": "info"},
		},
	})
	pods := r.ReadyServerPods(t, 2)
	names := []string{pods[0].Name, pods[1].Name}
	urls := []string{e2e.PodURL(pods[0]), e2e.PodURL(pods[1])}
	t.Logf("soak chart: release %s, replicas %s (%s) and %s (%s), %d sessions for %s",
		r.Name, names[0], urls[0], names[1], urls[1], sessions, duration)

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = sessions + 4
	hc := &http.Client{Transport: tr}
	tok := r.Tokens["soak"]
	cs := []*client.Client{client.New(urls[0], tok, hc), client.New(urls[1], tok, hc)}

	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	kubeHosted := kubeHost(t, c, r.SessionsNamespace)
	sample := func(at time.Duration, calls int) chartSample {
		smp := chartSample{at: at, calls: calls, kube: kubeHosted()}
		for _, u := range urls {
			m := serverMetrics(t, u)
			smp.replicas = append(smp.replicas, replicaSample{rss: int64(m["process_resident_memory_bytes"]),
				heap: int64(m["go_memstats_heap_inuse_bytes"]), goroutines: int(m["go_goroutines"]), fds: int(m["process_open_fds"])})
		}
		ctx, cancel := context.WithTimeout(context.Background(), hung)
		defer cancel()
		aps, err := dc.Resource(approvals.GVR).Namespace(r.SessionsNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing approvals of %s: %v", r.SessionsNamespace, err)
		}
		smp.approvals = len(aps.Items)
		for _, a := range aps.Items {
			if st, _, _ := unstructured.NestedString(a.Object, "status", "state"); st == "pending" {
				smp.pending++
			}
		}
		live, err := r.ServerPods(ctx)
		if err != nil {
			t.Fatalf("the server pods: %v", err)
		}
		for _, p := range live {
			for _, s := range p.Status.ContainerStatuses {
				smp.restarts += int(s.RestartCount)
			}
		}
		if len(live) != 2 || live[0].Name != names[0] || live[1].Name != names[1] {
			t.Errorf("at %s the server pods are %v, want %v", at.Round(time.Second), podNames(live), names)
		}
		return smp
	}
	startSample := sample(0, 0)
	t.Logf("soak chart: start: %s", startSample)

	st := &soakStats{latencies: map[string][]time.Duration{}}
	begin := time.Now()
	end := begin.Add(duration)
	var wg sync.WaitGroup
	last := make([]string, sessions)
	for w := range sessions {
		wg.Go(func() {
			time.Sleep(time.Duration(w) * 500 * time.Millisecond)
			last[w] = soakWorker(cs, fmt.Sprintf("soak-chart-%d-", w), end, st, true)
		})
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()

	warm := make([]replicaSample, 2)
	var maxEvents int
	var oldest time.Duration
	tick := time.NewTicker(soakEvery)
loop:
	for {
		select {
		case <-tick.C:
			st.mu.Lock()
			calls := st.calls
			st.mu.Unlock()
			smp := sample(time.Since(begin), calls)
			for i, rs := range smp.replicas {
				if smp.at <= duration/2 && rs.rss >= warm[i].rss {
					warm[i] = rs
				}
			}
			maxEvents, oldest = max(maxEvents, smp.kube.events), max(oldest, smp.kube.eventsOldest)
			t.Logf("soak chart: %s", smp)
		case <-workersDone:
			break loop
		}
	}
	tick.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i, n := range last {
		if err := cs[i%2].DeleteSession(ctx, n); err != nil && !strings.Contains(err.Error(), "no_such_session") {
			t.Errorf("deleting session %s: %v", n, err)
		}
	}
	tr.CloseIdleConnections()

	// Pods terminate and the garbage collector takes their Secrets a
	// moment after: the last of 2 minutes of looks.
	settled := func(s chartSample) bool {
		ok := s.kube.pods == 0 && s.kube.secrets == startSample.kube.secrets && s.kube.other == startSample.kube.other && s.pending == 0
		for i, rs := range s.replicas {
			ok = ok && rs.fds <= startSample.replicas[i].fds+5 && rs.goroutines <= startSample.replicas[i].goroutines*11/10+10
		}
		return ok
	}
	var final chartSample
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		final = sample(time.Since(begin), st.calls)
		if settled(final) || time.Now().After(deadline) {
			break
		}
	}
	oldest = max(oldest, final.kube.eventsOldest)
	t.Logf("soak chart: end (all sessions deleted): %s", final)

	var objects int
	for o := range mc.ListObjects(ctx, store.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Errorf("listing the bucket: %v", o.Err)
			break
		}
		objects++
	}

	if st.calls == 0 {
		t.Fatal("the soak made no call")
	}
	if st.failures > 0 {
		t.Errorf("%d of %d calls failed; the first:\n%s", st.failures, st.calls, strings.Join(st.first, "\n"))
	}
	if st.refusals > 0 {
		t.Logf("%d of %d calls refused by the server's backpressure (not failures); the first:\n%s", st.refusals, st.calls, strings.Join(st.refused, "\n"))
	}
	if k := final.kube; k.pods != 0 || k.secrets != startSample.kube.secrets || k.other != startSample.kube.other {
		t.Errorf("after the last session, in %s: %d pods, %d Secrets, %d other objects (at the start 0, %d, %d)",
			r.SessionsNamespace, k.pods, k.secrets, k.other, startSample.kube.secrets, startSample.kube.other)
	}
	if final.pending != 0 || final.approvals > startSample.approvals+approvals.DefaultMaxHistory {
		t.Errorf("after the last session: %d Approvals, %d pending (want none pending, at most %d kept)", final.approvals, final.pending, approvals.DefaultMaxHistory)
	}
	if oldest > eventsBound {
		t.Errorf("a relayed Event %s old was still there (want at most %s: kube/events deletes them)", oldest.Round(time.Second), eventsBound)
	}
	if final.restarts != 0 {
		t.Errorf("the server pods restarted %d times", final.restarts)
	}
	for i, rs := range final.replicas {
		s0 := startSample.replicas[i]
		if rs.fds > s0.fds+5 {
			t.Errorf("%s's open fds: %d at the start, %d at the end", names[i], s0.fds, rs.fds)
		}
		if rs.goroutines > s0.goroutines*11/10+10 {
			t.Errorf("%s's goroutines: %d at the start, %d at the end", names[i], s0.goroutines, rs.goroutines)
		}
		if warm[i].rss > 0 && rs.rss > warm[i].rss*11/10+rssSlack {
			t.Errorf("%s's RSS: %d MiB at most in the run's first half, %d MiB at the end", names[i], warm[i].rss>>20, rs.rss>>20)
		}
		if n := logPanics(t, c, r.Namespace, names[i]); n > 0 {
			t.Errorf("%s's log has %d lines with a panic", names[i], n)
		}
	}
	t.Logf("soak figures chart: 2 replicas, %d sessions at a time, %s, %d calls, %d failed, %d refused (backpressure), %d sessions deleted; "+
		"relayed Events at most %d, the oldest %s; %d objects left in the bucket; start %s; warm r0 rss %dMiB r1 rss %dMiB; end %s; latencies: %s",
		sessions, duration, st.calls, st.failures, st.refusals, len(st.latencies["delete session"])+len(last), maxEvents, oldest.Round(time.Second),
		objects, startSample, warm[0].rss>>20, warm[1].rss>>20, final, soakLatencies(st))
}

func podNames(pods []corev1.Pod) []string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Name)
	}
	return n
}

// logPanics counts the lines of pod's log (its server container) that
// tell of a panic, read as a stream.
func logPanics(t *testing.T, c *kubetest.Cluster, ns, pod string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := c.CS.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).Stream(ctx)
	if err != nil {
		t.Errorf("the log of %s: %v", pod, err)
		return 0
	}
	defer rc.Close()
	n := 0
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "panic") {
			n++
		}
	}
	return n
}
