package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/approvals"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/server"
)

// fakeCluster makes the kube backend use cs.
func fakeCluster(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	old := newClientset
	newClientset = func(config.Kube) (kubernetes.Interface, error) { return cs, nil }
	t.Cleanup(func() { newClientset = old })
}

// kubeConfigFile is a kube backend's config with a tenant, as the chart
// writes it.
func kubeConfigFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(f, []byte(`backend: kube
server:
  listen: 127.0.0.1:0
  tenants:
    acme: {tokens: [`+server.HashToken("t")+`]}
kube:
  namespace: sessions
  release: prod
  agentImage: shellbox:test
  serverSelector: {app.kubernetes.io/instance: prod}
  serverNamespace: shellbox
`), 0o644)
	return f
}

// forbid makes cs refuse verb on resource as the RBAC authorizer does.
func forbid(cs *fake.Clientset, verb, resource string) {
	cs.PrependReactor(verb, resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "",
			fmt.Errorf("User %q cannot %s resource %q in the namespace %q", "system:serviceaccount:shellbox:prod", verb, resource, a.GetNamespace()))
	})
}

// The kube backend is opened from package config's kube.* settings; at a
// server's start it checks its RBAC and keeps the session NetworkPolicy.
func TestKubeOpenAndPrepare(t *testing.T) {
	isolate(t)
	cs := fake.NewClientset()
	fakeCluster(t, cs)
	cfg, err := config.Load(nil, kubeConfigFile(t))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := openRuntime(cfg, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	kr := rt.(kubeRuntime)
	got := kr.Config()
	if got.Namespace != "sessions" || got.Release != "prod" || got.AgentImage != "shellbox:test" ||
		got.RuntimeClasses[sandbox.RuntimeRunsc] != "gvisor" || got.ServerNamespace != "shellbox" || got.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("runtime config: %+v", got)
	}
	ctx := context.Background()
	for range 2 { // idempotent
		if err := prepareKube(ctx, kr); err != nil {
			t.Fatal(err)
		}
	}
	np, err := cs.NetworkingV1().NetworkPolicies("sessions").Get(ctx, kube.NetworkPolicyName("prod"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("network policy: %v", err)
	}
	if from := np.Spec.Ingress[0].From[0]; from.PodSelector.MatchLabels["app.kubernetes.io/instance"] != "prod" ||
		from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "shellbox" {
		t.Errorf("ingress from %+v", from)
	}
}

// Missing RBAC stops a server at its start, naming the resource.
func TestKubeServeRBAC(t *testing.T) {
	for _, tc := range []struct{ verb, resource, want string }{
		{"list", "pods", "no RBAC for pods in namespace sessions"},
		{"create", "networkpolicies", "no RBAC for networkpolicies in namespace sessions"},
	} {
		t.Run(tc.resource, func(t *testing.T) {
			isolate(t)
			cs := fake.NewClientset()
			forbid(cs, tc.verb, tc.resource)
			fakeCluster(t, cs)
			_, errs, code := cli(t, "", "serve", "--config", kubeConfigFile(t))
			if code == 0 || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "kube backend") {
				t.Errorf("exit %d, stderr %q, want %q", code, errs, tc.want)
			}
		})
	}
}

// Without kube.kubeconfig outside a pod, or with a kubeconfig that does
// not load, the error says which.
func TestKubeClusterConfig(t *testing.T) {
	isolate(t)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	os.Unsetenv("KUBERNETES_SERVICE_HOST")
	cfg := config.Config{Backend: "kube"}
	cfg.Kube.Namespace, cfg.Kube.AgentImage = "s", "i"
	if _, err := openRuntime(cfg, "", nil); err == nil || !strings.Contains(err.Error(), "kube.kubeconfig is empty and this is not a pod") {
		t.Errorf("in-cluster: %v", err)
	}
	cfg.Kube.Kubeconfig = filepath.Join(t.TempDir(), "none")
	if _, err := openRuntime(cfg, "", nil); err == nil || !strings.Contains(err.Error(), "kube.kubeconfig "+cfg.Kube.Kubeconfig) {
		t.Errorf("kubeconfig: %v", err)
	}
}

// `sessions ls` and `sessions rm` act on the release's session pods.
func TestKubeSessions(t *testing.T) {
	isolate(t)
	pod := func(name, tenant, session, owner string) *corev1.Pod {
		return &corev1.Pod{
			// A uid, as every pod the API server returns has: Remove's
			// mark is conditioned on it.
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sessions", UID: types.UID("uid-" + name),
				Labels: map[string]string{sandbox.LabelManaged: "true"},
				Annotations: map[string]string{kube.AnnotationTenant: tenant, kube.AnnotationSession: session,
					kube.AnnotationOwner: owner, kube.AnnotationRuntime: "runsc"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	cs := fake.NewClientset(pod(kube.PodName("acme", "s1"), "acme", "s1", "prod"), pod("other", "acme", "s2", "staging"))
	fakeCluster(t, cs)
	file := kubeConfigFile(t)
	out, errs, code := cli(t, "", "sessions", "ls", "--config", file)
	if code != 0 || !strings.Contains(out, "acme") || !strings.Contains(out, "s1") || !strings.Contains(out, "runsc") {
		t.Fatalf("ls: exit %d, %q %q", code, out, errs)
	}
	if strings.Contains(out, "s2") {
		t.Errorf("ls shows another release's session: %q", out)
	}
	out, errs, code = cli(t, "", "sessions", "rm", "--config", file, "--tenant", "acme", "s1")
	if code != 0 || !strings.Contains(out, "removed acme/s1") {
		t.Fatalf("rm: exit %d, %q %q", code, out, errs)
	}
	if _, err := cs.CoreV1().Pods("sessions").Get(context.Background(), kube.PodName("acme", "s1"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod after rm: %v", err)
	}
}

// `serve` with the kube backend starts on a cluster that grants its RBAC:
// ready (the API server answers its pod list), the NetworkPolicy made.
func TestKubeServe(t *testing.T) {
	isolate(t)
	cs := fake.NewClientset()
	fakeCluster(t, cs)
	s := startServe(t, kubeConfigFile(t))
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s", path, resp.Status)
		}
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("sessions").Get(context.Background(), kube.NetworkPolicyName("prod"), metav1.GetOptions{}); err != nil {
		t.Errorf("network policy: %v", err)
	}
	s.stop()
}

// Two `serve` replicas of one release compete for its Lease (identity:
// POD_NAME and a suffix): one leads (shellbox_leader 1), the other waits;
// the leader, stopped, releases the Lease and the other takes over.
func TestKubeServeLeader(t *testing.T) {
	isolate(t)
	t.Setenv("POD_NAME", "prod-5c7d-q8")
	cs := fake.NewClientset()
	fakeCluster(t, cs)
	file := kubeConfigFile(t)
	replicas := []*served{startServe(t, file), startServe(t, file)}
	holder := func() string {
		l, err := cs.CoordinationV1().Leases("sessions").Get(context.Background(), "prod-shellbox-leader", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return *l.Spec.HolderIdentity
	}
	leading := func(s *served) bool {
		resp, err := http.Get(s.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		switch {
		case strings.Contains(string(body), "\nshellbox_leader 1\n"):
			return true
		case strings.Contains(string(body), "\nshellbox_leader 0\n"):
			return false
		}
		t.Fatalf("no shellbox_leader in /metrics:\n%s", body)
		return false
	}
	// leader waits (10s) until exactly one of live leads, and returns it.
	leader := func(live ...*served) *served {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var lead []*served
			for _, s := range live {
				if leading(s) {
					lead = append(lead, s)
				}
			}
			if len(lead) > 1 {
				t.Fatal("two replicas lead")
			}
			if len(lead) == 1 && strings.HasPrefix(holder(), "prod-5c7d-q8-") {
				return lead[0]
			}
		}
		t.Fatalf("no replica leads within 10s (lease holder %q)", holder())
		return nil
	}
	first := leader(replicas...)
	firstID := holder()
	other := replicas[0]
	if other == first {
		other = replicas[1]
	}
	first.stop()
	if h := holder(); h == firstID {
		t.Fatalf("the stopped leader still holds the lease")
	}
	leader(other)
	if h := holder(); h == firstID || h == "" {
		t.Errorf("lease holder %q after the takeover", h)
	}
	other.stop()
	if h := holder(); h != "" {
		t.Errorf("lease holder %q after both stopped, want none (released)", h)
	}
}

// On Kubernetes the warm-pool claims are the release's, kept on its pods
// (kube.Claims), not in sandbox.stateDir: a server pod's emptyDir,
// gone with it and unseen by other replicas.
func TestKubeClaimsOnPods(t *testing.T) {
	isolate(t)
	fakeCluster(t, fake.NewClientset())
	cfg, err := config.Load(nil, kubeConfigFile(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sandbox.StateDir = t.TempDir()
	rt, err := openRuntime(cfg, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := claimsOf(cfg, rt)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := claims.(*kube.Claims); !ok {
		t.Fatalf("kube backend's claims: %T, want *kube.Claims", claims)
	}
	if _, err := os.Stat(filepath.Join(cfg.Sandbox.StateDir, "claims")); !os.IsNotExist(err) {
		t.Fatalf("a claims directory in sandbox.stateDir: %v", err)
	}
}

// On kube with policies the asks are the release's Approval objects
// (kube.approvals cluster, the default); "memory" keeps them in the
// process, as do the other backends. A cluster without the CRD stops the
// server at its start, naming it.
func TestKubeApprovalStore(t *testing.T) {
	isolate(t)
	var dc *dynamicfake.FakeDynamicClient
	old := newDynamicClient
	newDynamicClient = func(config.Kube) (dynamic.Interface, error) { return dc, nil }
	t.Cleanup(func() { newDynamicClient = old })
	cfg, err := config.Load(nil, kubeConfigFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kube.Approvals != config.ApprovalsCluster {
		t.Errorf("kube.approvals defaults to %q", cfg.Kube.Approvals)
	}
	cfg.Policies.Dir = t.TempDir()
	ctx := context.Background()

	dc = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{approvals.GVR: "ApprovalList"})
	// The store's start checks the CRD by a dry-run create, which the fake
	// would store.
	dc.PrependReactor("create", "approvals", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if slices.Contains(a.(k8stesting.CreateActionImpl).CreateOptions.DryRun, metav1.DryRunAll) {
			return true, a.(k8stesting.CreateAction).GetObject().DeepCopyObject(), nil
		}
		return false, nil, nil
	})
	st, closeStore, err := approvalStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if _, ok := st.(*approvals.Store); !ok {
		t.Errorf("cluster: store %T", st)
	}
	now := time.Now()
	if _, err := st.Add(ctx, policies.Approval{Tenant: "acme", Session: "s", Tool: "bash", Command: "git push",
		Rule: "push", Reason: "r", Created: now, Deadline: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	l, err := dc.Resource(approvals.GVR).Namespace("sessions").List(ctx, metav1.ListOptions{LabelSelector: kube.LabelRelease + "=prod"})
	if err != nil || len(l.Items) != 1 {
		t.Errorf("Approval objects in sessions: %v, %v", l, err)
	}

	for _, c := range []func(*config.Config){
		func(c *config.Config) { c.Kube.Approvals = config.ApprovalsMemory },
		func(c *config.Config) { c.Policies.Dir = "" },
		func(c *config.Config) { c.Backend = "docker" },
	} {
		cfg := cfg
		c(&cfg)
		if st, _, err := approvalStore(ctx, cfg, slog.New(slog.DiscardHandler)); st != nil || err != nil {
			t.Errorf("%+v: store %T, %v; want the engine's memory", cfg.Kube, st, err)
		}
	}

	dc = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{approvals.GVR: "ApprovalList"})
	dc.PrependReactor("list", "approvals", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(approvals.GVR.GroupResource(), "")
	})
	if _, _, err := approvalStore(ctx, cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "CustomResourceDefinition approvals.shellbox.dev is not installed") {
		t.Errorf("no CRD: %v", err)
	}
}
