package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/internal/mountinfo"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// The load test's knobs: SHELLBOX_LOAD_AGENTS (sessions at once per
// target; default 20, which CI runs), SHELLBOX_LOAD_DURATION (a Go
// duration; default 30s) and SHELLBOX_LOAD_TARGETS (comma-separated, of
// docker/runc, containerd/runc, containerd/runsc, chart; default
// containerd/runc, the fastest to make a sandbox). chart is the Helm
// release on SHELLBOX_KUBECONFIG's cluster, 2 replicas (loadChart): on
// demand only, its pods take CI's time. TestFairness runs on the first
// host target of them.
const (
	envLoadAgents   = "SHELLBOX_LOAD_AGENTS"
	envLoadDuration = "SHELLBOX_LOAD_DURATION"
	envLoadTargets  = "SHELLBOX_LOAD_TARGETS"
)

// loadTargetList are the targets SHELLBOX_LOAD_TARGETS names (the soak's
// host targets and the chart; the cluster's kube/ ones are not here),
// containerd/runc by default.
func loadTargetList(t *testing.T) []soakTarget {
	t.Helper()
	v := os.Getenv(envLoadTargets)
	if v == "" {
		v = "containerd/runc"
	}
	var targets []soakTarget
	for _, name := range strings.Split(v, ",") {
		i := slices.IndexFunc(soakTargets, func(tg soakTarget) bool {
			return tg.name == strings.TrimSpace(name) && !strings.HasPrefix(tg.name, "kube/")
		})
		if i < 0 {
			t.Fatalf("%s=%q: no target %q (have docker/runc, containerd/runc, containerd/runsc, chart)", envLoadTargets, v, name)
		}
		targets = append(targets, soakTargets[i])
	}
	return targets
}

// loadTargets are the host targets of loadTargetList: a server of the
// test's own (TestFairness's); the test is skipped when only the chart
// is named.
func loadTargets(t *testing.T) []soakTarget {
	t.Helper()
	targets := slices.DeleteFunc(loadTargetList(t), func(tg soakTarget) bool { return tg.e.Name == chartSoak.Name })
	if len(targets) == 0 {
		t.Skipf("%s=%q names no host target (docker/runc, containerd/runc, containerd/runsc)", envLoadTargets, os.Getenv(envLoadTargets))
	}
	return targets
}

// envInt and envDuration read a knob, def when unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a count", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration: %v", name, v, err)
	}
	return d
}

// sandboxSetting adds a line to the sandbox block of s's config.
func (s *served) sandboxSetting(t *testing.T, line string) {
	t.Helper()
	b, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg, n := string(b), strings.Count(string(b), "\nsandbox:\n")
	if n != 1 {
		t.Fatalf("the config has %d sandbox blocks:\n%s", n, cfg)
	}
	cfg = strings.Replace(cfg, "\nsandbox:\n", "\nsandbox:\n  "+line+"\n", 1)
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cpuTicks is a process's CPU time (utime+stime, and its waited-for
// children's cutime+cstime) in clock ticks (USER_HZ, 100 on Linux).
func cpuTicks(t *testing.T, pid int) (self, children int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's ")": state is field 3, utime 14.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 15 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	n := make([]int64, 4)
	for i := range n {
		n[i], _ = strconv.ParseInt(f[11+i], 10, 64)
	}
	return n[0] + n[1], n[2] + n[3]
}

// hostCPU is the host's busy and total CPU time, in clock ticks, from
// /proc/stat (busy: all but idle and iowait).
func hostCPU(t *testing.T) (busy, total int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		total += v
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, total
}

// load1 is the host's 1-minute load average, as /proc/loadavg says.
func load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	l, _ := strconv.ParseFloat(f[0], 64)
	return l
}

// latencies keeps the latencies of calls by kind (bounded) with their
// outcomes.
type latencies struct {
	mu       sync.Mutex
	calls    int
	failures int
	first    []string // the first failures, bounded
	by       map[string][]time.Duration
}

func newLatencies() *latencies { return &latencies{by: map[string][]time.Duration{}} }

func (l *latencies) add(kind string, took time.Duration, failure string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if failure != "" {
		l.failures++
		if len(l.first) < maxFailuresKept {
			l.first = append(l.first, failure)
		}
		return
	}
	l.by[kind] = l.note(kind, took)
}

// note records a latency that is no call of its own; l.mu held.
func (l *latencies) note(kind string, took time.Duration) []time.Duration {
	d := l.by[kind]
	if len(d) < maxLatencies {
		d = append(d, took)
	}
	return d
}

// beyond records a figure derived from a call (not counted as a call).
func (l *latencies) beyond(kind string, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.by[kind] = l.note(kind, took)
}

// quantile is the q-quantile of sorted d (0 when empty).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*q))]
}

// String is each kind's count, p50, p99 and max.
func (l *latencies) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	kinds := make([]string, 0, len(l.by))
	for k := range l.by {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var out []string
	for _, k := range kinds {
		d := l.by[k]
		slices.Sort(d)
		out = append(out, fmt.Sprintf("%s n=%d p50=%s p99=%s max=%s", k, len(d),
			quantile(d, 0.5).Round(time.Millisecond), quantile(d, 0.99).Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond)))
	}
	return strings.Join(out, "; ")
}

// loadArrival is how far apart the load's agents make their first
// calls: 4 a second. All at once, 200 first calls at load 130 waited for
// the host's creation admission (4 at a time, 1.6 sandboxes a second)
// past the server's own bound on a creation, which counts the wait
// (sandbox.Config.CreateTimeout, 2 minutes): 14 of 200 failed
// (docs/reliability.md).
const loadArrival = 250 * time.Millisecond

// firstCallBound is how long a load agent's first call, which waits for
// its sandbox behind every other agent's, may take before the test calls
// it hung (and the server's creation queue's wait).
const firstCallBound = 15 * time.Minute

// workCall is a call of an agent of the load: w ms of sleep, then n
// lines of output, and the output it must answer.
func workCall(w, n int) (args, want string) {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = strconv.Itoa(i + 1)
	}
	return fmt.Sprintf(`{"command":"sleep %d.%03d; seq 1 %d","description":"load"}`, w/1000, w%1000, n), strings.Join(lines, "\n")
}

// TestLoad: on each target of SHELLBOX_LOAD_TARGETS (containerd/runc by
// default), SHELLBOX_LOAD_AGENTS agents (20) at once, each a session of
// one `shellbox serve` of its own, call for SHELLBOX_LOAD_DURATION (30s)
// without pause: each call 0-200 ms of work (sleep) and 1-1000 lines of
// output, checked. The agents start 250 ms apart (loadArrival): their
// first calls, which make the sandboxes, queue at the host's creation
// admission (sandbox.maxCreating, 4), whose queue and wait the test
// raises so that none is refused; the tenant's call, rate and session
// limits are raised too. Then each agent deletes its session.
//
// Pass: every call answered with its output (any error, a refusal
// included, fails: the test raised every limit it could meet); after the
// last session, no sandbox of the owner, no task or shim (containerd),
// no mount, loop device or file of a session under the state directory;
// the server alive, without a panic. Logged, never asserted: p50/p99 per
// kind (a session's first call; calls while sandboxes were still being
// made and once all were up; the call's time beyond its sleep; DELETE),
// the server's CPU per call (utime+stime of its process over the calls,
// and its reaped children's), the host's, and its load average.
//
// The chart target (loadChart) is the same load through the Helm release
// with 2 replicas, on demand, holding the cluster alone:
//
//	SHELLBOX_LOAD_TARGETS=chart SHELLBOX_LOAD_AGENTS=200 SHELLBOX_LOAD_DURATION=5m flock -x /tmp/shellbox-cluster.lock go test -run 'TestLoad$' -timeout 40m -v ./test/faults
func TestLoad(t *testing.T) {
	agents := envInt(t, envLoadAgents, 20)
	duration := envDuration(t, envLoadDuration, 30*time.Second)
	for _, tg := range loadTargetList(t) {
		t.Run(tg.name, func(t *testing.T) {
			if tg.e.Name == chartSoak.Name {
				loadChart(t, agents, duration)
				return
			}
			load(t, tg, agents, duration)
		})
	}
}

func load(t *testing.T, tg soakTarget, agents int, duration time.Duration) {
	s := newServed(t, tg.e, tg.runtime, "")
	tag := "load-" + tg.name[:1] + "-" + tg.runtime + "-"
	s.tenantSetting(t, "maxConcurrentCalls: "+strconv.Itoa(2*agents))
	s.tenantSetting(t, "ratePerSecond: 100000")
	s.tenantSetting(t, "burst: 100000")
	s.policyLine(t, fmt.Sprintf("limits:\n  sessions: %d\n", 2*agents))
	// Every first call at once: room in the creation queue for all, and
	// a wait as long as the run.
	s.sandboxSetting(t, fmt.Sprintf("createQueue: %d", agents+16))
	s.sandboxSetting(t, "createQueueWait: "+firstCallBound.String())
	p := s.start(t)
	pid := p.cmd.Process.Pid
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: agents + 4}}
	c := client.New(p.url, token, hc)
	host := soakHost(t, s, tag)

	st := newLatencies()
	var ramp rampUp
	cpu0, child0 := cpuTicks(t, pid)
	busy0, total0 := hostCPU(t)
	t.Logf("load %s: %d agents for %s; load average %.1f", tg.name, agents, duration, load1())
	begin := time.Now()
	end := begin.Add(duration)
	var wg sync.WaitGroup
	for w := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(w) * loadArrival)
			session := fmt.Sprintf("%s%d", tag, w)
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(begin.UnixNano())))
			for i := 0; time.Now().Before(end) || i == 0; i++ {
				work, n := rnd.IntN(201), 1+rnd.IntN(1000)
				args, want := workCall(work, n)
				// A first call waits its turn at the host's creation
				// admission: 200 at once at 4 at a time, 1.7 a second
				// at load 130, took up to 1m29s.
				bound := hung
				if i == 0 {
					bound = firstCallBound
				}
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				start := time.Now()
				r, err := c.Call(ctx, session, tools.ToolBash, json.RawMessage(args))
				took := time.Since(start)
				cancel()
				failure := ""
				switch {
				case err != nil:
					failure = fmt.Sprintf("%s call %d: %s: %v", session, i, took.Round(time.Millisecond), err)
				case r.IsError || r.Text != want:
					text := r.Text
					if len(text) > 300 {
						text = text[:150] + " … " + text[len(text)-150:]
					}
					failure = fmt.Sprintf("%s call %d (seq 1 %d): %s: %q", session, i, n, took.Round(time.Millisecond), text)
				}
				kind := ramp.kind(i, start, agents)
				st.add(kind, took, failure)
				if i > 0 && failure == "" {
					st.beyond("call beyond its work", took-time.Duration(work)*time.Millisecond)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), hung)
			defer cancel()
			start := time.Now()
			err := c.DeleteSession(ctx, session)
			failure := ""
			if err != nil {
				failure = fmt.Sprintf("deleting %s: %v", session, err)
			}
			st.add("delete session", time.Since(start), failure)
		}()
	}
	// The load average and the server's RSS every 10 s, for the log.
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	tick := time.NewTicker(soakEvery)
	maxLoad, maxRSS := load1(), int64(0)
loop:
	for {
		select {
		case <-tick.C:
			l := load1()
			maxLoad = max(maxLoad, l)
			maxRSS = max(maxRSS, procRSS(pid))
			st.mu.Lock()
			calls := st.calls
			st.mu.Unlock()
			t.Logf("load %s: t=%s calls=%d sandboxes=%d rss=%dMiB load=%.1f", tg.name, time.Since(begin).Round(time.Second), calls, len(s.sandboxes(t)), procRSS(pid)>>20, l)
		case <-workersDone:
			break loop
		}
	}
	tick.Stop()
	elapsed := time.Since(begin)
	cpu1, child1 := cpuTicks(t, pid)
	busy1, total1 := hostCPU(t)
	hc.CloseIdleConnections()

	// A DELETE is done when it answered; containerd's shims exit a moment
	// after: up to 30 s of looks.
	var sandboxes, tasks, shims, loops int
	var mounts []string
	var files []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		sandboxes = len(s.sandboxes(t))
		tasks, shims = host()
		ms, err := mountinfo.Under(s.stateDir)
		if err != nil {
			t.Fatal(err)
		}
		mounts, loops, files = ms, loopsUnder(s.stateDir), namedUnder(s.stateDir, tag)
		if sandboxes+tasks+shims+len(mounts)+loops+len(files) == 0 || time.Now().After(deadline) {
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
	if sandboxes+tasks+shims+len(mounts)+loops+len(files) > 0 {
		t.Errorf("after the last session: %d sandboxes, %d tasks, %d shims, %d mounts, %d loop devices, files of sessions %q (want none)",
			sandboxes, tasks, shims, len(mounts), loops, files)
	}
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("the server died: %v", err)
	default:
	}
	if strings.Contains(p.log(), "panic") {
		t.Errorf("the server's log has a panic")
	}
	rampTook := "never"
	if _, allUp := ramp.state(); !allUp.IsZero() {
		rampTook = allUp.Sub(begin).Round(100 * time.Millisecond).String()
	}
	hostBusy := float64(busy1-busy0) / float64(max(1, total1-total0)) * float64(runtimeCPUs())
	t.Logf("load figures %s: %d agents, %s (%s with the deletes), %d calls (%.0f/s), %d failed; all sandboxes up after %s; server CPU %.2f ms per call (%.1f s; its reaped children %.1f s), RSS at most %d MiB; host CPU busy %.2f of %d cores (%.1f ms per call); load average at most %.1f, %.1f at the end; latencies: %s",
		tg.name, agents, duration, elapsed.Round(time.Second), calls, float64(calls)/elapsed.Seconds(), failures, rampTook,
		float64(cpu1-cpu0)*10/float64(calls), float64(cpu1-cpu0)/100, float64(child1-child0)/100, maxRSS>>20,
		hostBusy, runtimeCPUs(), float64(busy1-busy0)*10/float64(calls), maxLoad, load1(), st)
}

// runtimeCPUs is the host's count of CPUs as /proc/stat lists them.
func runtimeCPUs() int {
	b, _ := os.ReadFile("/proc/stat")
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "cpu") && !strings.HasPrefix(l, "cpu ") {
			n++
		}
	}
	return max(n, 1)
}

// namedUnder lists what under dir is named with prefix (sessions' host
// directories, workspace images, spills), at most 20.
func namedUnder(dir, prefix string) []string {
	var found []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), prefix) && len(found) < 20 {
			found = append(found, strings.TrimPrefix(path, dir))
		}
		return nil
	})
	return found
}

// rampUp tells a load's calls apart by when they ran: an agent's first
// call (which makes its sandbox), a call while sandboxes were still being
// made, and one once every agent's sandbox was up.
type rampUp struct {
	mu    sync.Mutex
	up    int       // sandboxes made
	allUp time.Time // when the last was
}

// kind is the kind of an agent's call i begun at start, of agents in all.
func (r *rampUp) kind(i int, start time.Time, agents int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case i == 0:
		if r.up++; r.up == agents {
			r.allUp = time.Now()
		}
		return "first call (makes the sandbox)"
	case !r.allUp.IsZero() && start.After(r.allUp):
		return "call, all sandboxes up"
	}
	return "call while sandboxes were made"
}

// state is the sandboxes made so far and when the last was (zero until
// all were).
func (r *rampUp) state() (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up, r.allUp
}
