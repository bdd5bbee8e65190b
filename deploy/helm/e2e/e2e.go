// Package e2e installs the Helm chart (deploy/helm/shellbox) on the real
// cluster of SHELLBOX_KUBECONFIG (.ci/setup-kube.sh) with Helm's own
// install action, and drives the shellbox it gives from outside the
// cluster, through the chart's Service, as a platform team's agents would:
// REST and MCP over HTTP with tenant tokens, session pods made by the
// server in the release's sessions namespace.
//
// The images are the ones setup-kube.sh imports into the node's
// containerd: the server image shellbox:ci (built from this checkout, with
// the agent the session pods copy) and the test image as the sandbox
// image; there is no registry. Without a cluster the tests skip with the
// reason, and fail under CI=true (kubetest.Connect).
//
// Each Install is a release of its own (e2e-<random>: its namespace, its
// sessions namespace, labelled org.shellbox.test=1 with its session pods),
// uninstalled and deleted when the test ends; what a crashed run left is
// found by that label (.ci/teardown-kube.sh removes the whole cluster).
//
// Other tests install through it too: test/faults' soak of the chart
// (its target "chart": Install, SnapshotStore, ReadyServerPods, PodURL).
package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/server"
)

// ServerImage is the server image setup-kube.sh imports (SERVER_IMAGE in
// .ci/kube-env.sh). EnvServerTag, if set, names another tag of it on the
// node (a server built from a working tree, imported beside shellbox:ci).
const (
	ServerRepository = "shellbox"
	ServerTag        = "ci"
	EnvServerTag     = "SHELLBOX_E2E_SERVER_TAG"
)

func serverTag() string {
	if tag := os.Getenv(EnvServerTag); tag != "" {
		return tag
	}
	return ServerTag
}

// Tenant is a tenant of a release: its name, its policy file's body ("":
// none) and, after Install, its token.
type Tenant struct {
	Name   string
	Policy string
	Token  string
}

// Options say what to install.
type Options struct {
	Tenants []Tenant
	// Values are merged over the test defaults (Helm's own merge: maps
	// recursively, the rest replaced).
	Values map[string]any
	// Secrets are made in the release's namespace before the install
	// (name: key: value), for values that name a Secret.
	Secrets map[string]map[string]string
}

// Release is an installed chart and the way to it from outside the
// cluster.
type Release struct {
	Name              string
	Namespace         string
	SessionsNamespace string
	// URL is the Service's: http://<cluster IP>:<port> (this host is the
	// cluster's node; kube-proxy routes it).
	URL string
	// Tokens by tenant, and the operator token.
	Tokens   map[string]string
	Operator string

	c   *kubetest.Cluster
	cfg *action.Configuration
}

// chartDir is deploy/helm/shellbox, found from this source file.
func chartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "shellbox")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Install installs the chart as a new release with o's tenants, waits for
// its server to be ready through the Service, and removes everything when
// t ends. It fails t, with the server pod's state, events and log, when
// the release does not become ready.
func Install(t testing.TB, c *kubetest.Cluster, o Options) *Release {
	t.Helper()
	name := "e2e-" + randomHex(3)
	r := &Release{Name: name, Namespace: name, SessionsNamespace: name + "-sessions",
		Tokens: map[string]string{}, Operator: "op-" + randomHex(16), c: c}

	ctx := context.Background()
	// Both namespaces are made here, labelled, so that a run that crashed
	// leaves nothing a label cannot find (the chart would make the
	// sessions' one, labelled for Pod Security alone): the server's at
	// restricted, the sessions' at the chart's default level, baseline.
	t.Cleanup(func() { r.uninstall(t) })
	for ns, level := range map[string]string{r.Namespace: "restricted", r.SessionsNamespace: "baseline"} {
		o := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
			kubetest.LabelTest:                   "1",
			"pod-security.kubernetes.io/enforce": level,
			"pod-security.kubernetes.io/warn":    "restricted",
		}}}
		if _, err := c.CS.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}

	for name, data := range o.Secrets {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubetest.LabelTest: "1"}}, StringData: data}
		if _, err := c.CS.CoreV1().Secrets(r.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Secret %s/%s: %v", r.Namespace, name, err)
		}
	}

	settings := cli.New()
	settings.KubeConfig = os.Getenv(kubetest.EnvKubeconfig)
	settings.SetNamespace(r.Namespace)
	r.cfg = new(action.Configuration)
	if err := r.cfg.Init(settings.RESTClientGetter(), r.Namespace, "secret", func(string, ...any) {}); err != nil {
		t.Fatalf("helm: %v", err)
	}
	chrt, err := loader.Load(chartDir())
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	// Helm installs crds/ only when the cluster lacks them: a cluster kept
	// from a run of an older tree would hold an older Approval schema,
	// which the server refuses at its start.
	for _, crd := range chrt.CRDObjects() {
		c.ApplyCRD(t, filepath.Join(chartDir(), crd.Name)) // crds/approvals.yaml
	}

	tokens, policies, tenants := map[string]any{}, map[string]any{}, map[string]any{}
	for _, tn := range o.Tenants {
		tok := tn.Name + "-" + randomHex(16)
		r.Tokens[tn.Name] = tok
		tokens[tn.Name] = []any{server.HashToken(tok)}
		// The suites run many calls and sessions at once.
		tenants[tn.Name] = map[string]any{"maxConcurrentCalls": 512, "ratePerSecond": 1e6, "burst": 1e6, "maxMCPSessions": 1024}
		if tn.Policy != "" {
			policies[tn.Name+".yaml"] = tn.Policy
		}
	}
	vals := map[string]any{
		// One server unless a test asks for more (TestReplicas): TestChart
		// kills "the" server pod and the benchmarks measure one.
		"replicaCount": 1,
		"image":        map[string]any{"repository": ServerRepository, "tag": serverTag(), "pullPolicy": "IfNotPresent"},
		"sessions":     map[string]any{"namespace": r.SessionsNamespace, "createNamespace": false},
		"sandbox": map[string]any{
			"image":   kubetest.Image,
			"runtime": "runc",
			"labels":  map[string]any{kubetest.LabelTest: "1"},
			// A suite starts dozens of sessions at once: queue them for
			// longer than a person would wait.
			"maxCreating":     8,
			"createQueueWait": "5m",
		},
		"server":   map[string]any{"logLevel": "debug", "shutdownTimeoutSeconds": 5, "tenants": tenants},
		"tokens":   map[string]any{"tenants": tokens, "operatorTokens": []any{server.HashToken(r.Operator)}},
		"policies": policies,
	}
	vals = mergeValues(vals, o.Values)

	inst := action.NewInstall(r.cfg)
	inst.ReleaseName, inst.Namespace = r.Name, r.Namespace
	inst.Wait, inst.Timeout = true, 3*time.Minute
	start := time.Now()
	if _, err := inst.RunWithContext(ctx, chrt, vals); err != nil {
		r.Diagnose(t)
		t.Fatalf("helm install %s: %v", r.Name, err)
	}
	svc, err := c.CS.CoreV1().Services(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the release's Service: %v", err)
	}
	r.URL = fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	if err := r.waitReady(ctx, time.Minute); err != nil {
		r.Diagnose(t)
		t.Fatal(err)
	}
	t.Logf("release %s ready at %s in %s", r.Name, r.URL, time.Since(start).Round(time.Millisecond))
	return r
}

// mergeValues merges over into base: maps recursively, the rest replaced.
func mergeValues(base, over map[string]any) map[string]any {
	for k, v := range over {
		if vm, ok := v.(map[string]any); ok {
			if bm, ok := base[k].(map[string]any); ok {
				base[k] = mergeValues(bm, vm)
				continue
			}
		}
		base[k] = v
	}
	return base
}

// waitReady waits until /readyz answers 200 through the Service.
func (r *Release) waitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	// A new connection for every probe: a kept-alive one stays with the
	// backend it was routed to when it was opened (conntrack), so one
	// opened while the Service's rules still named a replaced pod's
	// address (kube-proxy catching up, the address reused by another pod)
	// would answer for that pod for as long as it lives (seen in CI: an
	// empty 404 for a whole minute while the new server answered 200).
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for time.Now().Before(deadline) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, _ := http.NewRequestWithContext(c, http.MethodGet, r.URL+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		cancel()
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s/readyz through the Service after %s: %v", r.URL, within, last)
}

// ServerPods returns the release's server pods not being deleted.
func (r *Release) ServerPods(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := r.c.CS.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=server,app.kubernetes.io/instance=" + r.Name})
	if err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].Name < live[j].Name })
	return live, nil
}

// ServerPod returns the release's running server pod (of a release of
// one replica).
func (r *Release) ServerPod(ctx context.Context) (*corev1.Pod, error) {
	live, err := r.ServerPods(ctx)
	if err != nil {
		return nil, err
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("%d server pods in %s, want 1", len(live), r.Namespace)
	}
	return &live[0], nil
}

// KillServer deletes the server pod (grace 0: as a node loss would end it,
// no drain) and waits until its replacement serves through the Service.
// It returns the new pod's name.
func (r *Release) KillServer(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	old, err := r.ServerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := r.c.CS.CoreV1().Pods(r.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("delete the server pod %s: %v", old.Name, err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p, err := r.ServerPod(ctx)
		if err == nil && p.UID != old.UID && podReady(p) {
			if err := r.waitReady(ctx, 2*time.Minute); err != nil {
				r.Diagnose(t)
				t.Fatal(err)
			}
			return p.Name
		}
		if time.Now().After(deadline) {
			r.Diagnose(t)
			t.Fatalf("no new ready server pod 3m after deleting %s (last: %v)", old.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ReadyServerPods waits (up to 3m) for n ready server pods, and returns
// them.
func (r *Release) ReadyServerPods(t testing.TB, n int) []corev1.Pod {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		pods, err := r.ServerPods(ctx)
		ready := slices.DeleteFunc(pods, func(p corev1.Pod) bool { return !podReady(&p) || p.Status.PodIP == "" })
		if err == nil && len(ready) == n {
			return ready
		}
		if time.Now().After(deadline) {
			r.Diagnose(t)
			t.Fatalf("%d ready server pods after 3m, want %d (%v)", len(ready), n, err)
		}
	}
}

// PodURL is a server pod's own address (this host is the node: it
// reaches the pod network).
func PodURL(p corev1.Pod) string {
	return fmt.Sprintf("http://%s:%d", p.Status.PodIP, p.Spec.Containers[0].Ports[0].ContainerPort)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SessionPods returns the names of the session pods of the release.
func (r *Release) SessionPods(ctx context.Context) ([]string, error) {
	pods, err := r.c.CS.CoreV1().Pods(r.SessionsNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Diagnose logs what an operator would look at when the release does not
// work: the pods of both namespaces with their state, the events, and the
// tail of the server's log.
func (r *Release) Diagnose(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, ns := range []string{r.Namespace, r.SessionsNamespace} {
		pods, err := r.c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("pods of %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			var cs []string
			for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
				st := "running"
				switch {
				case s.State.Waiting != nil:
					st = "waiting " + s.State.Waiting.Reason + ": " + s.State.Waiting.Message
				case s.State.Terminated != nil:
					st = fmt.Sprintf("terminated %s (exit %d): %s", s.State.Terminated.Reason, s.State.Terminated.ExitCode, s.State.Terminated.Message)
				}
				cs = append(cs, fmt.Sprintf("%s %s restarts=%d", s.Name, st, s.RestartCount))
			}
			t.Logf("pod %s/%s %s: %s", ns, p.Name, p.Status.Phase, strings.Join(cs, "; "))
		}
		evs, err := r.c.CS.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, e := range evs.Items {
				if e.Type != corev1.EventTypeNormal {
					t.Logf("event %s/%s %s %s: %s", ns, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
				}
			}
		}
	}
	pods, err := r.ServerPods(ctx)
	if err != nil {
		t.Logf("the server pods: %v", err)
	}
	for _, p := range pods {
		tail := int64(60)
		b, err := r.c.CS.CoreV1().Pods(r.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
		if err != nil {
			t.Logf("the log of %s: %v", p.Name, err)
		} else {
			t.Logf("the log of %s (last 60 lines):\n%s", p.Name, b)
		}
	}
}

// uninstall removes the release, its session pods and both namespaces.
func (r *Release) uninstall(t testing.TB) {
	if t.Failed() && r.cfg != nil {
		r.Diagnose(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zero := int64(0)
	if r.cfg != nil {
		un := action.NewUninstall(r.cfg)
		un.Timeout = time.Minute
		if _, err := un.Run(r.Name); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Errorf("helm uninstall %s: %v", r.Name, err)
		}
	}
	var errs []error
	for _, ns := range []string{r.SessionsNamespace, r.Namespace} {
		_ = r.c.CS.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if err := r.c.CS.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("delete the release's namespaces: %v", err)
	}
}

// Upgrade upgrades the release with vals merged over its values (helm
// upgrade --reuse-values) and waits for the rollout; it returns when the
// Deployment's new pods are all ready (old ones may still be leaving).
func (r *Release) Upgrade(t testing.TB, vals map[string]any) {
	t.Helper()
	chrt, err := loader.Load(chartDir())
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	up := action.NewUpgrade(r.cfg)
	up.Namespace, up.ReuseValues = r.Namespace, true
	up.Wait, up.Timeout = true, 4*time.Minute
	if _, err := up.RunWithContext(context.Background(), r.Name, chrt, vals); err != nil {
		r.Diagnose(t)
		t.Fatalf("helm upgrade %s: %v", r.Name, err)
	}
}
