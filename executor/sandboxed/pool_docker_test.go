package sandboxed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/session/sandboxconn"
	"github.com/shellbox/shellbox/tools"
)

// poolRig is a Manager with warm pools over a real engine, its executor
// and tools; newPoolManager over the same runtime and claims is what a
// restarted server has.
type poolRig struct {
	owner  string
	rt     sandbox.Runtime
	claims sandbox.Claims
	m      *sandbox.Manager
	exec   *sandboxconn.Executor
	ts     *tools.Toolset
	opts   []sandbox.Opt
}

func newPoolRig(t testing.TB, e enginetest.Engine) *poolRig {
	t.Helper()
	cli := dockertest.Engine(t)
	dockertest.RemoveLeftovers(context.Background(), cli)
	sandboxedtest.TestImage(t)
	c, err := sandbox.NewDirClaims(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &poolRig{owner: dockertest.Owner(t), rt: e.Runtime(t, dockertest.StateDir(t), dockertest.Agent(t), sandbox.RuntimeRunc), claims: c,
		opts: []sandbox.Opt{sandbox.WithImage(dockertest.Image), sandbox.WithLabels(dockertest.Labels())}}
	if crt, ok := r.rt.(*containerd.Runtime); ok {
		if _, err := containerdtest.RemoveLeftovers(context.Background(), crt); err != nil {
			t.Logf("containerd leftovers: %v", err)
		}
	}
	r.start(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		r.stop()
		// Every sandbox of the rig's owner: claimed, pooled, and those
		// of Managers before a restart.
		list, err := r.rt.List(ctx, r.owner)
		if err != nil {
			t.Errorf("listing the rig's sandboxes: %v", err)
		}
		for _, sb := range list {
			if err := r.rt.Remove(ctx, sb.ID); err != nil {
				t.Errorf("remove sandbox %s/%s: %v", sb.Tenant, sb.Session, err)
			}
		}
	})
	return r
}

// start makes a fresh Manager, executor and tools (a server starting).
func (r *poolRig) start(t testing.TB) {
	t.Helper()
	// Wired as the server wires them (session.New): the readiness check's
	// agent connection is handed to the executor.
	h := sandboxconn.NewReadyConns()
	m, err := sandbox.NewManager(sandbox.Config{Runtime: r.rt, Owner: r.owner, Ready: h.Ready, Claims: r.claims,
		Prepare: h.WarmUp})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := sandboxconn.New(sandboxconn.Config{Manager: m, Tenant: tenant, Limits: executor.DefaultLimits(), Dial: h.Dial,
		Spec: func(session string) (sandbox.Spec, error) { return sandbox.NewSpec(tenant, session, r.opts...) }})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tools.New(ex, tools.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r.m, r.exec, r.ts = m, ex, ts
}

// stop closes the executor and tools; sandboxes stay.
func (r *poolRig) stop() {
	r.ts.Close()
	r.exec.Close()
}

func (r *poolRig) target(t testing.TB, size int) []sandbox.PoolTarget {
	t.Helper()
	s, err := sandbox.NewSpec(tenant, "template", r.opts...)
	if err != nil {
		t.Fatal(err)
	}
	return []sandbox.PoolTarget{{Template: s, Size: size}}
}

func (r *poolRig) bash(session, command string) tools.Result {
	args, _ := json.Marshal(map[string]string{"command": command, "description": "pool test"})
	return r.ts.Call(context.Background(), tools.Invocation{Tenant: tenant, Session: session, Tool: "bash", Args: args})
}

// A session claims a pooled sandbox on its first call, is bound to it per
// call (its own DSH_SESSION_ID, the template's user), and finds it again
// after a restart; the other pooled sandbox stays pooled.
func TestWarmPool(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		r := newPoolRig(t, e)
		ctx := context.Background()
		rep, err := r.m.Fill(ctx, r.target(t, 2))
		if err != nil || rep.Created != 2 {
			t.Fatalf("fill: %+v, %v", rep, err)
		}
		res := r.bash("p1", `echo "$DSH_SESSION_ID $(id -u)"; echo kept > /workspace/marker`)
		if res.Text != "p1 1000" {
			t.Fatalf("first call: %q", res.Text)
		}
		sb, err := r.m.Inspect(ctx, tenant, "p1")
		if err != nil || !sandbox.IsPooled(sb.PoolName) || sb.Session != "p1" {
			t.Fatalf("p1's sandbox: %+v, %v; want a claimed pooled one", sb, err)
		}

		r.stop()
		r.start(t)
		adopt, err := r.m.Adopt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(adopt.Kept) != 1 || adopt.Kept[0].ID != sb.ID || adopt.Kept[0].Session != "p1" || len(adopt.Pooled) != 1 {
			t.Fatalf("after a restart: kept %+v, pooled %+v; want p1's sandbox kept and one pooled", adopt.Kept, adopt.Pooled)
		}
		if res := r.bash("p1", "cat /workspace/marker"); res.Text != "kept" {
			t.Fatalf("p1 after a restart: %q", res.Text)
		}
		// The other session takes the other pooled sandbox, not p1's.
		if res := r.bash("p2", `echo "$DSH_SESSION_ID"; ls /workspace`); res.Text != "p2" {
			t.Fatalf("p2: %q (a fresh workspace expected)", res.Text)
		}
		sb2, err := r.m.Inspect(ctx, tenant, "p2")
		if err != nil || sb2.PoolName != adopt.Pooled[0].Session {
			t.Fatalf("p2's sandbox: %+v, %v; want %s", sb2, err, adopt.Pooled[0].Session)
		}
	})
}

// BenchmarkWarmPool measures, side by side in one run on each engine
// (runc): claim-<engine>, a new session's first call (`true` through the
// tools) when its tenant's pool has a ready sandbox (the claim record, the
// agent's check, the dial, the call); burst-<engine>-nopool and -pool50,
// 50 sessions' first calls started at once without a pool and with 50
// ready (first-ms-p50/p99 of those that ran; refused: those admission
// control turned away after sandbox.createQueueWait) and, meanwhile, the
// warm calls of one existing session (warm-ms-p50/p99). The bursts run
// once whatever -benchtime says.
//
//	go test ./executor/sandboxed/ -run '^$' -bench WarmPool -benchtime 20x
func BenchmarkWarmPool(b *testing.B) {
	for _, e := range enginetest.All {
		b.Run("claim-"+e.Name, func(b *testing.B) {
			r := newPoolRig(b, e)
			lat := make([]time.Duration, 0, b.N)
			i := 0
			for b.Loop() {
				b.StopTimer()
				if rep, err := r.m.Fill(context.Background(), r.target(b, 1)); err != nil || rep.Missing != 0 {
					b.Fatalf("fill: %+v, %v", rep, err)
				}
				session := fmt.Sprintf("claim-%d", i)
				i++
				b.StartTimer()
				t0 := time.Now()
				res := r.bash(session, "true")
				lat = append(lat, time.Since(t0))
				b.StopTimer()
				if res.Text != "(no output)" {
					b.Fatalf("got %q", res.Text)
				}
				if sb, err := r.m.Inspect(context.Background(), tenant, session); err != nil || sb.PoolName == "" {
					b.Fatalf("%s was not claimed from the pool: %+v, %v", session, sb, err)
				}
				r.exec.Forget(session)
				if err := r.m.Remove(context.Background(), tenant, session); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			executortest.ReportPercentiles(b, lat)
		})
		for _, size := range []int{0, 50} {
			name := "burst-" + e.Name + "-nopool"
			if size > 0 {
				name = fmt.Sprintf("burst-%s-pool%d", e.Name, size)
			}
			b.Run(name, func(b *testing.B) { benchBurst(b, e, size) })
		}
	}
}

const burstSessions = 50

func benchBurst(b *testing.B, e enginetest.Engine, size int) {
	r := newPoolRig(b, e)
	ctx := context.Background()
	if res := r.bash("warm", "true"); res.Text != "(no output)" {
		b.Fatalf("warm session: %q", res.Text)
	}
	if size > 0 {
		for {
			rep, err := r.m.Fill(ctx, r.target(b, size))
			if err != nil {
				b.Fatal(err)
			}
			if rep.Missing == 0 {
				break
			}
		}
	}
	var first, warm []time.Duration
	var mu sync.Mutex
	var errs []string
	refused := 0
	for b.Loop() {
		if first != nil {
			continue // one burst per run
		}
		done := make(chan struct{})
		var warmWG sync.WaitGroup
		warmWG.Add(1)
		go func() {
			defer warmWG.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				t0 := time.Now()
				res := r.bash("warm", "true")
				d := time.Since(t0)
				mu.Lock()
				warm = append(warm, d)
				if res.Text != "(no output)" {
					errs = append(errs, "warm: "+res.Text)
				}
				mu.Unlock()
			}
		}()
		var wg sync.WaitGroup
		for i := range burstSessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				res := r.bash(fmt.Sprintf("burst-%d", i), "true")
				d := time.Since(t0)
				mu.Lock()
				switch {
				case res.Text == "(no output)":
					first = append(first, d)
				case strings.Contains(res.Text, "too many sandboxes being created"):
					// Admission control at work: counted, not timed.
					if refused == 0 {
						b.Logf("refused: %s", res.Text)
					}
					refused++
				default:
					errs = append(errs, res.Text)
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(done)
		warmWG.Wait()
	}
	b.StopTimer()
	if len(errs) > 0 {
		b.Fatalf("%d failed calls, e.g. %q", len(errs), errs[0])
	}
	claimed := 0
	for _, sb := range r.m.Sandboxes() {
		if strings.HasPrefix(sb.Session, "burst-") && sb.PoolName != "" {
			claimed++
		}
	}
	slices.Sort(first)
	slices.Sort(warm)
	at := func(lat []time.Duration, p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(at(first, 0.5), "first-ms-p50")
	b.ReportMetric(at(first, 0.99), "first-ms-p99")
	b.ReportMetric(at(warm, 0.5), "warm-ms-p50")
	b.ReportMetric(at(warm, 0.99), "warm-ms-p99")
	b.ReportMetric(at(warm, 1), "warm-ms-max") // the bursts with a pool are short: few samples
	b.ReportMetric(float64(claimed), "claimed")
	b.ReportMetric(float64(refused), "refused")
	b.ReportMetric(float64(len(warm)), "warm-calls")
}
