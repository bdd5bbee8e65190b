package faults_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/services/tasks/v1"

	"github.com/shellbox/shellbox/internal/mountinfo"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/sandbox/hostdir"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// The soak's knobs: SHELLBOX_SOAK_DURATION (a Go duration; default 3m,
// which CI runs), SHELLBOX_SOAK_TARGETS (the engines and runtimes it runs
// on at once, comma-separated; default docker/runc and containerd/runc,
// soakTargets) and
// SHELLBOX_SOAK_SESSIONS (per target; default 20 shared among the
// targets, at most kubeSoakSessions on the cluster).
const (
	envSoakDuration = "SHELLBOX_SOAK_DURATION"
	envSoakSessions = "SHELLBOX_SOAK_SESSIONS"
	envSoakTargets  = "SHELLBOX_SOAK_TARGETS"
)

// soakTarget is an engine and runtime the soak runs a server on.
type soakTarget struct {
	name    string // docker/runc, containerd/runc, containerd/runsc, kube/runc, kube/runsc
	e       enginetest.Engine
	runtime string
}

// soakTargets are the targets the soak can run on, each a server of its
// own, all at once, their sessions shared among them. By default (CI's 3
// minutes) the first two, 10 sessions each; containerd/runsc only when
// SHELLBOX_SOAK_TARGETS names it: its 10-minute run at load 60-77 had
// gVisor's shim stop answering task status and load requests
// (docs/reliability.md). The cluster's (kube/runc, kube/runsc: session
// pods of SHELLBOX_KUBECONFIG's cluster, kubeSoakEngine) only when named
// too: CI's time has no room for its pod starts; and so the chart's
// (chart: the Helm release with 2 server replicas, soakChart).
var soakTargets = []soakTarget{
	{"docker/runc", enginetest.Docker, sandbox.RuntimeRunc},
	{"containerd/runc", enginetest.Containerd, sandbox.RuntimeRunc},
	{"containerd/runsc", enginetest.Containerd, sandbox.RuntimeRunsc},
	{"kube/runc", kubeSoak, sandbox.RuntimeRunc},
	{"kube/runsc", kubeSoak, sandbox.RuntimeRunsc},
	{"chart", chartSoak, sandbox.RuntimeRunc},
}

// soakDefault is how many of soakTargets run without SHELLBOX_SOAK_TARGETS.
const soakDefault = 2

// soakEvery is how often the soak samples the server and the host.
const soakEvery = 10 * time.Second

// soakChurn is how many calls a session of the soak makes before it is
// deleted and its worker goes on in a new one: on the 2-core CI machine
// a new sandbox takes 2-10 s, and every 12 calls made the workers ask for
// more than the host's creation admission lets through.
const soakChurn = 36

// rssSlack is what the server's RSS may grow beyond 10% of its first
// half's largest before the soak calls it growth: the Go heap's target
// moves with each collection's live heap (measured: 66 MiB at 20 s, 77
// MiB at the end of a 30 s run that left nothing behind).
const rssSlack = 16 << 20

// soakSample is one look at the server and the host during the soak.
type soakSample struct {
	at         time.Duration
	engine     string
	rss        int64 // the server's resident memory, bytes
	heap       int64 // its Go heap in use, bytes
	goroutines int
	fds        int
	sandboxes  int        // the owner's sandboxes on the engine
	kube       kubeCounts // kube: the objects in the target's namespace
	tasks      int        // containerd: tasks of the soak's containers in the namespace
	shims      int        // containerd: shim processes of the soak's containers
	mounts     int        // mounts under the state directory
	loops      int        // loop devices bound to an image under the state directory
	files      int        // files and directories of sessions under the state directory
	spill      int64      // bytes of spilled outputs under the state directory
	calls      int
}

func (s soakSample) String() string {
	engine := ""
	if s.engine == enginetest.Containerd.Name {
		engine = fmt.Sprintf(" tasks=%d shims=%d", s.tasks, s.shims)
	}
	if s.engine == kubeSoak.Name {
		engine = fmt.Sprintf(" pods=%d secrets=%d other=%d events=%d", s.kube.pods, s.kube.secrets, s.kube.other, s.kube.events)
	}
	return fmt.Sprintf("t=%s rss=%dMiB heap=%dMiB goroutines=%d fds=%d sandboxes=%d%s mounts=%d loops=%d files=%d spill=%dKiB calls=%d",
		s.at.Round(time.Second), s.rss>>20, s.heap>>20, s.goroutines, s.fds, s.sandboxes, engine, s.mounts, s.loops, s.files, s.spill>>10, s.calls)
}

// soakStats are the workers' outcomes, shared.
type soakStats struct {
	mu        sync.Mutex
	calls     int
	failures  int
	first     []string // the first failures, bounded
	refusals  int      // answers of the server's backpressure (refusal)
	refused   []string // the first of them, bounded
	latencies map[string][]time.Duration
}

// refusal tells the server's backpressure, a clear answer of a busy
// server rather than a failure: a tenant's calls over its limit (429),
// or its request rate, sandbox creations over the host's (sandbox
// admission: its queue full, or waited out).
func refusal(failure string) bool {
	return strings.Contains(failure, "(429 concurrency_limited)") || strings.Contains(failure, "(429 rate_limited)") ||
		strings.Contains(failure, "too many sandboxes being created")
}

const (
	maxFailuresKept = 20
	maxLatencies    = 1 << 20
)

func (st *soakStats) done(kind string, took time.Duration, failure string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.calls++
	if l := st.latencies[kind]; len(l) < maxLatencies {
		st.latencies[kind] = append(l, took)
	}
	switch {
	case failure == "":
	case refusal(failure):
		st.refusals++
		if len(st.refused) < maxFailuresKept {
			st.refused = append(st.refused, failure)
		}
	default:
		st.failures++
		if len(st.first) < maxFailuresKept {
			st.first = append(st.first, failure)
		}
	}
}

// TestSoak: on each target (soakTargets: Docker runc and containerd
// runc; containerd gVisor when asked), all at once, SHELLBOX_SOAK_SESSIONS sessions of one
// `shellbox serve` of its own call for SHELLBOX_SOAK_DURATION (3m)
// without pause, each a mix: foreground commands checked for their
// output, background tasks read with bash_output to their end and exit
// code, tasks killed, calls ended by their timeout, outputs beyond the
// tail bound (spilled), workspace files; every 36th call ends the session
// (DELETE) and the worker goes on in a new one. Every 10 s it samples the
// server (RSS, Go heap, goroutines, open fds) and the host (the owner's
// sandboxes; on containerd the tasks and shims of the soak's containers
// in the namespace; on the cluster the pods, Secrets, other objects and
// Events of the target's namespace, kubeHost; mounts, loop devices, files
// and spill bytes of sessions under the state directory).
//
// Pass: every call answered as its kind must be (a provoked timeout or
// kill is its kind's answer; the server's backpressure, 429 over the
// tenant's limit or a sandbox creation refused by the host's admission,
// is a clear answer, counted and logged, and its worker waits a second;
// anything else, a transport error above all, fails); after the last
// session is deleted, no sandbox of the owner, no task or shim, no pod or
// Secret (and other objects as at the start) in the cluster's namespace, no mount,
// loop device, file or spilled byte of a session under the state
// directory, the server's open fds back at their start (+5), its
// goroutines back at their start (+10%, +10) and its RSS within 10% (+16
// MiB) of its largest in the first half of the run. Times are logged
// (p50/p99 per kind), never asserted.
func TestSoak(t *testing.T) {
	duration := 3 * time.Minute
	if v := os.Getenv(envSoakDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSoakDuration, v, err)
		}
		duration = d
	}
	targets := soakTargets[:soakDefault]
	if v := os.Getenv(envSoakTargets); v != "" {
		targets = nil
		for _, name := range strings.Split(v, ",") {
			i := slices.IndexFunc(soakTargets, func(tg soakTarget) bool { return tg.name == strings.TrimSpace(name) })
			if i < 0 {
				t.Fatalf("%s=%q: no target %q (have docker/runc, containerd/runc, containerd/runsc, kube/runc, kube/runsc, chart)", envSoakTargets, v, name)
			}
			targets = append(targets, soakTargets[i])
		}
	}
	// 20 sessions shared among the targets, unless set per target.
	per := make([]int, len(targets))
	for i := range per {
		per[i] = 20 / len(targets)
		if i < 20%len(targets) {
			per[i]++
		}
	}
	if v := os.Getenv(envSoakSessions); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a count", envSoakSessions, v)
		}
		for i := range per {
			per[i] = n
		}
	} else {
		for i, tg := range targets {
			if tg.e.Name == kubeSoak.Name || tg.e.Name == chartSoak.Name {
				per[i] = min(per[i], kubeSoakSessions)
			}
		}
	}
	for i, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			soak(t, tg, duration, per[i])
		})
	}
}

// soak is TestSoak on one target.
func soak(t *testing.T, tg soakTarget, duration time.Duration, sessions int) {
	if tg.e.Name == chartSoak.Name {
		soakChart(t, duration, sessions)
		return
	}
	var kubeHosted func() kubeCounts
	ns := ""
	if tg.e.Name == kubeSoak.Name {
		var c *kubetest.Cluster
		tg.e, c, ns = kubeSoakEngine(t, tg)
		kubeHosted = kubeHost(t, c, ns)
		t.Logf("soak %s: namespace %s", tg.name, ns)
	}
	s := newServed(t, tg.e, tg.runtime, "")
	if ns != "" {
		kubeServed(t, s, ns)
	}
	// The target's sessions are named apart (soak-c-runsc-<worker>-<n>):
	// containerd's ids, a namespace the targets share, are made of them.
	tag := "soak-" + tg.name[:1] + "-" + tg.runtime + "-"
	// Each session has at most one call in flight; the tenant's default
	// limit (16) would refuse the rest with 429.
	limit := os.Getenv("SHELLBOX_SOAK_LIMIT")
	if limit == "" {
		limit = strconv.Itoa(2 * sessions)
	}
	s.tenantSetting(t, "maxConcurrentCalls: "+limit)
	// The default rate (50/s, burst 100) is below what 20 sessions
	// polling their tasks ask.
	s.tenantSetting(t, "ratePerSecond: 1000")
	s.tenantSetting(t, "burst: 1000")
	// A deleted session's sandbox may still be going while its worker's
	// next one starts: room beyond one session per worker (default 16).
	s.policyLine(t, fmt.Sprintf("limits:\n  sessions: %d\n", 2*sessions))
	p := s.start(t)
	pid := p.cmd.Process.Pid
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: sessions + 4}}
	c := client.New(p.url, token, hc)
	host := soakHost(t, s, tag)

	sample := func(at time.Duration, calls int) soakSample {
		smp := soakSample{at: at, calls: calls, rss: procRSS(pid), fds: procFDs(pid), engine: tg.e.Name}
		m := serverMetrics(t, p.url)
		smp.goroutines, smp.heap = int(m["go_goroutines"]), int64(m["go_memstats_heap_inuse_bytes"])
		smp.sandboxes = len(s.sandboxes(t))
		smp.tasks, smp.shims = host()
		if kubeHosted != nil {
			smp.kube = kubeHosted()
		}
		mounts, err := mountinfo.Under(s.stateDir)
		if err != nil {
			t.Fatal(err)
		}
		smp.mounts, smp.loops = len(mounts), loopsUnder(s.stateDir)
		smp.files, smp.spill = sessionUsage(s.stateDir)
		return smp
	}
	startSample := sample(0, 0)
	t.Logf("soak %s: %d sessions for %s; start: %s", tg.name, sessions, duration, startSample)

	st := &soakStats{latencies: map[string][]time.Duration{}}
	begin := time.Now()
	end := begin.Add(duration)
	var wg sync.WaitGroup
	last := make([]string, sessions)
	for w := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Started a moment apart: not every first sandbox at once.
			time.Sleep(time.Duration(w) * 500 * time.Millisecond)
			last[w] = soakWorker([]*client.Client{c}, fmt.Sprintf("%s%d-", tag, w), end, st, false)
		}()
	}

	var samples []soakSample
	var warm soakSample
	tick := time.NewTicker(soakEvery)
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
loop:
	for {
		select {
		case <-tick.C:
			st.mu.Lock()
			calls := st.calls
			st.mu.Unlock()
			smp := sample(time.Since(begin), calls)
			samples = append(samples, smp)
			// Warm-up: the first half of the run; its largest RSS.
			if smp.at <= duration/2 && smp.rss >= warm.rss {
				warm = smp
			}
			t.Logf("soak %s: %s", tg.name, smp)
		case <-workersDone:
			break loop
		}
	}
	tick.Stop()

	// The workers deleted every session but their last.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, n := range last {
		// A worker whose time ended right after it deleted a session made
		// no call in the next one: nothing to delete (404).
		if err := c.DeleteSession(ctx, n); err != nil && !strings.Contains(err.Error(), "no_such_session") {
			t.Errorf("deleting session %s: %v", n, err)
		}
	}
	hc.CloseIdleConnections()

	// The end: resources back at their start. Goroutines and fds settle
	// (closed connections' goroutines end a moment later), and so do
	// containerd's shims (a task's shim exits a moment after its
	// deletion), and so do a pod's Secret (the garbage collector's, after
	// its owner) and a terminating pod: the last of up to 30 s (the
	// cluster: 2 min) of looks.
	settle := 30 * time.Second
	if kubeHosted != nil {
		settle = 2 * time.Minute
	}
	var final soakSample
	for deadline := time.Now().Add(settle); ; time.Sleep(time.Second) {
		final = sample(time.Since(begin), st.calls)
		settled := final.fds <= startSample.fds+5 && final.goroutines <= startSample.goroutines*11/10+10 &&
			final.sandboxes == 0 && final.tasks == 0 && final.shims == 0 &&
			final.kube.pods == 0 && final.kube.secrets == 0 && final.kube.other == startSample.kube.other
		if settled || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("soak %s: end (all sessions deleted): %s", tg.name, final)

	if st.calls == 0 {
		t.Fatal("the soak made no call")
	}
	if st.failures > 0 {
		t.Errorf("%d of %d calls failed; the first:\n%s", st.failures, st.calls, strings.Join(st.first, "\n"))
	}
	if st.refusals > 0 {
		t.Logf("%d of %d calls refused by the server's backpressure (not failures); the first:\n%s", st.refusals, st.calls, strings.Join(st.refused, "\n"))
	}
	if final.sandboxes != 0 || final.tasks != 0 || final.shims != 0 || final.mounts != 0 || final.loops != 0 || final.spill != 0 {
		t.Errorf("after the last session: %d sandboxes, %d tasks, %d shims, %d mounts, %d loop devices, %d spilled bytes left (want none)",
			final.sandboxes, final.tasks, final.shims, final.mounts, final.loops, final.spill)
		// What the server said of the sessions left, for the diagnosis.
		for i, sb := range s.sandboxes(t) {
			if i == 3 {
				break
			}
			var lines []string
			audit, _ := os.ReadFile(s.audit)
			for _, l := range strings.Split(p.log()+"\n"+string(audit), "\n") {
				if strings.Contains(l, `"`+sb.Session+`"`) && len(lines) < 20 {
					lines = append(lines, l)
				}
			}
			t.Logf("left: sandbox %s of session %s (%s, created %s); the server's log and audit lines of it:\n%s", sb.ID, sb.Session, sb.State, sb.Created, strings.Join(lines, "\n"))
		}
	}
	if k := final.kube; k.pods != 0 || k.secrets != 0 || k.other != startSample.kube.other {
		t.Errorf("after the last session, in the namespace: %d pods, %d Secrets, %d other objects (at the start %d; want no pod or Secret)",
			k.pods, k.secrets, k.other, startSample.kube.other)
	}
	if left := sessionFiles(t, s.stateDir); len(left) > 0 {
		t.Errorf("after the last session, files of sessions under the state directory: %v", left)
	}
	if final.fds > startSample.fds+5 {
		t.Errorf("the server's open fds: %d at the start, %d at the end", startSample.fds, final.fds)
	}
	if final.goroutines > startSample.goroutines*11/10+10 {
		t.Errorf("the server's goroutines: %d at the start, %d at the end", startSample.goroutines, final.goroutines)
	}
	if warm.rss > 0 && final.rss > warm.rss*11/10+rssSlack {
		t.Errorf("the server's RSS: %d MiB at most in the run's first half, %d MiB at the end", warm.rss>>20, final.rss>>20)
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

	t.Logf("soak figures %s: %d sessions at a time, %s, %d calls, %d failed, %d refused (backpressure), %d sessions deleted; start %s; warm %s; end %s; latencies: %s",
		tg.name, sessions, duration, st.calls, st.failures, st.refusals, len(st.latencies["delete session"])+len(last), startSample, warm, final, soakLatencies(st))
}

// soakLatencies are st's p50, p99 and maximum of each kind of call.
func soakLatencies(st *soakStats) string {
	var kinds []string
	for k := range st.latencies {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var lat []string
	for _, k := range kinds {
		l := st.latencies[k]
		slices.Sort(l)
		lat = append(lat, fmt.Sprintf("%s n=%d p50=%s p99=%s max=%s", k, len(l),
			l[len(l)/2].Round(time.Millisecond), l[len(l)*99/100].Round(time.Millisecond), l[len(l)-1].Round(time.Millisecond)))
	}
	return strings.Join(lat, "; ")
}

// soakWorker calls in its own sessions (prefix and a count) until end, a
// mix of kinds in turn, each call through the next of cs (replicas, as
// behind a Service); every soakChurn-th call deletes its session and it
// goes on in a new one. With replicas (the chart target) three of a
// session's 36 calls are replaced by what needs the release: a call the
// policy asks about (uname), held by one replica and approved through
// the other (chartAsk); a file put through one and read back through the
// other (chartFiles); the session suspended through one and resumed by
// its next call through the other, its workspace file read back
// (chartSuspend). It returns the session it used last, not deleted.
func soakWorker(cs []*client.Client, prefix string, end time.Time, st *soakStats, replicas bool) string {
	gen := 0
	session := fmt.Sprintf("%s%d", prefix, gen)
	n := 0
	next := func() *client.Client {
		n++
		return cs[n%len(cs)]
	}
	call := func(tool, args string) (tools.Result, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), hung)
		defer cancel()
		start := time.Now()
		r, err := next().Call(ctx, session, tool, json.RawMessage(args))
		return r, time.Since(start), err
	}
	bash := func(command string, extra string) (tools.Result, time.Duration, error) {
		return call(tools.ToolBash, fmt.Sprintf(`{"command":%q,"description":"soak"%s}`, command, extra))
	}
	check := func(kind string, took time.Duration, err error, r tools.Result, ok bool) {
		failure := ""
		switch {
		case err != nil:
			failure = fmt.Sprintf("%s in %s: %s: %v", kind, session, took.Round(time.Millisecond), err)
		case !ok:
			text := r.Text
			if len(text) > 300 {
				text = text[:150] + " … " + text[len(text)-150:]
			}
			failure = fmt.Sprintf("%s in %s: %s: %q", kind, session, took.Round(time.Millisecond), text)
		}
		st.done(kind, took, failure)
		if refusal(failure) {
			time.Sleep(time.Second) // the server's Retry-After
		}
	}
	for op := 0; time.Now().Before(end); op++ {
		if replicas && chartOp(op, session, next(), next(), check) {
			// done: one of the release's kinds
		} else {
			soakOp(op, bash, call, check)
		}
		if op%soakChurn == soakChurn-1 {
			ctx, cancel := context.WithTimeout(context.Background(), hung)
			start := time.Now()
			err := next().DeleteSession(ctx, session)
			cancel()
			check("delete session", time.Since(start), err, tools.Result{}, err == nil)
			gen++
			session = fmt.Sprintf("%s%d", prefix, gen)
		}
	}
	return session
}

// soakCheck counts a call of kind: failed unless err is nil and ok.
type soakCheck func(kind string, took time.Duration, err error, r tools.Result, ok bool)

// soakOp makes the op-th call of a session's mix (op%6 its kind).
func soakOp(op int, bash func(command, extra string) (tools.Result, time.Duration, error),
	call func(tool, args string) (tools.Result, time.Duration, error), check soakCheck) {
	switch op % 6 {
	case 0: // foreground, its output checked
		r, took, err := bash(fmt.Sprintf("echo $((%d * 2)); head -c 1000 /dev/urandom | wc -c", op), "")
		kind := "foreground"
		if op%soakChurn == 0 {
			kind = "first call (makes the sandbox)"
		}
		check(kind, took, err, r, !r.IsError && r.Text == fmt.Sprintf("%d\n1000", op*2))
	case 1: // a background task read to its end
		r, took, err := bash("for i in 1 2 3 4 5; do echo bg $i; sleep 0.2; done; exit 7", `,"run_in_background":true`)
		bg, isBg := r.Value.(*tools.Background)
		check("background start", took, err, r, !r.IsError && isBg)
		if !isBg {
			return
		}
		var out strings.Builder
		for deadline := time.Now().Add(hung); ; time.Sleep(300 * time.Millisecond) {
			r, took, err := call(tools.ToolBashOutput, fmt.Sprintf(`{"task_id":%q}`, bg.TaskID))
			check("bash_output", took, err, r, err == nil && !r.IsError)
			if err != nil && refusal(err.Error()) && time.Now().Before(deadline) {
				continue
			}
			if err != nil || r.IsError {
				break
			}
			out.WriteString(r.Text + "\n")
			if strings.Contains(r.Text, "status: completed") || time.Now().After(deadline) {
				break
			}
		}
		o := out.String()
		whole := strings.Contains(o, "status: completed, exit code: 7")
		for i := 1; i <= 5; i++ {
			whole = whole && strings.Contains(o, fmt.Sprintf("bg %d\n", i))
		}
		check("background whole", 0, nil, tools.Result{Text: o}, whole)
	case 2: // a task killed
		r, took, err := bash("echo up; sleep 300", `,"run_in_background":true`)
		bg, isBg := r.Value.(*tools.Background)
		check("background start", took, err, r, !r.IsError && isBg)
		if !isBg {
			return
		}
		r, took, err = call(tools.ToolBashKill, fmt.Sprintf(`{"task_id":%q}`, bg.TaskID))
		check("bash_kill", took, err, r, !r.IsError && strings.HasPrefix(r.Text, "killed background task"))
		r, took, err = call(tools.ToolBashOutput, fmt.Sprintf(`{"task_id":%q}`, bg.TaskID))
		check("bash_output", took, err, r, !r.IsError && strings.HasSuffix(r.Text, "status: killed"))
	case 3: // a call ended by its timeout
		// (On a loaded host the 500 ms may end before the echo ran.)
		r, took, err := bash("echo before; sleep 30", `,"timeoutMs":500`)
		check("timeout", took, err, r, strings.Contains(r.Text, "[timed out after 500ms]"))
	case 4: // an output beyond the tail bound (spilled)
		r, took, err := bash("seq 1 300000", "")
		check("large output", took, err, r, !r.IsError && strings.Contains(r.Text, "\n300000\n[output truncated; full output: "))
	case 5: // a file of the workspace
		r, took, err := bash(fmt.Sprintf("echo %d > /workspace/f && cat /workspace/f", op), "")
		check("file", took, err, r, !r.IsError && r.Text == strconv.Itoa(op))
	}
}

// serverMetrics reads the server's /metrics: each unlabelled sample.
func serverMetrics(t *testing.T, url string) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			m[name] = v
		}
	}
	return m
}

// procRSS is a process's resident memory in bytes (0 if unreadable).
func procRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// procFDs is a process's count of open fds.
func procFDs(pid int) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es)
}

// loopsUnder counts the loop devices whose backing file is under dir.
func loopsUnder(dir string) int {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			n++
		}
	}
	return n
}

// sessionUsage counts the files and directories of sessions under dir
// (named after a soak session: host directories, workspace images, spill
// directories) and the bytes of the files in spill directories.
func sessionUsage(dir string) (files int, spill int64) {
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile
		}
		if strings.Contains(d.Name(), "soak-") {
			files++
		}
		if d.Type().IsRegular() && strings.Contains(path, "/"+hostdir.SpillName+"/") {
			if info, err := d.Info(); err == nil {
				spill += info.Size()
			}
		}
		return nil
	})
	return files, spill
}

// soakHost returns the count of the host's tasks and shims of the soak's
// containers on s's engine (containerd: their ids begin with
// ContainerID's tenant and prefix; Docker: none counted, its sandboxes
// are its containers).
func soakHost(t *testing.T, s *served, prefix string) func() (tasks, shims int) {
	t.Helper()
	if s.e.Name != enginetest.Containerd.Name {
		return func() (int, int) { return 0, 0 }
	}
	id := containerd.ContainerID(s.tenant, prefix)
	id = id[:strings.LastIndex(id, "-")+1] // the hash of this pair goes
	c, ctx := containerdtest.Client(t, containerdtest.Address(t))
	return func() (tasks, shims int) {
		lctx, cancel := context.WithTimeout(ctx, hung)
		defer cancel()
		resp, err := c.TaskService().List(lctx, &taskapi.ListTasksRequest{})
		if err != nil {
			t.Fatalf("listing containerd's tasks: %v", err)
		}
		for _, task := range resp.Tasks {
			if strings.HasPrefix(task.ID, id) {
				tasks++
			}
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range procs {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			args := strings.Split(string(b), "\x00")
			if !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
				continue
			}
			for i, a := range args[:len(args)-1] {
				if a == "-id" && strings.HasPrefix(args[i+1], id) {
					shims++
				}
			}
		}
		return tasks, shims
	}
}

// policyLine adds text to s's tenant's policy file.
func (s *served) policyLine(t *testing.T, text string) {
	t.Helper()
	f, err := os.OpenFile(s.policy, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// sessionFiles lists what under the state directory is named after a
// soak session (host directories, workspace images, spills).
func sessionFiles(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), "soak-") && len(left) < 20 {
			left = append(left, strings.TrimPrefix(path, dir))
		}
		return nil
	})
	return left
}

// tenantSetting adds a line to the settings of s's tenant in its config
// (the tenant's block ends the file).
func (s *served) tenantSetting(t *testing.T, line string) {
	t.Helper()
	f, err := os.OpenFile(s.cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("      " + line + "\n"); err != nil {
		t.Fatal(err)
	}
}
