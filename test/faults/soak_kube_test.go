package faults_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/enginetest"
)

// kubeSoak stands for the cluster in soakTargets; soak replaces it with
// kubeSoakEngine, whose namespace is the target's own.
var kubeSoak = enginetest.Engine{Name: "kube"}

// labelSoak marks a namespace the soak made (its value the target,
// kube-runc or kube-runsc): a crashed run's leftovers are
// `kubectl get ns -l org.shellbox.soak`.
const labelSoak = "org.shellbox.soak"

// kubeSoakSessions is a cluster target's sessions unless
// SHELLBOX_SOAK_SESSIONS says: a session pod takes 2-6 s to start on the
// single-node cluster, and every 36th call needs a new one.
const kubeSoakSessions = 8

// kubeSoakEngine is the cluster of SHELLBOX_KUBECONFIG as an engine of
// the soak: a namespace of its own (kubetest.Namespace, labelled
// labelSoak, deleted with everything in it when t ends), where a `shellbox
// serve` on this host (backend kube, pods reached at their IPs) makes the
// session pods of a release of its own, and no NetworkPolicy
// (kube.serverSelector empty: the server is not a pod); asks for approval
// in memory (one process). It returns the engine, the cluster and the
// namespace; kubeServed then fits newServed's config to the backend.
func kubeSoakEngine(t *testing.T, tg soakTarget) (enginetest.Engine, *kubetest.Cluster, string) {
	t.Helper()
	c := kubetest.Connect(t)
	ns := c.Namespace(t)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, labelSoak, strings.ReplaceAll(tg.name, "/", "-"))
	if _, err := c.CS.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("label namespace %s: %v", ns, err)
	}
	kc := kubetest.Config(ns)
	e := enginetest.Engine{
		Name: kubeSoak.Name,
		Runtime: func(t testing.TB, _, _, runtime string) sandbox.Runtime {
			return c.New(t, kc, runtime)
		},
		Config: func(testing.TB) string {
			return fmt.Sprintf("backend: kube\nkube:\n  kubeconfig: %s\n  namespace: %s\n  release: %s\n  agentImage: %s\n  readyTimeout: 2m\n  approvals: memory\n",
				os.Getenv(kubetest.EnvKubeconfig), ns, kc.Release, kc.AgentImage)
		},
	}
	return e, c, ns
}

// kubeServed fits s, newServed's on the kube engine of namespace ns, to
// the backend: its sessions' owner is the release (kube.release;
// sandbox.owner is refused).
func kubeServed(t *testing.T, s *served, ns string) {
	t.Helper()
	b, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "  owner: ") {
			lines = append(lines, l)
		}
	}
	if err := os.WriteFile(s.cfg, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	s.owner = kubetest.Config(ns).Release
}

// kubeCounts are the soak's objects in its namespace.
type kubeCounts struct {
	pods    int // session pods (any phase, terminating too)
	secrets int // Secrets (a session pod's token; claim locks)
	other   int // ConfigMaps but the namespace's CA, Services, PVCs, NetworkPolicies
	events  int // the event relay's Events
	// eventsOldest is the age of the oldest of them.
	eventsOldest time.Duration
}

// kubeHost returns the count of the soak's objects in namespace ns.
func kubeHost(t *testing.T, c *kubetest.Cluster, ns string) func() kubeCounts {
	return func() kubeCounts {
		ctx, cancel := context.WithTimeout(context.Background(), hung)
		defer cancel()
		var k kubeCounts
		pods, err := c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing pods of %s: %v", ns, err)
		}
		k.pods = len(pods.Items)
		secrets, err := c.CS.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing secrets of %s: %v", ns, err)
		}
		k.secrets = len(secrets.Items)
		cms, err := c.CS.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing configmaps of %s: %v", ns, err)
		}
		for _, cm := range cms.Items {
			if cm.Name != "kube-root-ca.crt" {
				k.other++
			}
		}
		svcs, err := c.CS.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing services of %s: %v", ns, err)
		}
		pvcs, err := c.CS.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing PVCs of %s: %v", ns, err)
		}
		nps, err := c.CS.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing network policies of %s: %v", ns, err)
		}
		k.other += len(svcs.Items) + len(pvcs.Items) + len(nps.Items)
		evs, err := c.CS.CoreV1().Events(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=shellbox"})
		if err != nil {
			t.Fatalf("listing events of %s: %v", ns, err)
		}
		k.events = len(evs.Items)
		for _, e := range evs.Items {
			if !e.CreationTimestamp.IsZero() {
				k.eventsOldest = max(k.eventsOldest, time.Since(e.CreationTimestamp.Time))
			}
		}
		return k
	}
}
