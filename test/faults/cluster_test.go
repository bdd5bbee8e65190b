package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// The cluster's faults (issue 26): the daemons of the CI cluster that
// .ci/setup-kube.sh starts (pid files in clusterRun, logs in clusterLogs)
// are stopped and started again under a `shellbox serve` on this host
// whose sessions are pods of that cluster, and the API server is made
// slow by a proxy of the test. They restart the shared cluster's daemons,
// so they run only when asked (envClusterFaults), alone on the cluster.

const (
	// envClusterFaults=1 runs TestClusterFaults.
	envClusterFaults = "SHELLBOX_CLUSTER_FAULTS"
	// clusterRun holds the daemons' pid files (NAME.pid) and the binary
	// each pid was started from (NAME.exe); clusterLogs their logs.
	clusterRun  = "/run/shellbox-kube"
	clusterLogs = "/var/log/shellbox-kube"
	// clusterFaultsCommand is how to run them (docs/testing.md).
	clusterFaultsCommand = "SHELLBOX_CLUSTER_FAULTS=1 SHELLBOX_KUBECONFIG=/etc/shellbox-kube/admin.kubeconfig " +
		"flock -x /tmp/shellbox-cluster.lock go test ./test/faults -run TestClusterFaults -v -timeout 30m"
	// slowAPIDelay is what the proxy adds to every chunk it forwards,
	// each way, in the slow-API-server case.
	slowAPIDelay = 500 * time.Millisecond
	// clusterBack bounds the wait for the cluster to be healthy again
	// after a fault (the API server's start takes 10-40 s on the CI
	// machine).
	clusterBack = 3 * time.Minute
)

// The chart's CRD of approvals (kube.approvals: cluster).
var approvalsCRD = filepath.Join("..", "..", "deploy", "helm", "shellbox", "crds", "approvals.yaml")

// clusterFault is one fault of the cluster: inject makes it and returns
// when it ends (the daemon started again, the process continued, the
// proxy fast again).
type clusterFault struct {
	name   string
	daemon string // the daemon it stops ("" for none)
	inject func(t *testing.T, d *clusterDaemon, px *slowProxy) time.Time
}

// restart stops the daemon with SIGTERM, waits for it to exit and starts
// it again as setup-kube.sh did: the fault lasts as long as the daemon
// takes to stop.
func restart(t *testing.T, d *clusterDaemon, _ *slowProxy) time.Time {
	d.stop(t)
	d.start(t)
	return time.Now()
}

var clusterFaults = []clusterFault{
	{"api-slow", "", func(t *testing.T, _ *clusterDaemon, px *slowProxy) time.Time {
		px.delay.Store(int64(slowAPIDelay))
		time.Sleep(30 * time.Second)
		px.delay.Store(0)
		return time.Now()
	}},
	{"kube-apiserver-restarted", "kube-apiserver", restart},
	// SIGSTOP rather than a restart: a stopped etcd holds the API
	// server's connections open and answers nothing, as a hung or
	// partitioned etcd does, which only timeouts end (a restarted one
	// refuses at once); SIGCONT after 20 s.
	{"etcd-stopped-20s", "etcd", func(t *testing.T, d *clusterDaemon, _ *slowProxy) time.Time {
		d.signal(t, syscall.SIGSTOP)
		time.Sleep(20 * time.Second)
		d.signal(t, syscall.SIGCONT)
		return time.Now()
	}},
	{"kubelet-restarted", "kubelet", restart},
	{"containerd-restarted", "containerd", restart},
}

// TestClusterFaults: for each fault of the cluster, a session of a
// `shellbox serve` on the cluster (approvals: cluster, so a pending
// approval is an object of the API server) has files in its workspace,
// a background task printing, a call held for approval and audit lines;
// during the fault its calls, and a new session's first call, end in a
// result or an error (never past hung); after it a call of the session
// and a new session's first call succeed (the times are logged, from the
// end of the fault and from the cluster being healthy again), and
// nothing is lost: the workspace's files, the task's output to its end,
// the approval (still pending, and approving it runs the call), an audit
// line of every call answered; each session has one pod, and once the
// sessions are deleted no pod or Secret is left in the namespace. The
// cluster is healthy at the end (API server ready, node Ready, kubelet
// healthy), restored by the test's cleanup if it failed midway.
func TestClusterFaults(t *testing.T) {
	if os.Getenv(envClusterFaults) != "1" {
		t.Skipf("%s is not 1: these tests stop and restart the shared cluster's daemons (kube-apiserver, etcd, kubelet, the node's containerd), "+
			"so they run alone on the cluster: %s", envClusterFaults, clusterFaultsCommand)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s=1 needs root (it signals the cluster's daemons)", envClusterFaults)
	}
	c := kubetest.Connect(t)
	if err := clusterHealthy(c, time.Time{}, false); err != nil {
		t.Fatalf("the cluster is not healthy before the faults: %v", err)
	}
	c.ApplyCRD(t, approvalsCRD)
	for _, f := range clusterFaults {
		t.Run(f.name, func(t *testing.T) {
			start := time.Now()
			clusterFaultCase(t, c, f)
			t.Logf("cluster fault %s: wall time %s, load average %s", f.name, time.Since(start).Round(time.Second), loadavg())
		})
	}
}

// callRecord is one call and what it saw.
type callRecord struct {
	what string
	at   time.Time // when it was made
	took time.Duration
	res  tools.Result
	err  error
}

func (r callRecord) ok() bool { return r.err == nil && !r.res.IsError }

func (r callRecord) String() string {
	saw := r.res.Text
	if r.err != nil {
		saw = "transport: " + r.err.Error()
	}
	if len(saw) > 300 {
		saw = saw[:300] + "…"
	}
	return fmt.Sprintf("%s (%s): %q", r.what, r.took.Round(100*time.Millisecond), saw)
}

// clusterCall makes one tool call through p within hung; unlike
// serveProc.call it may run on any goroutine.
func clusterCall(p *serveProc, session, tool, args string) callRecord {
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	r := callRecord{what: session + " " + args, at: time.Now()}
	r.res, r.err = client.New(p.url, token, nil).Call(ctx, session, tool, json.RawMessage(args))
	r.took = time.Since(r.at)
	return r
}

func bashArgs(command string) string {
	return fmt.Sprintf(`{"command":%q,"description":"cluster fault test"}`, command)
}

func clusterFaultCase(t *testing.T, c *kubetest.Cluster, f clusterFault) {
	e, _, ns := kubeSoakEngine(t, soakTarget{name: "kube/runc", e: kubeSoak, runtime: sandbox.RuntimeRunc})
	counts := kubeHost(t, c, ns)
	s := newServed(t, e, sandbox.RuntimeRunc, "")
	kubeServed(t, s, ns)
	var px *slowProxy
	kubeconfig := os.Getenv(kubetest.EnvKubeconfig)
	if f.daemon == "" {
		px = newSlowProxy(t, c.Config.Host)
		kubeconfig = px.kubeconfig(t, kubeconfig, c.Config.Host)
	}
	b, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "approvals: memory", "approvals: cluster", 1)
	cfg = strings.Replace(cfg, "kubeconfig: "+os.Getenv(kubetest.EnvKubeconfig), "kubeconfig: "+kubeconfig, 1)
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s.policyLine(t, "rules:\n  - name: hold\n    decision: ask\n    reason: the cluster fault test holds it\n    match:\n      command: [touch]\n")
	p := s.start(t)

	const sa, sb, sc = "cf-a", "cf-b", "cf-c" // before; first call during; first call after
	t.Cleanup(func() {
		if t.Failed() { // else deleted at the end, their leftovers counted
			p.deleteSessions(t, sa, sb, sc)
		}
	})
	var answered []callRecord // every call the server answered: each has an audit line
	must := func(r callRecord) callRecord {
		t.Helper()
		if !r.ok() {
			t.Fatalf("%s", r)
		}
		answered = append(answered, r)
		return r
	}
	first := must(clusterCall(p, sa, tools.ToolBash, bashArgs("echo kept > /workspace/kept")))
	r := must(clusterCall(p, sa, tools.ToolBash,
		`{"command":"for i in $(seq 1 40); do echo tick $i; sleep 1; done; exit 3","description":"ticks","run_in_background":true}`))
	task := r.res.Value.(*tools.Background).TaskID

	// The call held for approval, on a context of its own: it waits
	// through the fault.
	held := make(chan callRecord, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		r := callRecord{what: sa + " touch (held for approval)", at: time.Now()}
		r.res, r.err = client.New(p.url, token, nil).Call(ctx, sa, tools.ToolBash, json.RawMessage(bashArgs("touch /workspace/approved")))
		r.took = time.Since(r.at)
		held <- r
	}()
	pending := waitPending(t, p, sa)

	d := (*clusterDaemon)(nil)
	if f.daemon != "" {
		d = readDaemon(t, f.daemon)
		// Registered last, so run first: the cluster is back before the
		// sessions and the namespace are deleted.
		t.Cleanup(func() { d.restore(t, c) })
	}

	// During the fault: a call of the session every second, and a new
	// session's first call.
	faultStart := time.Now()
	stop := make(chan struct{})
	var during []callRecord
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			during = append(during, clusterCall(p, sa, tools.ToolBash, bashArgs(fmt.Sprintf("echo during-%d", i))))
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	newDuring := make(chan callRecord, 1)
	go func() { newDuring <- clusterCall(p, sb, tools.ToolBash, bashArgs("echo new-during")) }()

	faultEnd := f.inject(t, d, px)
	// After the kubelet's restart its node's heartbeat is new; after
	// containerd's the kubelet reports the node unchanged (no new
	// heartbeat for minutes), and the new session's pod proves the
	// runtime.
	since := time.Time{}
	if f.daemon == "kubelet" {
		since = faultEnd
	}
	if err := waitHealthy(c, since, f.daemon == "kubelet" || f.daemon == "containerd"); err != nil {
		t.Fatalf("the cluster is not healthy %s after the fault: %v", clusterBack, err)
	}
	readyAt := time.Now()
	close(stop)
	wg.Wait()

	// After: the session's next call and a new session's first call,
	// each polled until it succeeds.
	afterOld := pollOK(t, p, sa, "echo after-old")
	afterNew := pollOK(t, p, sc, "echo after-new")
	answered = append(answered, afterOld, afterNew)
	var nd callRecord
	select {
	case nd = <-newDuring:
	case <-time.After(hung):
		t.Fatalf("the new session's call made during the fault did not end within %s", hung)
	}
	for _, r := range append(during, nd) {
		if r.took >= hung {
			t.Errorf("a call during the fault hung: %s", r)
		}
		if r.err == nil {
			answered = append(answered, r)
		}
	}

	// Nothing lost: the workspace, the task to its end, the approval.
	if got := p.bash(t, sa, "cat /workspace/kept"); got != "kept" {
		t.Errorf("the workspace's file after the fault: %q, want kept", got)
	}
	out := readTask(t, p, sa, task)
	for i := 1; i <= 40; i++ {
		if want := fmt.Sprintf("tick %d\n", i); !strings.Contains(out, want) {
			t.Errorf("the task's output read after the fault lacks %q:\n%s", want, out)
			break
		}
	}
	if !strings.Contains(out, "status: completed, exit code: 3") {
		t.Errorf("the task's status after the fault:\n%s", out)
	}
	approvalLost := ""
	select {
	case r := <-held:
		approvalLost = r.String()
		t.Errorf("the call held for approval ended during the fault: %s", r)
	default:
		ctx, cancel := context.WithTimeout(context.Background(), hung)
		defer cancel()
		cl := client.New(p.url, token, nil)
		a, err := cl.Approval(ctx, pending.ID)
		if err != nil || a.State != approval.Pending {
			t.Errorf("approval %s after the fault: %+v, %v; want it pending", pending.ID, a, err)
		}
		if _, err := cl.Decide(ctx, pending.ID, true, "fault-test", "after the fault"); err != nil {
			t.Errorf("approving %s after the fault: %v", pending.ID, err)
		}
		select {
		case r := <-held:
			if !r.ok() {
				t.Errorf("the call approved after the fault: %s", r)
			}
			answered = append(answered, r)
		case <-time.After(hung):
			t.Errorf("the approved call did not end within %s", hung)
		}
		if got := p.bash(t, sa, "ls /workspace/approved"); got != "/workspace/approved" {
			t.Errorf("the approved call's file: %q", got)
		}
	}
	auditHasAll(t, s.audit, answered)

	// One pod per session, whatever the fault made of its creation.
	perSession := sessionPods(t, c, ns)
	for _, sess := range []string{sa, sb, sc} {
		if n := perSession[sess]; n > 1 || (n == 0 && (sess != sb || nd.ok())) {
			t.Errorf("session %s has %d pods after the fault, want one (pods per session: %v)", sess, n, perSession)
		}
	}

	var errs []string
	okDuring := 0
	for _, r := range during {
		if r.ok() {
			okDuring++
		} else if len(errs) < 4 {
			errs = append(errs, r.String())
		}
	}
	t.Logf("cluster fault %s: fault %s (cluster healthy %s after its end); during it %d calls of the session, %d succeeded (slowest %s), errors: %v; "+
		"a new session's first call during it: %s; after it: the session's call succeeded %s after the end (%s after healthy), "+
		"a new session's first call %s after the end (took %s; before the fault it took %s); approval %s; load average %s",
		f.name, faultEnd.Sub(faultStart).Round(100*time.Millisecond), readyAt.Sub(faultEnd).Round(100*time.Millisecond),
		len(during), okDuring, slowest(during), errs, nd,
		afterOld.at.Add(afterOld.took).Sub(faultEnd).Round(100*time.Millisecond), afterOld.at.Add(afterOld.took).Sub(readyAt).Round(100*time.Millisecond),
		afterNew.at.Add(afterNew.took).Sub(faultEnd).Round(100*time.Millisecond), afterNew.took.Round(100*time.Millisecond), first.took.Round(100*time.Millisecond),
		map[bool]string{true: "kept pending and approved after", false: "lost: " + approvalLost}[approvalLost == ""], loadavg())

	// No orphan once the sessions are gone.
	p.deleteSessions(t, sa, sb, sc)
	var k kubeCounts
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		if k = counts(); k.pods == 0 && k.secrets == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("2m after deleting the sessions namespace %s has %d pods and %d Secrets, want none", ns, k.pods, k.secrets)
			break
		}
	}
	if t.Failed() {
		t.Logf("serve's log:\n%s", p.log())
	}
}

func slowest(rs []callRecord) time.Duration {
	var m time.Duration
	for _, r := range rs {
		m = max(m, r.took)
	}
	return m.Round(100 * time.Millisecond)
}

// waitPending waits until session has one pending approval and returns it.
func waitPending(t *testing.T, p *serveProc, session string) approval.Approval {
	t.Helper()
	cl := client.New(p.url, token, nil)
	for deadline := time.Now().Add(hung); ; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		as, err := cl.Approvals(ctx, string(approval.Pending))
		cancel()
		for _, a := range as {
			if a.Session == session {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pending approval of %s after %s: %v %+v", session, hung, err, as)
		}
	}
}

// pollOK calls `command` in session until it succeeds, within hung, and
// returns the call that did.
func pollOK(t *testing.T, p *serveProc, session, command string) callRecord {
	t.Helper()
	start := time.Now()
	var last callRecord
	for time.Since(start) < hung {
		last = clusterCall(p, session, tools.ToolBash, bashArgs(command))
		if last.ok() {
			return last
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%q in %s did not succeed within %s after the fault; last: %s", command, session, hung, last)
	return last
}

// readTask reads a background task through bash_output until it ends.
func readTask(t *testing.T, p *serveProc, session, task string) string {
	t.Helper()
	var out strings.Builder
	for deadline := time.Now().Add(hung); ; time.Sleep(500 * time.Millisecond) {
		r := clusterCall(p, session, tools.ToolBashOutput, fmt.Sprintf(`{"task_id":%q}`, task))
		if !r.ok() {
			t.Fatalf("bash_output after the fault: %s", r)
		}
		out.WriteString(r.res.Text + "\n")
		if strings.Contains(r.res.Text, "status: completed") || time.Now().After(deadline) {
			return out.String()
		}
	}
}

// auditHasAll checks that the audit log has a line of each call.
func auditHasAll(t *testing.T, path string, calls []callRecord) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range calls {
		var a struct{ Command string }
		if json.Unmarshal([]byte(r.what[strings.IndexByte(r.what, ' ')+1:]), &a) != nil || a.Command == "" {
			continue // the held call's record; its command is touch
		}
		want, _ := json.Marshal(a.Command)
		if !strings.Contains(string(b), string(want)) {
			t.Errorf("the audit log has no line of %s", r)
		}
	}
	if !strings.Contains(string(b), `"touch /workspace/approved"`) {
		t.Errorf("the audit log has no line of the call held for approval")
	}
}

// sessionPods counts the pods of each session in ns that are not being
// deleted.
func sessionPods(t *testing.T, c *kubetest.Cluster, ns string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	pods, err := c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing the pods of %s: %v", ns, err)
	}
	n := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			n[p.Labels[sandbox.LabelSession]]++
		}
	}
	return n
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// clusterHealthy tells whether the API server is ready (/readyz, which
// checks etcd) and every node Ready with a heartbeat no older than since
// (zero: any); with kubelet, whether the kubelet answers healthy too.
func clusterHealthy(c *kubetest.Cluster, since time.Time, kubelet bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if b, err := c.CS.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("kube-apiserver /readyz: %w (%s)", err, b)
	}
	nodes, err := c.CS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		ready := false
		for _, cond := range n.Status.Conditions {
			ready = ready || cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue &&
				!cond.LastHeartbeatTime.Time.Before(since.Truncate(time.Second))
		}
		if !ready {
			return fmt.Errorf("node %s is not Ready (since %s)", n.Name, since.Format(time.TimeOnly))
		}
	}
	if kubelet {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:10248/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("kubelet /healthz: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("kubelet /healthz: %s", resp.Status)
		}
	}
	return nil
}

// waitHealthy polls clusterHealthy for clusterBack.
func waitHealthy(c *kubetest.Cluster, since time.Time, kubelet bool) error {
	var err error
	for deadline := time.Now().Add(clusterBack); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if err = clusterHealthy(c, since, kubelet); err == nil {
			return nil
		}
	}
	return err
}

// clusterDaemon is one of the cluster's daemons as setup-kube.sh started
// it: its pid (from its pid file), command line, environment and working
// directory (from /proc), so it can be started again the same way.
type clusterDaemon struct {
	name string
	pid  int
	exe  string
	argv []string
	env  []string
	dir  string
	mu   sync.Mutex
}

func readDaemon(t *testing.T, name string) *clusterDaemon {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(clusterRun, name+".pid"))
	if err != nil {
		t.Fatalf("the cluster's %s: %v (is this the cluster .ci/setup-kube.sh starts?)", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s.pid: %v", name, err)
	}
	want, _ := os.ReadFile(filepath.Join(clusterRun, name+".exe"))
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || strings.TrimSuffix(exe, " (deleted)") != strings.TrimSpace(string(want)) {
		t.Fatalf("%s (pid %d) does not run %s: %q %v", name, pid, strings.TrimSpace(string(want)), exe, err)
	}
	d := &clusterDaemon{name: name, pid: pid, exe: strings.TrimSpace(string(want))}
	d.argv = nulSplit(t, fmt.Sprintf("/proc/%d/cmdline", pid))
	d.env = nulSplit(t, fmt.Sprintf("/proc/%d/environ", pid))
	if d.dir, err = os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil {
		t.Fatal(err)
	}
	return d
}

func nulSplit(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// alive tells whether the daemon's process exists (a zombie does not
// count).
func (d *clusterDaemon) alive() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// stopped tells whether the daemon's process is stopped (SIGSTOP).
func (d *clusterDaemon) stopped() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.pid))
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return err == nil && i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}

func (d *clusterDaemon) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := syscall.Kill(d.pid, sig); err != nil {
		t.Fatalf("%s to %s (pid %d): %v", sig, d.name, d.pid, err)
	}
}

// stop sends SIGTERM and waits for the process to exit (SIGKILL after a
// minute, as setup-kube.sh's stop_daemon does after 20 s).
func (d *clusterDaemon) stop(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := syscall.Kill(d.pid, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to %s (pid %d): %v", d.name, d.pid, err)
	}
	for deadline := time.Now().Add(time.Minute); d.alive(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(d.pid, syscall.SIGKILL)
			t.Logf("%s (pid %d) did not exit within a minute of SIGTERM: SIGKILLed", d.name, d.pid)
			deadline = time.Now().Add(time.Minute)
		}
	}
}

// start starts the daemon again as setup-kube.sh's start_daemon does:
// detached (setsid, from a shell that exits, so init is its parent), its
// output appended to its log, its pid file rewritten.
func (d *clusterDaemon) start(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.startLocked(); err != nil {
		t.Fatal(err)
	}
}

func (d *clusterDaemon) startLocked() error {
	log := filepath.Join(clusterLogs, d.name+".log")
	if f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
		fmt.Fprintf(f, "=== %s test/faults TestClusterFaults: %s started again\n", time.Now().UTC().Format(time.RFC3339), d.name)
		f.Close()
	}
	cmd := exec.Command("/bin/bash", append([]string{"-c",
		`log=$1; shift; setsid "$@" >>"$log" 2>&1 </dev/null & echo $!`, "bash", log, d.exe}, d.argv[1:]...)...)
	cmd.Env, cmd.Dir = d.env, d.dir
	if _, err := os.Stat(d.dir); err != nil {
		cmd.Dir = "/" // the directory setup-kube.sh ran in is gone
	}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("starting %s again: %w", d.name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("starting %s again: pid %q: %w", d.name, out, err)
	}
	d.pid = pid
	return os.WriteFile(filepath.Join(clusterRun, d.name+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// restore leaves the daemon running and the cluster healthy, whatever
// state the test left it in.
func (d *clusterDaemon) restore(t *testing.T, c *kubetest.Cluster) {
	d.mu.Lock()
	switch {
	case d.stopped():
		syscall.Kill(d.pid, syscall.SIGCONT)
		t.Logf("%s (pid %d) was stopped: continued", d.name, d.pid)
	case !d.alive():
		if err := d.startLocked(); err != nil {
			t.Error(err)
		} else {
			t.Logf("%s was not running: started again (pid %d)", d.name, d.pid)
		}
	}
	d.mu.Unlock()
	if err := waitHealthy(c, time.Time{}, false); err != nil {
		t.Errorf("the cluster is not healthy %s after the test: %v", clusterBack, err)
	}
}

// slowProxy forwards TCP connections to the API server, bytes as they
// are (TLS passes through), sleeping delay before each chunk it forwards
// either way.
type slowProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// newSlowProxy listens on 127.0.0.1 (in the API server certificate's
// SANs) for the API server at host (https://ADDR).
func newSlowProxy(t *testing.T, host string) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &slowProxy{ln: ln, target: strings.TrimPrefix(host, "https://"), conns: map[net.Conn]struct{}{}}
	px.wg.Add(1)
	go px.serve()
	t.Cleanup(px.close)
	return px
}

func (px *slowProxy) serve() {
	defer px.wg.Done()
	for {
		in, err := px.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", px.target, 10*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !px.track(in, out) {
			return
		}
		px.wg.Add(2)
		go px.pipe(out, in)
		go px.pipe(in, out)
	}
}

// track records a connection pair, unless the proxy is closed.
func (px *slowProxy) track(cs ...net.Conn) bool {
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		px.conns[c] = struct{}{}
	}
	return true
}

func (px *slowProxy) pipe(dst, src net.Conn) {
	defer px.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(px.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			// EOF or an error either way ends both: the API server's
			// clients never half-close.
			dst.Close()
			src.Close()
			return
		}
	}
}

func (px *slowProxy) close() {
	px.ln.Close()
	px.mu.Lock()
	for c := range px.conns {
		c.Close()
	}
	px.conns = nil
	px.mu.Unlock()
	px.wg.Wait()
}

// kubeconfig writes a copy of the kubeconfig at path whose server is the
// proxy instead of host.
func (px *slowProxy) kubeconfig(t *testing.T, path, host string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "server: "+host) {
		t.Fatalf("%s has no server %s", path, host)
	}
	out := filepath.Join(t.TempDir(), "slow.kubeconfig")
	s := strings.Replace(string(b), "server: "+host, "server: https://"+px.ln.Addr().String(), 1)
	if err := os.WriteFile(out, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}
