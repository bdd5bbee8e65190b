package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// EnvClusterFaults runs TestReplicaFaults: it breaks what other tests of
// the cluster share (a replica's memory, a process stopped, the node's
// netfilter), and takes minutes, so it runs on demand, not in CI.
const EnvClusterFaults = "SHELLBOX_CLUSTER_FAULTS"

// faultPolicy is the session tenant of the fault cases: small runc pods,
// uname asked.
const faultPolicy = `version: 1
description: the replica fault cases' sessions
default: allow
askTimeout: 5m
sandbox:
  runtime: runc
  cpus: 0.2
  memory: 128MiB
  disk: 16MiB
  tmp: 16MiB
limits:
  sessions: 16
  spillBytes: 16MiB
rules:
  - name: ask-uname
    decision: ask
    reason: uname needs a human
    match:
      command: [uname]
`

// idlePolicy's sessions are idle after 10 s: the leader reaps them.
const idlePolicy = `version: 1
description: sessions the leader reaps
default: allow
sandbox:
  runtime: runc
  cpus: 0.2
  memory: 128MiB
  disk: 16MiB
  tmp: 16MiB
limits:
  sessions: 8
  spillBytes: 16MiB
  idleTTL: 10s
`

// poolSize is the warm pool the leader keeps (bench_pool_test.go's
// poolPolicy).
const poolSize = 2

// TestReplicaFaults breaks one of two server replicas of a release, on
// the node itself (this host), and holds the release to issue 26's
// promise: calls during the fault end in a clear error or succeed, calls
// after it succeed, and nothing is lost (files, background tasks and their
// output, audit lines, pending approvals; one pod per session). Each case
// logs what the calls saw and its recovery times ("fault ..." lines:
// docs/reliability.md has them):
//
//   - oom: a replica OOM-killed (its container's memory cgroup limit
//     lowered to its usage while calls load it) mid-call, with a
//     background task of a session it started; the kubelet restarts it.
//   - lease-holder-stopped: the leader's server process SIGSTOPped; the
//     other replica takes the Lease, reaps an idle session and refills
//     the warm pool after a claim; SIGCONT, and the old leader acts as one
//     no more.
//   - network-cut: the node's netfilter drops a replica's packets to and
//     from a session pod for 30 s (raw PREROUTING, both ways); the rules
//     are removed by the test (and by its cleanup on failure).
func TestReplicaFaults(t *testing.T) {
	if os.Getenv(EnvClusterFaults) != "1" {
		t.Skipf("the replica faults break a replica, the Lease holder and the node's netfilter: they run on demand, as root on the cluster's node: %s=1 go test ./deploy/helm/e2e/ -run TestReplicaFaults -v -timeout 20m", EnvClusterFaults)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s=1: the faults need root on the cluster's node (cgroups, signals, iptables)", EnvClusterFaults)
	}
	c := kubetest.Connect(t)
	r := Install(t, c, Options{
		Tenants: []Tenant{{Name: "flt", Policy: faultPolicy}, {Name: "idle", Policy: idlePolicy}, {Name: "pool", Policy: poolPolicy(poolSize)}},
		Values: map[string]any{
			"replicaCount": 2,
			"service":      map[string]any{"sessionAffinity": "None"},
			// Reap every 2 s (a quarter of it): the policies set the TTLs.
			"config": map[string]any{"server": map[string]any{"idleTTL": "8s"}},
		},
	})
	t.Run("oom", func(t *testing.T) { faultOOM(t, c, r) })
	t.Run("lease-holder-stopped", func(t *testing.T) { faultLeaderStopped(t, c, r) })
	t.Run("network-cut", func(t *testing.T) { faultNetworkCut(t, c, r) })
}

// faultEnv is what every case uses: the replicas by pod IP, the release's
// tenants' clients on each.
type faultEnv struct {
	t    *testing.T
	c    *kubetest.Cluster
	r    *Release
	pods []corev1.Pod
	hc   *http.Client
}

func newFaultEnv(t *testing.T, c *kubetest.Cluster, r *Release) *faultEnv {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &faultEnv{t: t, c: c, r: r, pods: r.readyServerPods(t, 2), hc: &http.Client{Transport: tr}}
}

func (e *faultEnv) client(replica int, tenant string) *client.Client {
	return client.New(podURL(e.pods[replica]), e.r.Tokens[tenant], e.hc)
}

// call runs command in session and fails t unless it succeeds.
func (e *faultEnv) call(cl *client.Client, session, command string, background bool) tools.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cl.Call(ctx, session, tools.ToolBash, bashArgs(command, background))
	if err != nil || res.IsError {
		e.t.Fatalf("%q: %v %s", command, err, res.Text)
	}
	return res
}

// task is a background task being read to its end, through whichever
// replica each read goes.
type task struct {
	session, id string
	out         strings.Builder
	last        executor.Output
	lost        int64
}

func (e *faultEnv) start(cl *client.Client, session string, ticks int) *task {
	e.t.Helper()
	script := fmt.Sprintf(`for i in $(seq 1 %d); do echo tick $i; sleep 0.25; done; echo done; exit 7`, ticks)
	res := e.call(cl, session, script, true)
	bg, ok := res.Value.(*tools.Background)
	if !ok {
		e.t.Fatalf("the background start's value: %#v", res.Value)
	}
	return &task{session: session, id: bg.TaskID}
}

// read reads what the task printed since the last read.
func (tk *task) read(ctx context.Context, cl *client.Client) error {
	args, _ := json.Marshal(map[string]string{"task_id": tk.id})
	res, err := cl.Call(ctx, tk.session, tools.ToolBashOutput, args)
	if err != nil {
		return err
	}
	if res.IsError {
		return errors.New(res.Text)
	}
	o := res.Value.(*tools.TaskOutput).Output
	tk.out.WriteString(o.Stdout)
	tk.lost += o.Lost
	tk.last = o
	return nil
}

// finish reads the task to its end through cl and checks its whole output
// and exit status.
func (e *faultEnv) finish(tk *task, cl *client.Client, ticks int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		if err := tk.read(ctx, cl); err != nil {
			e.t.Fatalf("reading task %s to its end: %v", tk.id, err)
		}
		if tk.last.Status.State != executor.Running {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	var want strings.Builder
	for i := 1; i <= ticks; i++ {
		fmt.Fprintf(&want, "tick %d\n", i)
	}
	want.WriteString("done\n")
	if tk.last.Status.State != executor.Completed || tk.last.Status.ExitCode != 7 {
		e.t.Errorf("task %s ended %+v, want completed with exit code 7", tk.id, tk.last.Status)
	}
	if tk.out.String() != want.String() || tk.lost != 0 {
		e.t.Errorf("task %s's output read across the fault (%d bytes lost):\n%q\nwant\n%q", tk.id, tk.lost, tk.out.String(), want.String())
	}
}

// podWatch samples a session's pod every 250 ms until stopped: every pod
// UID it had, and whether it ever had none.
type podWatch struct {
	mu     sync.Mutex
	uids   []string
	absent int
	stop   func()
}

func (e *faultEnv) watchPod(tenant, session string) *podWatch {
	w := &podWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w.stop = func() { cancel(); <-done }
	pods := e.c.CS.CoreV1().Pods(e.r.SessionsNamespace)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			p, err := pods.Get(ctx, kube.PodName(tenant, session), metav1.GetOptions{})
			w.mu.Lock()
			switch {
			case apierrors.IsNotFound(err):
				w.absent++
			case err == nil && !slices.Contains(w.uids, string(p.UID)):
				w.uids = append(w.uids, string(p.UID))
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	e.t.Cleanup(w.stop)
	return w
}

// check stops w and fails t if the session's pod was replaced or gone.
func (w *podWatch) check(t *testing.T, session string) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.uids) != 1 || w.absent > 0 {
		t.Errorf("session %s's pod through the fault: uids %v, absent in %d samples; want one pod all along", session, w.uids, w.absent)
	}
}

// containerProc is the host PID of the main process of pod p's container
// name (this host is the node), and its cgroup directory (memory
// controller's on cgroup v1).
func containerProc(p *corev1.Pod, name string) (pid int, cgroup string, err error) {
	var id string
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == name || (name == "" && id == "") {
			id = s.ContainerID
		}
	}
	_, id, ok := strings.Cut(id, "://")
	if !ok || id == "" {
		return 0, "", fmt.Errorf("pod %s: no container %q running", p.Name, name)
	}
	var dirs []string
	for _, root := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup"} {
		for _, pat := range []string{"kubepods*/pod*/" + id, "kubepods*/*/pod*/" + id} {
			m, _ := filepath.Glob(filepath.Join(root, pat))
			dirs = append(dirs, m...)
		}
		if len(dirs) > 0 {
			break
		}
	}
	if len(dirs) == 0 {
		return 0, "", fmt.Errorf("pod %s: no cgroup of container %s on this host (is it the node?)", p.Name, id)
	}
	b, err := os.ReadFile(filepath.Join(dirs[0], "cgroup.procs"))
	if err != nil {
		return 0, "", err
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	pid, err = strconv.Atoi(first)
	if err != nil {
		return 0, "", fmt.Errorf("pod %s: container %s's cgroup %s has no process (%q)", p.Name, id, dirs[0], b)
	}
	return pid, dirs[0], nil
}

// serverLog is what pod's server logged since since (its current
// container), lines holding any of words.
func (e *faultEnv) serverLog(pod string, since time.Time, words ...string) []string {
	limit := int64(4 << 20)
	st := metav1.NewTime(since)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := e.c.CS.CoreV1().Pods(e.r.Namespace).GetLogs(pod, &corev1.PodLogOptions{SinceTime: &st, LimitBytes: &limit}).DoRaw(ctx)
	if err != nil {
		e.t.Errorf("the log of %s: %v", pod, err)
		return nil
	}
	var out []string
	for l := range strings.Lines(string(b)) {
		if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(l, w) }) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// auditCommands are the commands of the audit log of the server process
// pid (its pod's emptyDir, through the process's root): it fails t on a
// line that is not whole JSON.
func auditCommands(t *testing.T, pid int) []string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/root/var/lib/shellbox/audit.log", pid))
	if err != nil {
		t.Errorf("the audit log: %v", err)
		return nil
	}
	defer f.Close()
	var cmds []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec struct {
			Session, Command string
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Errorf("a torn audit line: %q: %v", sc.Text(), err)
			continue
		}
		cmds = append(cmds, rec.Session+": "+rec.Command)
	}
	if err := sc.Err(); err != nil {
		t.Errorf("reading the audit log: %v", err)
	}
	return cmds
}

// outcome is what a call during a fault saw.
type outcome struct {
	start, took time.Duration // from the fault's start
	err         string        // "" if it succeeded
}

func (o outcome) String() string {
	if o.err == "" {
		return fmt.Sprintf("ok after %s (started %s in)", o.took.Round(10*time.Millisecond), o.start.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("error after %s (started %s in): %s", o.took.Round(10*time.Millisecond), o.start.Round(10*time.Millisecond), o.err)
}

// callOutcome runs command in session through cl and says how it went.
func callOutcome(cl *client.Client, session, command, want string, t0 time.Time, bound time.Duration) outcome {
	s := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	res, err := cl.Call(ctx, session, tools.ToolBash, bashArgs(command, false))
	o := outcome{start: s.Sub(t0), took: time.Since(s)}
	switch {
	case err != nil:
		o.err = err.Error()
	case res.IsError || res.Text != want:
		o.err = fmt.Sprintf("result %q (error %v), want %q", res.Text, res.IsError, want)
	}
	return o
}

// faultOOM: a replica (A, not the leader) OOM-killed with a call in
// flight and a background task it started; the kubelet restarts its
// container.
func faultOOM(t *testing.T, c *kubetest.Cluster, r *Release) {
	wall := time.Now()
	e := newFaultEnv(t, c, r)
	ctx := context.Background()
	a, b := e.followerFirst(ctx)
	ca, cb := e.client(a, "flt"), e.client(b, "flt")
	const s, ticks = "oom", 120 // 30 s of output
	e.call(ca, s, "echo before > /workspace/f", false)
	pw := e.watchPod("flt", s)
	tk := e.start(ca, s, ticks)
	if err := tk.read(ctx, ca); err != nil {
		t.Fatal(err)
	}

	// An ask held on each replica, pending through the fault.
	asks := make([]chan error, 2)
	for i, cl := range []*client.Client{ca, cb} {
		asks[i] = make(chan error, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			res, err := cl.Call(cctx, fmt.Sprintf("ask-%d", i), tools.ToolBash, bashArgs("uname -s", false))
			if err == nil && (res.IsError || res.Text != "Linux") {
				err = fmt.Errorf("result %q", res.Text)
			}
			asks[i] <- err
		}()
	}
	pending := e.waitPending(cb, "ask-0", "ask-1")

	pod := e.pods[a]
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	pid, cg, err := containerProc(&pod, "server")
	if err != nil {
		t.Fatal(err)
	}
	// The call in flight when the kill comes.
	type ended struct {
		err error
		at  time.Time
	}
	inflight := make(chan ended, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		_, err := ca.Call(cctx, s, tools.ToolBash, bashArgs("sleep 20; echo late", false))
		inflight <- ended{err, time.Now()}
	}()
	time.Sleep(time.Second)

	// The squeeze: the container's memory limit just above what it uses
	// (ratcheted down as the Go runtime gives memory back), and calls
	// through it until the kernel's OOM killer ends it.
	usage, limitFile := "memory.usage_in_bytes", "memory.limit_in_bytes"
	if _, err := os.Stat(filepath.Join(cg, usage)); err != nil {
		usage, limitFile = "memory.current", "memory.max" // cgroup v2
	}
	readUsage := func() int64 {
		b, _ := os.ReadFile(filepath.Join(cg, usage))
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	used := readUsage()
	var limit atomic.Int64
	limit.Store(used + 256<<10)
	if err := os.WriteFile(filepath.Join(cg, limitFile), []byte(strconv.FormatInt(limit.Load(), 10)), 0); err != nil {
		t.Fatalf("lower %s/%s to %d: %v", cg, limitFile, limit.Load(), err)
	}
	t0 := time.Now()
	t.Logf("%s (pid %d): memory limit %d (usage %d), loading it", pod.Name, pid, limit.Load(), used)
	killed := make(chan time.Time, 1)
	kctx, stopKilled := context.WithCancel(ctx)
	defer stopKilled()
	go func() {
		for kctx.Err() == nil {
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				killed <- time.Now()
				return
			}
			if u := readUsage(); u > 0 && u+256<<10 < limit.Load() {
				// EBUSY when the kernel cannot reclaim that much: tried
				// again later.
				if os.WriteFile(filepath.Join(cg, limitFile), []byte(strconv.FormatInt(u+256<<10, 10)), 0) == nil {
					limit.Store(u + 256<<10)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	stopLoad := make(chan struct{})
	var lwg sync.WaitGroup
	var loadErrs []string
	var lmu sync.Mutex
	for range 8 {
		lwg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := ca.Call(cctx, s, tools.ToolBash, bashArgs("head -c 3000000 /dev/zero | tr '\\0' x; echo", false))
				cancel()
				if err != nil {
					lmu.Lock()
					loadErrs = append(loadErrs, err.Error())
					lmu.Unlock()
					return
				}
			}
		})
	}
	var tk0 time.Time
	select {
	case tk0 = <-killed:
	case <-time.After(2 * time.Minute):
		close(stopLoad)
		t.Fatalf("%s not killed 2m after its memory limit went to %d", pod.Name, limit.Load())
	}
	close(stopLoad)
	t.Logf("%s's server (pid %d) gone %s after the squeeze", pod.Name, pid, tk0.Sub(t0).Round(time.Millisecond))

	// During: the other replica serves the session.
	var during []outcome
	for range 3 {
		o := callOutcome(cb, s, "cat /workspace/f", "before", tk0, time.Minute)
		during = append(during, o)
		if o.err != "" {
			t.Errorf("a call through %s while %s was down: %s", e.pods[b].Name, pod.Name, o)
		}
		if err := tk.read(ctx, cb); err != nil {
			t.Errorf("bash_output through %s while %s was down: %v", e.pods[b].Name, pod.Name, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	var in ended
	select {
	case in = <-inflight:
	case <-time.After(90 * time.Second):
		t.Fatalf("the call in flight on %s did not end 90s after the kill", pod.Name)
	}
	inErr, inTook := in.err, in.at.Sub(tk0)
	if inErr == nil {
		t.Errorf("the call in flight on the OOM-killed %s succeeded", pod.Name)
	}
	lwg.Wait()

	// The kubelet's verdict and restart.
	var reason string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		p, err := c.CS.CoreV1().Pods(r.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && len(p.Status.ContainerStatuses) > 0 {
			cs := p.Status.ContainerStatuses[0]
			if cs.RestartCount > restarts && cs.LastTerminationState.Terminated != nil {
				reason = cs.LastTerminationState.Terminated.Reason
				break
			}
		}
		if time.Now().After(deadline) {
			r.Diagnose(t)
			t.Fatalf("%s's container not restarted 2m after the kill", pod.Name)
		}
	}
	if reason != "OOMKilled" {
		t.Errorf("%s's container ended %q, want OOMKilled", pod.Name, reason)
	}
	// After: the restarted replica serves the session (same pod IP).
	var first outcome
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		first = callOutcome(ca, s, "cat /workspace/f", "before", tk0, 30*time.Second)
		if first.err == "" || time.Now().After(deadline) {
			break
		}
	}
	if first.err != "" {
		t.Fatalf("no call through %s succeeded 2m after its OOM kill: %s", pod.Name, first)
	}
	recovered := first.start + first.took
	e.call(ca, s, "echo after >> /workspace/f", false)
	e.finish(tk, ca, ticks)
	if got := e.call(cb, s, "cat /workspace/f", false).Text; got != "before\nafter" {
		t.Errorf("the workspace after: %q", got)
	}
	pw.check(t, s)

	// The asks: the one held by the survivor still pending, approved
	// through the restarted replica, and its call returns the result; the
	// one whose holder was killed: its caller saw an error (logged: what
	// became of its approval).
	if now := e.waitPending(ca, "ask-1"); now[0] != pending[1] {
		t.Errorf("ask-1: pending approval %s before the kill, %s after", pending[1], now[0])
	}
	if _, err := ca.Decide(ctx, pending[1], true, "e2e-approver", "fine"); err != nil {
		t.Errorf("approve ask-1 (%s) through the restarted %s: %v", pending[1], pod.Name, err)
	}
	select {
	case err := <-asks[1]:
		if err != nil {
			t.Errorf("the ask held by %s: %v", e.pods[b].Name, err)
		}
	case <-time.After(time.Minute):
		t.Errorf("the ask held by %s did not return 1m after its approval", e.pods[b].Name)
	}
	held := "its call: "
	select {
	case err := <-asks[0]:
		held += fmt.Sprint(err)
	case <-time.After(time.Minute):
		held += "still waiting 1m after the kill"
	}
	if ap, err := ca.Approval(ctx, pending[0]); err != nil {
		held += fmt.Sprintf("; its approval %s: %v", pending[0], err)
	} else {
		held += fmt.Sprintf("; its approval %s: %s", pending[0], ap.State)
	}

	// The audit lines of A's calls before the kill, in its pod's emptyDir,
	// read through the new server process.
	p, err := c.CS.CoreV1().Pods(r.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	npid, _, err := containerProc(p, "server")
	if err != nil {
		t.Fatal(err)
	}
	audited := auditCommands(t, npid)
	for _, want := range []string{s + ": echo before > /workspace/f", s + ": sleep 20; echo late", s + ": echo after >> /workspace/f"} {
		if !slices.Contains(audited, want) {
			t.Errorf("%s's audit log (%d lines) has no line of %q", pod.Name, len(audited), want)
		}
	}
	if !slices.ContainsFunc(audited, func(l string) bool { return strings.HasPrefix(l, s+": for i in $(seq") }) {
		t.Errorf("%s's audit log has no line of the background task", pod.Name)
	}
	held += fmt.Sprintf("; audited by the killed replica: %v", slices.Contains(audited, "ask-0: uname -s"))
	t.Logf("fault oom: %s (%s) OOM-killed (%s) %s after its memory cgroup limit went to usage+256KiB under 8 callers; "+
		"the call in flight: %v, %s after the kill; the load's calls: %d errors, first %q; through %s during: %v; "+
		"first call through the restarted %s %s after the kill; the ask held by the killed replica: %s; load %s; wall %s",
		pod.Name, pod.Status.PodIP, reason, tk0.Sub(t0).Round(time.Millisecond), inErr, inTook.Round(time.Millisecond),
		len(loadErrs), firstOf(loadErrs), e.pods[b].Name, during, pod.Name, recovered.Round(time.Millisecond), held,
		loadavg(), time.Since(wall).Round(time.Second))
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// loadavg is the node's 1, 5 and 15 minute load averages.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// waitPending waits (1m) for a pending approval of uname -s for each
// session, listed through cl, and returns their ids.
func (e *faultEnv) waitPending(cl *client.Client, sessions ...string) []string {
	e.t.Helper()
	ids := make([]string, len(sessions))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		aps, err := cl.Approvals(context.Background(), "pending")
		if err != nil {
			e.t.Fatal(err)
		}
		for _, a := range aps {
			if i := slices.Index(sessions, a.Session); i >= 0 && a.Command == "uname -s" {
				ids[i] = a.ID
			}
		}
		if !slices.Contains(ids, "") {
			return ids
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pending approvals after 1m: %v for %v", ids, sessions)
		}
	}
}

// leader returns the index in e.pods of the replica holding the Lease, or
// -1, and the holder's identity.
func (e *faultEnv) leader(ctx context.Context) (int, string) {
	l, err := e.c.CS.CoordinationV1().Leases(e.r.SessionsNamespace).Get(ctx, kube.LeaseName(e.r.Name), metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return -1, ""
	}
	id := *l.Spec.HolderIdentity
	for i, p := range e.pods {
		if strings.HasPrefix(id, p.Name+"-") {
			return i, id
		}
	}
	return -1, id
}

// followerFirst returns a replica that does not lead, then the other.
func (e *faultEnv) followerFirst(ctx context.Context) (int, int) {
	e.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if i, _ := e.leader(ctx); i >= 0 {
			return 1 - i, i
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no replica of %v holds the Lease after 1m", e.pods)
		}
	}
}

// pooled counts the unclaimed pooled pods of tenant pool, not being
// deleted.
func (e *faultEnv) pooled(ctx context.Context) (int, error) {
	pods, err := e.c.CS.CoreV1().Pods(e.r.SessionsNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		a := p.Annotations
		if p.DeletionTimestamp == nil && a[kube.AnnotationTenant] == "pool" && sandbox.IsPooled(a[kube.AnnotationSession]) && a[kube.AnnotationClaimedBy] == "" {
			n++
		}
	}
	return n, nil
}

// waitPool waits (2m) until the pool holds poolSize unclaimed pods, and
// returns when.
func (e *faultEnv) waitPool(ctx context.Context) time.Time {
	e.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		n, err := e.pooled(ctx)
		if err == nil && n == poolSize {
			return time.Now()
		}
		if time.Now().After(deadline) {
			e.r.Diagnose(e.t)
			e.t.Fatalf("%d pooled pods after 2m, want %d (%v)", n, poolSize, err)
		}
	}
}

// leaderGauge is a replica's shellbox_leader metric.
func (e *faultEnv) leaderGauge(i int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, podURL(e.pods[i])+"/metrics", nil)
	resp, err := e.hc.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "shellbox_leader "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "absent"
}

// faultLeaderStopped: the Lease holder's server SIGSTOPped until the other
// replica holds the Lease, then SIGCONT; the new leader reaps an idle
// session and refills the pool after a claim; the old one acts as the
// leader no more (its log, its metric, the pool never above its size).
func faultLeaderStopped(t *testing.T, c *kubetest.Cluster, r *Release) {
	wall := time.Now()
	e := newFaultEnv(t, c, r)
	ctx := context.Background()
	b, a := e.followerFirst(ctx) // a leads
	_, oldID := e.leader(ctx)
	e.waitPool(ctx)
	pod := e.pods[a]
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	pid, _, err := containerProc(&pod, "server")
	if err != nil {
		t.Fatal(err)
	}
	// The pool's size, sampled until the end: never above poolSize.
	var (
		pmu     sync.Mutex
		maxPool int
		samples int
	)
	pctx, stopPool := context.WithCancel(ctx)
	pdone := make(chan struct{})
	go func() {
		defer close(pdone)
		for pctx.Err() == nil {
			if n, err := e.pooled(pctx); err == nil {
				pmu.Lock()
				maxPool, samples = max(maxPool, n), samples+1
				pmu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	defer func() { stopPool(); <-pdone }()

	// An idle session: made through the leader (a replica's reaper spares
	// a sandbox it is creating, not one another replica creates: a cold
	// start past the 10 s TTL on a loaded node was reaped mid-creation),
	// last used now through the follower; its TTL runs out while the
	// leader is stopped.
	e.call(e.client(a, "idle"), "reaped", "echo x > /workspace/x", false)
	e.call(e.client(b, "idle"), "reaped", "cat /workspace/x", false)
	idlePod := kube.PodName("idle", "reaped")

	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s's server (pid %d): %v", pod.Name, pid, err)
	}
	stopped := true
	cont := func() {
		if stopped {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Errorf("SIGCONT %s's server (pid %d): %v", pod.Name, pid, err)
			}
			stopped = false
		}
	}
	t.Cleanup(cont)
	// Calls during the stop: through the stopped replica (held by the
	// kernel until SIGCONT) and through the other.
	viaA := make(chan outcome, 1)
	go func() { viaA <- callOutcome(e.client(a, "flt"), "during-stop", "echo a", "a", t0, 2*time.Minute) }()
	viaBc := make(chan outcome, 1)
	go func() { viaBc <- callOutcome(e.client(b, "flt"), "during-stop-b", "echo b", "b", t0, 2*time.Minute) }()
	var took time.Duration
	var newID string
	for deadline := t0.Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if i, id := e.leader(ctx); i == b {
			took, newID = time.Since(t0), id
			break
		}
		if time.Now().After(deadline) {
			cont()
			t.Fatalf("%s does not hold the Lease 1m after %s's server was stopped", e.pods[b].Name, pod.Name)
		}
	}
	// SIGCONT at once: the kubelet's liveness probe (3 failures 10 s
	// apart) would restart it some 20-30 s after the stop.
	cont()
	tCont := time.Now()
	t.Logf("%s took the Lease (%s) %s after %s (%s) was stopped; SIGCONT at %s", e.pods[b].Name, newID, took.Round(time.Millisecond),
		pod.Name, oldID, tCont.Sub(t0).Round(time.Millisecond))

	// The idle session reaped, by the new leader.
	var reapedAt time.Duration
	for deadline := t0.Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		// Reaped: its deletion begun (the pod then ends in its grace).
		p, err := c.CS.CoreV1().Pods(r.SessionsNamespace).Get(ctx, idlePod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
			reapedAt = time.Since(t0)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle session's pod %s still there 2m after the stop", idlePod)
		}
	}
	// A claim through the new leader, and its refill.
	cp := e.client(b, "pool")
	claimStart := time.Now()
	e.call(cp, "claimer", "true", false)
	claimed := time.Since(claimStart)
	refilled := e.waitPool(ctx).Sub(claimStart)
	// Some time for the old leader to show itself.
	time.Sleep(15 * time.Second)
	stopPool()
	<-pdone

	reapLines := e.serverLog(e.pods[b].Name, t0, `"sandbox reaped"`)
	if !slices.ContainsFunc(reapLines, func(l string) bool { return strings.Contains(l, `"reaped"`) }) {
		t.Errorf("%s (the new leader) logged no reap of the idle session: %q", e.pods[b].Name, reapLines)
	}
	if got := e.serverLog(e.pods[b].Name, claimStart, `"pooled sandbox created"`); len(got) == 0 {
		t.Errorf("%s (the new leader) logged no pooled sandbox created after the claim", e.pods[b].Name)
	}
	acted := e.serverLog(pod.Name, tCont, `"sandbox reaped"`, `"pooled sandbox created"`, `"leading: this replica holds the lease"`, `"removing pooled`)
	if len(acted) > 0 {
		t.Errorf("%s acted as the leader after SIGCONT:\n%s", pod.Name, strings.Join(acted, "\n"))
	}
	stoppedLines := e.serverLog(pod.Name, t0, `"stopped reaping`, `"stopped leading`)
	if len(stoppedLines) == 0 {
		t.Errorf("%s logged no end of its leadership after SIGCONT", pod.Name)
	}
	if g := e.leaderGauge(a); g != "0" {
		t.Errorf("%s's shellbox_leader after SIGCONT: %s, want 0", pod.Name, g)
	}
	if g := e.leaderGauge(b); g != "1" {
		t.Errorf("%s's shellbox_leader: %s, want 1", e.pods[b].Name, g)
	}
	if i, _ := e.leader(ctx); i != b {
		t.Errorf("the Lease is %d's after SIGCONT, want %s's", i, e.pods[b].Name)
	}
	pmu.Lock()
	mp, ns := maxPool, samples
	pmu.Unlock()
	if mp > poolSize {
		t.Errorf("the pool held %d unclaimed pods at once, want at most %d", mp, poolSize)
	}
	p, err := c.CS.CoreV1().Pods(r.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err == nil && p.Status.ContainerStatuses[0].RestartCount != restarts {
		t.Errorf("%s's container was restarted meanwhile (the liveness probe): the SIGCONT part is not what it tested", pod.Name)
	}
	viaB := <-viaBc
	if viaB.err != "" {
		t.Errorf("a call through %s while %s was stopped: %s", e.pods[b].Name, pod.Name, viaB)
	}
	var stoppedCall outcome
	select {
	case stoppedCall = <-viaA:
		if stoppedCall.err != "" {
			t.Errorf("the call through %s made while it was stopped: %s", pod.Name, stoppedCall)
		}
	case <-time.After(time.Minute):
		t.Errorf("the call through %s made while it was stopped had not ended 1m after SIGCONT", pod.Name)
	}
	// Both replicas serve after.
	for i := range e.pods {
		e.call(e.client(i, "pool"), "claimer", "echo after", false)
	}
	t.Logf("fault lease-holder-stopped: %s's server SIGSTOPped; %s held the Lease %s later (lease 15 s, retry 2 s), SIGCONT %s after the stop; "+
		"the idle session (TTL 10 s, used just before the stop) reaped (its pod's deletion begun) %s after the stop by the new leader; a claim through it took %s and the pool was full again %s after it began; "+
		"after SIGCONT the old leader logged %q, nothing of leading; pool at most %d unclaimed pods in %d samples; "+
		"a call through the stopped replica during the stop: %s; through the other (a new session): %s; load %s; wall %s",
		pod.Name, e.pods[b].Name, took.Round(time.Millisecond), tCont.Sub(t0).Round(time.Millisecond), reapedAt.Round(time.Millisecond),
		claimed.Round(time.Millisecond), refilled.Round(time.Millisecond), stoppedLines, mp, ns, stoppedCall, viaB, loadavg(), time.Since(wall).Round(time.Second))
}

// iptablesCut is one rule of the node's netfilter dropping src's packets
// to dst: the raw table's PREROUTING, which bridged packets between two
// pods of the node cross too (br_netfilter), before conntrack and every
// ACCEPT of kube-router, kube-proxy and the CNI's firewall.
func iptablesCut(src, dst, comment string) []string {
	return []string{"-w", "5", "-t", "raw", "%s", "PREROUTING", "-s", src + "/32", "-d", dst + "/32", "-m", "comment", "--comment", comment, "-j", "DROP"}
}

func iptables(op string, rule []string) error {
	args := slices.Clone(rule)
	for i, a := range args {
		if a == "%s" {
			args[i] = op
		}
	}
	out, err := osexec.Command("iptables", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// reaches says whether a TCP connection from the network namespace of
// process pid to addr is made within 3 s (refused counts as reached: an
// answer came back).
func reaches(pid int, host string, port int) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := osexec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(pid), "-n", "--",
		"timeout", "3", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", host, port)).CombinedOutput()
	var ee *osexec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 124 {
		return false, "no connection within 3s"
	}
	return true, strings.TrimSpace(string(out))
}

// faultNetworkCut: the node's netfilter drops everything between a
// replica (A) and a session pod for 30 s, while A has a call in flight to
// it and a background task of it runs; calls through A during and after,
// through B all along.
func faultNetworkCut(t *testing.T, c *kubetest.Cluster, r *Release) {
	wall := time.Now()
	e := newFaultEnv(t, c, r)
	ctx := context.Background()
	a, b := 0, 1
	ca, cb := e.client(a, "flt"), e.client(b, "flt")
	const s, ticks, cut = "cut", 200, 30 * time.Second // the task: 50 s
	e.call(ca, s, "echo before > /workspace/f", false)
	tk := e.start(ca, s, ticks)
	pw := e.watchPod("flt", s)
	sp, err := c.CS.CoreV1().Pods(r.SessionsNamespace).Get(ctx, kube.PodName("flt", s), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentPort := int(sp.Spec.Containers[0].Ports[0].ContainerPort)
	apid, _, err := containerProc(sp, sp.Spec.Containers[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	pod := e.pods[a]
	spid, _, err := containerProc(&pod, "server")
	if err != nil {
		t.Fatal(err)
	}
	serverPort := int(pod.Spec.Containers[0].Ports[0].ContainerPort)
	// The probes reach both ways before the cut.
	if ok, why := reaches(spid, sp.Status.PodIP, agentPort); !ok {
		t.Fatalf("%s does not reach the session pod %s:%d before the cut: %s", pod.Name, sp.Status.PodIP, agentPort, why)
	}
	if ok, why := reaches(apid, pod.Status.PodIP, serverPort); !ok {
		t.Fatalf("the session pod does not reach %s:%d before the cut: %s", pod.Status.PodIP, serverPort, why)
	}

	// A call in flight on A as the cut comes.
	inflight := make(chan outcome, 1)
	tIn := time.Now()
	go func() { inflight <- callOutcome(ca, s, "sleep 3; echo through", "through", tIn, 3*time.Minute) }()
	time.Sleep(time.Second)

	comment := "shellbox-e2e-cut-" + r.Name
	rules := [][]string{iptablesCut(pod.Status.PodIP, sp.Status.PodIP, comment), iptablesCut(sp.Status.PodIP, pod.Status.PodIP, comment)}
	var removeOnce sync.Once
	remove := func() {
		removeOnce.Do(func() {
			for _, rule := range rules {
				if err := iptables("-D", rule); err != nil {
					t.Errorf("remove the cut: %v", err)
				}
			}
		})
	}
	t.Cleanup(remove)
	for _, rule := range rules {
		if err := iptables("-I", rule); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	if ok, why := reaches(spid, sp.Status.PodIP, agentPort); ok {
		t.Fatalf("the cut does not cut: %s reaches the session pod %s:%d: %s", pod.Name, sp.Status.PodIP, agentPort, why)
	}
	if ok, why := reaches(apid, pod.Status.PodIP, serverPort); ok {
		t.Fatalf("the cut does not cut: the session pod reaches %s:%d: %s", pod.Status.PodIP, serverPort, why)
	}

	// During: a call through A every 3 s, each on its own; through B,
	// calls and reads.
	var (
		mu     sync.Mutex
		viaA   []outcome
		viaB   []outcome
		wg     sync.WaitGroup
		nA     int
		bReads int
	)
	for time.Since(t0) < cut {
		n := nA
		nA++
		wg.Go(func() {
			word := fmt.Sprintf("during-%d", n)
			o := callOutcome(ca, s, "echo "+word, word, t0, 3*time.Minute)
			mu.Lock()
			viaA = append(viaA, o)
			mu.Unlock()
		})
		o := callOutcome(cb, s, "cat /workspace/f", "before", t0, time.Minute)
		viaB = append(viaB, o)
		if o.err != "" {
			t.Errorf("a call through %s during the cut: %s", e.pods[b].Name, o)
		}
		if err := tk.read(ctx, cb); err != nil {
			t.Errorf("bash_output through %s during the cut: %v", e.pods[b].Name, err)
		} else {
			bReads++
		}
		time.Sleep(max(0, time.Duration(nA)*3*time.Second-time.Since(t0)))
	}
	remove()
	tEnd := time.Now()
	if ok, why := reaches(spid, sp.Status.PodIP, agentPort); !ok {
		t.Errorf("%s does not reach the session pod after the cut was removed: %s", pod.Name, why)
	}
	// After: a new call through A every second until one succeeds.
	var first outcome
	for deadline := tEnd.Add(2 * time.Minute); ; time.Sleep(time.Second) {
		first = callOutcome(ca, s, "cat /workspace/f", "before", tEnd, time.Minute)
		if first.err == "" || time.Now().After(deadline) {
			break
		}
	}
	if first.err != "" {
		t.Errorf("no call through %s succeeded 2m after the cut ended: %s", pod.Name, first)
	}
	recovered := first.start + first.took
	// Every call made during the cut ends, within its bound.
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(3 * time.Minute):
		t.Fatalf("calls through %s made during the cut still running 3m after it", pod.Name)
	}
	in := <-inflight
	var last time.Duration
	for _, o := range viaA {
		last = max(last, o.start+o.took-tEnd.Sub(t0))
		if o.err != "" && !strings.Contains(o.err, "agent") {
			t.Errorf("a call through %s during the cut failed without naming the agent: %s", pod.Name, o)
		}
	}
	if in.err != "" && !strings.Contains(in.err, "agent") {
		t.Errorf("the call in flight as the cut came failed without naming the agent: %s", in)
	}
	e.finish(tk, ca, ticks)
	if got := e.call(ca, s, "cat /workspace/f", false).Text; got != "before" {
		t.Errorf("the workspace after: %q", got)
	}
	pw.check(t, s)
	slices.SortFunc(viaA, func(x, y outcome) int { return int(x.start - y.start) })
	t.Logf("fault network-cut: %s (%s) <-> session pod %s (%s) dropped for %s (raw PREROUTING); the call in flight (sleep 3) as the cut came: %s; "+
		"calls through %s during the cut (from the cut's start): %v; the last of them ended %s after the cut ended; "+
		"through %s during: %d calls, %d errors, %d bash_output reads; first new call through %s after the cut: %s after it ended; load %s; wall %s",
		pod.Name, pod.Status.PodIP, sp.Name, sp.Status.PodIP, tEnd.Sub(t0).Round(time.Millisecond), in,
		pod.Name, viaA, last.Round(time.Millisecond),
		e.pods[b].Name, len(viaB), countErrs(viaB), bReads, pod.Name, recovered.Round(time.Millisecond), loadavg(), time.Since(wall).Round(time.Second))
}

func countErrs(os []outcome) int {
	n := 0
	for _, o := range os {
		if o.err != "" {
			n++
		}
	}
	return n
}
