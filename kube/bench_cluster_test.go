package kube_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
)

// Phases of a cold start, in order, as a poll of the pod (every 10 ms)
// first sees them: the pod's timestamps (conditions, container states,
// events) have whole seconds only, too coarse for starts of a second or
// two.
var phases = []string{
	"scheduled",  // PodScheduled (the scheduler bound it to the node)
	"init-done",  // the init container (the agent copied) terminated: pod sandbox, CNI, image, init
	"agent-runs", // the sandbox container running (the agent is PID 1)
	"ready",      // the readiness probe found the agent port open
	"created",    // Create returned (it polls every Config.Poll)
	"result",     // the first command's result through the agent
}

// BenchmarkClusterCold: a session's pod from Create to the first command's
// result ("true" through the agent), under runc and gVisor, on the cluster
// of SHELLBOX_KUBECONFIG; p50 of the whole and of each phase (ms since the
// previous phase). Run with -benchtime=5x or so; each op makes and deletes
// a pod (the deletion is not timed).
func BenchmarkClusterCold(b *testing.B) {
	c := kubetest.Connect(b)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			ns := c.Namespace(b)
			cfg := kubetest.Config(ns)
			cfg.Poll = 10 * time.Millisecond
			r := c.New(b, cfg, rt)
			ctx := context.Background()
			var total []time.Duration
			split := map[string][]time.Duration{}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				spec := kubetest.Spec(b, "bench", fmt.Sprintf("cold-%d", i), "bench", rt)
				start := time.Now()
				seen := watch(ctx, c, ns, kube.PodName(spec.Tenant, spec.Session))
				sb, err := r.Create(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				created := time.Now()
				if _, err := kubetest.Run(ctx, sb, "true", 10*time.Second); err != nil {
					b.Fatal(err)
				}
				end := time.Now()
				total = append(total, end.Sub(start))
				at := seen()
				at["created"], at["result"] = created, end
				prev := start
				for _, p := range phases {
					if t, ok := at[p]; ok && !t.Before(prev) {
						split[p] = append(split[p], t.Sub(prev))
						prev = t
					}
				}
				b.StopTimer()
				if err := r.Remove(ctx, sb.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(ms(p50(total)), "p50-ms/first-result")
			for _, p := range phases {
				if len(split[p]) > 0 {
					b.ReportMetric(ms(p50(split[p])), "p50-ms/"+p)
				}
			}
		})
	}
}

// BenchmarkClusterWarm: a command ("true") through the agent of a running
// session pod, on one connection (as the executor keeps it), under runc and
// gVisor; the time per op and its p50.
func BenchmarkClusterWarm(b *testing.B) {
	c := kubetest.Connect(b)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			ns := c.Namespace(b)
			r := c.New(b, kubetest.Config(ns), rt)
			ctx := context.Background()
			sb, err := r.Create(ctx, kubetest.Spec(b, "bench", "warm", "bench", rt))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = r.Remove(context.Background(), sb.ID) })
			cl, err := agentapi.DialEndpoint(ctx, sb.Agent)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			lim := executor.DefaultLimits()
			spec, err := lim.Resolve(ctx, executor.Request{Session: sb.Session, Command: "true"}, cl.Hello().Root,
				[]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cl.Run(ctx, spec); err != nil { // the connection made
				b.Fatal(err)
			}
			var each []time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if _, err := cl.Run(ctx, spec); err != nil {
					b.Fatal(err)
				}
				each = append(each, time.Since(t0))
			}
			b.ReportMetric(ms(p50(each)), "p50-ms")
		})
	}
}

// watch polls pod name every 10 ms until it is ready (or a minute has
// passed) and returns a func that stops it and returns when it first saw
// each phase.
func watch(ctx context.Context, c *kubetest.Cluster, ns, name string) func() map[string]time.Time {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	at := map[string]time.Time{}
	var mu sync.Mutex
	done := make(chan struct{})
	mark := func(p string, ok bool) {
		if _, seen := at[p]; ok && !seen {
			at[p] = time.Now()
		}
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			p, err := c.CS.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				mu.Lock()
				mark("scheduled", condition(p, corev1.PodScheduled))
				for _, s := range p.Status.InitContainerStatuses {
					mark("init-done", s.State.Terminated != nil)
				}
				for _, s := range p.Status.ContainerStatuses {
					mark("agent-runs", s.State.Running != nil)
				}
				mark("ready", condition(p, corev1.PodReady))
				_, ready := at["ready"]
				mu.Unlock()
				if ready {
					return
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return func() map[string]time.Time {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return at
	}
}

func condition(p *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func p50(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkClusterPoolClaim: a new session's first command ("true")
// through the agent of a pod claimed from a warm pool of one (Manager.
// Ensure with the release's claims: the session's lookup, the claim lock,
// the claim patch; then a new agent connection, as a new session's
// executor makes), under runc and gVisor; p50 and p99 (of the ops run).
// The refill of the pool after each op (a pod created) is not timed.
func BenchmarkClusterPoolClaim(b *testing.B) {
	c := kubetest.Connect(b)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			ns := c.Namespace(b)
			cfg := kubetest.Config(ns)
			r := c.New(b, cfg, rt)
			m, err := sandbox.NewManager(sandbox.Config{Runtime: r, Owner: cfg.Release, Claims: r.Claims()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			tmpl := kubetest.Spec(b, "bench", "template", cfg.Release, rt)
			pool := []sandbox.PoolTarget{{Template: tmpl, Size: 1}}
			fill := func() {
				if rep, err := m.Fill(ctx, pool); err != nil || rep.Missing != 0 {
					b.Fatalf("fill: %+v, %v", rep, err)
				}
			}
			fill()
			var each []time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				s := tmpl.Clone()
				s.Session = fmt.Sprintf("claim-%d", i)
				t0 := time.Now()
				sb, err := m.Ensure(ctx, s)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := kubetest.Run(ctx, sb, "true", 10*time.Second); err != nil {
					b.Fatal(err)
				}
				each = append(each, time.Since(t0))
				b.StopTimer()
				if sb.PoolName == "" {
					b.Fatalf("op %d: a cold start, not a claim", i)
				}
				if err := m.Remove(ctx, sb.Tenant, sb.Session); err != nil {
					b.Fatal(err)
				}
				fill()
				b.StartTimer()
			}
			b.ReportMetric(ms(quantile(each, 0.5)), "p50-ms")
			b.ReportMetric(ms(quantile(each, 0.99)), "p99-ms")
		})
	}
}

// quantile returns the q-quantile of d (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
