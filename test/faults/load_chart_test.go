package faults_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/deploy/helm/e2e"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// chartLoadPolicy is the chart load's tenant: runc pods as small as a
// call of the load needs, so that 200 of them fit the one-node CI
// cluster's 2 cores and 24 GiB (a pod requests its memory in full, and
// its CPU at kube.cpuRequestRatio of the limit, which loadChart lowers;
// its memory must exceed its memory-backed workspace, /tmp and spills),
// and sessions beyond one per agent.
func chartLoadPolicy(agents int) string {
	return fmt.Sprintf(`version: 1
description: the chart load's tenant
default: allow
sandbox:
  runtime: runc
  cpus: 0.5
  memory: 64MiB
  disk: 16MiB
  tmp: 16MiB
limits:
  sessions: %d
  spillBytes: 8MiB
`, 2*agents)
}

// chartLoadCPURatio is the session pods' CPU request as a fraction of
// their limit (kube.cpuRequestRatio) in the chart load: at the chart's
// 0.1 a pod of 0.5 CPU requests 50m, and the node's 2 cores schedule 40
// of them; at 0.01, 5m, 200 take 1 core of requests.
const chartLoadCPURatio = 0.01

// loadChart is TestLoad on the chart (target "chart"): the Helm release
// as it is deployed (e2e.Install), 2 server replicas, session pods of
// runc, the service without affinity. The agents are load()'s, but each
// call of an agent goes to the other replica than its previous one (by
// pod IP, as the soak's workers), and every session's first call makes a
// pod through the replica it reaches. The tenant's limits are raised as
// load()'s: concurrent calls, rate, sessions, and each replica's creation
// queue and its wait (sandbox.createQueue, createQueueWait).
//
// Pass: every call answered with its output; after the agents deleted
// their sessions, no session pod and the Secrets of the start in the
// sessions namespace (2 minutes of looks: pods terminate and the garbage
// collector takes their Secrets a moment after); no server pod
// restarted, nor a panic in their logs. Logged, never asserted: load()'s
// latencies, each replica's CPU per call it served (process_cpu_seconds_total
// of its /metrics over the run) and largest RSS, the host's CPU and load
// average, and the session pods over the run.
func loadChart(t *testing.T, agents int, duration time.Duration) {
	c := kubetest.Connect(t)
	r := e2e.Install(t, c, e2e.Options{
		Tenants: []e2e.Tenant{{Name: "load", Policy: chartLoadPolicy(agents)}},
		Values: map[string]any{
			"replicaCount": 2,
			"service":      map[string]any{"sessionAffinity": "None"},
			"kube":         map[string]any{"cpuRequestRatio": chartLoadCPURatio},
			// Every first call at once: room in each replica's creation
			// queue for all, and a wait as long as the run. 2 creations
			// at a time per replica, the node's 4 as the host's
			// (sandbox.maxCreating): at e2e's 8 each, 16 pods starting
			// at once beside the running agents' calls (load 90 on
			// the 2 cores) took past a creation's 2 minutes
			// (sandbox.Config.CreateTimeout, kube.readyTimeout).
			"sandbox": map[string]any{"maxCreating": 2, "createQueue": agents + 16, "createQueueWait": firstCallBound.String()},
			"server": map[string]any{
				// Debug lines of every call are load of their own.
				"logLevel": "info",
				"tenants":  map[string]any{"load": map[string]any{"maxConcurrentCalls": max(512, 2*agents)}},
			},
		},
	})
	pods := r.ReadyServerPods(t, 2)
	names := []string{pods[0].Name, pods[1].Name}
	urls := []string{e2e.PodURL(pods[0]), e2e.PodURL(pods[1])}
	t.Logf("load chart: release %s, replicas %s (%s) and %s (%s), %d agents for %s; load average %.1f",
		r.Name, names[0], urls[0], names[1], urls[1], agents, duration, load1())

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = agents + 4
	hc := &http.Client{Transport: tr}
	tok := r.Tokens["load"]
	cs := []*client.Client{client.New(urls[0], tok, hc), client.New(urls[1], tok, hc)}
	kubeHosted := kubeHost(t, c, r.SessionsNamespace)
	cpu := func() []float64 {
		return []float64{serverMetrics(t, urls[0])["process_cpu_seconds_total"], serverMetrics(t, urls[1])["process_cpu_seconds_total"]}
	}
	start := kubeHosted()

	st := newLatencies()
	var served [2]atomic.Int64 // calls (and DELETEs) each replica answered
	var ramp rampUp
	cpu0 := cpu()
	busy0, total0 := hostCPU(t)
	begin := time.Now()
	end := begin.Add(duration)
	var wg sync.WaitGroup
	for w := range agents {
		wg.Go(func() {
			time.Sleep(time.Duration(w) * loadArrival)
			session := fmt.Sprintf("load-chart-%d", w)
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(begin.UnixNano())))
			i, made := 0, false
			for ; time.Now().Before(end) || i == 0; i++ {
				work, n := rnd.IntN(201), 1+rnd.IntN(1000)
				args, want := workCall(work, n)
				// A call that makes the session's sandbox (the first, or
				// the next after it failed) waits its turn at its
				// replica's creation admission, behind every other
				// agent's.
				bound := hung
				if !made {
					bound = firstCallBound
				}
				rep := (w + i) % 2
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				start := time.Now()
				res, err := cs[rep].Call(ctx, session, tools.ToolBash, json.RawMessage(args))
				took := time.Since(start)
				cancel()
				served[rep].Add(1)
				failure := ""
				switch {
				case err != nil:
					failure = fmt.Sprintf("%s call %d (r%d): %s: %v", session, i, rep, took.Round(time.Millisecond), err)
				case res.IsError || res.Text != want:
					text := res.Text
					if len(text) > 300 {
						text = text[:150] + " … " + text[len(text)-150:]
					}
					failure = fmt.Sprintf("%s call %d (r%d, seq 1 %d): %s: %q", session, i, rep, n, took.Round(time.Millisecond), text)
				}
				kind := ramp.kind(i, start, agents)
				st.add(kind, took, failure)
				made = made || failure == ""
				if i > 0 && failure == "" {
					st.beyond("call beyond its work", took-time.Duration(work)*time.Millisecond)
				}
				if failure != "" {
					// A release refusing every call (its policy not
					// loading) answers at once: no flood of failures.
					time.Sleep(time.Second)
				}
			}
			rep := (w + i) % 2
			ctx, cancel := context.WithTimeout(context.Background(), hung)
			defer cancel()
			start := time.Now()
			err := cs[rep].DeleteSession(ctx, session)
			served[rep].Add(1)
			failure := ""
			switch {
			case err != nil && !made && strings.Contains(err.Error(), "no_such_session"):
				// Every call of the agent failed (counted): it has no
				// session to delete.
			case err != nil:
				failure = fmt.Sprintf("deleting %s (r%d): %v", session, rep, err)
			}
			st.add("delete session", time.Since(start), failure)
		})
	}

	// Every 10 s: the calls, the session pods and Secrets, each replica's
	// RSS, the load average, for the log.
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	tick := time.NewTicker(soakEvery)
	maxLoad, maxPods := load1(), 0
	maxRSS := make([]int64, 2)
	sampleRSS := func() string {
		var b strings.Builder
		for i, u := range urls {
			rss := int64(serverMetrics(t, u)["process_resident_memory_bytes"])
			maxRSS[i] = max(maxRSS[i], rss)
			fmt.Fprintf(&b, " r%d rss=%dMiB", i, rss>>20)
		}
		return b.String()
	}
loop:
	for {
		select {
		case <-tick.C:
			l := load1()
			maxLoad = max(maxLoad, l)
			k := kubeHosted()
			maxPods = max(maxPods, k.pods)
			st.mu.Lock()
			calls := st.calls
			st.mu.Unlock()
			made, _ := ramp.state()
			t.Logf("load chart: t=%s calls=%d sandboxes made=%d pods=%d secrets=%d%s load=%.1f",
				time.Since(begin).Round(time.Second), calls, made, k.pods, k.secrets, sampleRSS(), l)
		case <-workersDone:
			break loop
		}
	}
	tick.Stop()
	elapsed := time.Since(begin)
	cpu1 := cpu()
	busy1, total1 := hostCPU(t)
	sampleRSS()
	tr.CloseIdleConnections()

	// Pods terminate and the garbage collector takes their Secrets a
	// moment after the DELETEs answered: the last of 2 minutes of looks.
	var final kubeCounts
	var settledAfter time.Duration
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		final = kubeHosted()
		settledAfter = time.Since(begin) - elapsed
		if final.pods == 0 && final.secrets == start.secrets || time.Now().After(deadline) {
			break
		}
	}

	st.mu.Lock()
	calls, failures, first := st.calls, st.failures, st.first
	st.mu.Unlock()
	if calls <= agents {
		t.Fatalf("the load made %d calls for %d agents", calls, agents)
	}
	if failures > 0 {
		t.Errorf("%d of %d calls failed; the first:\n%s", failures, calls, strings.Join(first, "\n"))
	}
	if final.pods != 0 || final.secrets != start.secrets {
		t.Errorf("after the last session, in %s: %d pods, %d Secrets (at the start 0, %d)", r.SessionsNamespace, final.pods, final.secrets, start.secrets)
		leftPods(t, c, r, names)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	live, err := r.ServerPods(ctx)
	if err != nil {
		t.Fatalf("the server pods: %v", err)
	}
	restarts := 0
	for _, p := range live {
		for _, s := range p.Status.ContainerStatuses {
			restarts += int(s.RestartCount)
		}
	}
	if restarts != 0 || len(live) != 2 || live[0].Name != names[0] || live[1].Name != names[1] {
		t.Errorf("the server pods are %v with %d restarts, want %v without", podNames(live), restarts, names)
	}
	for _, n := range names {
		if p := logPanics(t, c, r.Namespace, n); p > 0 {
			t.Errorf("%s's log has %d lines with a panic", n, p)
		}
	}

	rampTook := "never"
	if _, allUp := ramp.state(); !allUp.IsZero() {
		rampTook = allUp.Sub(begin).Round(100 * time.Millisecond).String()
	}
	var perReplica strings.Builder
	for i := range 2 {
		n := served[i].Load()
		fmt.Fprintf(&perReplica, "r%d %d calls, CPU %.2f ms per call (%.1f s), RSS at most %d MiB; ",
			i, n, (cpu1[i]-cpu0[i])*1000/float64(max(1, n)), cpu1[i]-cpu0[i], maxRSS[i]>>20)
	}
	hostBusy := float64(busy1-busy0) / float64(max(1, total1-total0)) * float64(runtimeCPUs())
	t.Logf("load figures chart: 2 replicas, %d agents, %s (%s with the deletes), %d calls (%.0f/s), %d failed; all sandboxes up after %s; "+
		"session pods at most %d, %d pods and %d Secrets left %s after the last DELETE (%d at the start); %s"+
		"both %.2f ms per call; host CPU busy %.2f of %d cores (%.1f ms per call); load average at most %.1f, %.1f at the end; latencies: %s",
		agents, duration, elapsed.Round(time.Second), calls, float64(calls)/elapsed.Seconds(), failures, rampTook,
		maxPods, final.pods, final.secrets, settledAfter.Round(time.Second), start.secrets, perReplica.String(),
		(cpu1[0]-cpu0[0]+cpu1[1]-cpu0[1])*1000/float64(calls), hostBusy, runtimeCPUs(), float64(busy1-busy0)*10/float64(calls),
		maxLoad, load1(), st)
}

// leftPods logs the session pods left in r's sessions namespace (their
// session, age, phase, deletion) and the lines of the servers' logs
// (names) that name their sessions, at most 40 a server: how they were
// made and why no DELETE took them.
func leftPods(t *testing.T, c *kubetest.Cluster, r *e2e.Release, names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := c.CS.CoreV1().Pods(r.SessionsNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("listing the pods left: %v", err)
		return
	}
	var sessions []string
	for _, p := range pods.Items {
		sess := p.Annotations[kube.AnnotationSession]
		sessions = append(sessions, `"session":"`+sess+`"`, "session "+sess+":", p.Name)
		t.Logf("left: pod %s (session %s, uid %s) made %s, %s, deleted at %v", p.Name, sess, p.UID,
			p.CreationTimestamp.UTC().Format(time.TimeOnly), p.Status.Phase, p.DeletionTimestamp)
	}
	for _, n := range names {
		rc, err := c.CS.CoreV1().Pods(r.Namespace).GetLogs(n, &corev1.PodLogOptions{}).Stream(ctx)
		if err != nil {
			t.Errorf("the log of %s: %v", n, err)
			continue
		}
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for kept := 0; sc.Scan() && kept < 40; {
			line := sc.Text()
			if slices.ContainsFunc(sessions, func(s string) bool { return strings.Contains(line, s) }) &&
				!strings.Contains(line, `"status":200`) {
				t.Logf("left: %s: %s", n, line)
				kept++
			}
		}
		rc.Close()
	}
}
