package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/kube"
	"github.com/shellbox/shellbox/sandbox/kube/kubetest"
)

// TestClusterClaims runs replicas of one release on the real cluster, each
// a Manager with the release's claims (kept on the pods), and a pool of
// one: session A claims the pooled pod on one replica and writes to its
// workspace; the other replica, which adopted the same pod into its own
// pool, gives session B a new pod (and a claim written on a read from
// before A's is refused by the API server); a server that replaced the
// first (a fresh Manager, nothing in memory, no directory shared) finds
// A's pod as A's, with what A wrote, and gives B B's, never A's.
func TestClusterClaims(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.Namespace(t)
	cfg := kubetest.Config(ns)
	c.New(t, cfg, sandbox.RuntimeRunc)
	ctx := context.Background()
	newManager := func() *sandbox.Manager {
		t.Helper()
		rt := c.New(t, cfg, "")
		m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: cfg.Release, Claims: rt.Claims()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Adopt(ctx); err != nil {
			t.Fatalf("adopt: %v", err)
		}
		return m
	}
	tmpl := kubetest.Spec(t, "claims", "template", cfg.Release, sandbox.RuntimeRunc)

	m1 := newManager()
	if rep, err := m1.Fill(ctx, []sandbox.PoolTarget{{Template: tmpl, Size: 1}}); err != nil || rep.Created != 1 {
		t.Fatalf("fill: %+v, %v", rep, err)
	}
	m2 := newManager()
	if ps := m2.Pools(); len(ps) != 1 || ps[0].Ready != 1 {
		t.Fatalf("the second replica's pools: %+v, want the pooled pod adopted", ps)
	}

	pl, err := c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pl.Items) != 1 {
		t.Fatalf("pods after the fill: %v, %v", pl, err)
	}
	before := pl.Items[0] // as every replica read it, unclaimed

	a := tmpl.Clone()
	a.Session = "A"
	sbA, err := m1.Ensure(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if !sandbox.IsPooled(sbA.PoolName) {
		t.Fatalf("A got %+v, want the pooled pod", sbA)
	}
	kubetest.Exec(t, sbA, "echo A > /workspace/f")
	p, err := c.CS.CoreV1().Pods(ns).Get(ctx, sbA.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Annotations[kube.AnnotationClaimedBy] != "A" || p.Labels[kube.LabelClaimedBy] != "A" {
		t.Fatalf("the claimed pod's annotations %v, labels %v", p.Annotations, p.Labels)
	}

	// The API server takes a patch's resourceVersion as a precondition: a
	// claim written on the read from before A's is refused.
	stale := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:"Z"}}}`, before.ResourceVersion, kube.AnnotationClaimedBy)
	_, err = c.CS.CoreV1().Pods(ns).Patch(ctx, before.Name, types.MergePatchType, []byte(stale), metav1.PatchOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("a claim patched on a stale read: %v, want a Conflict", err)
	}

	b := tmpl.Clone()
	b.Session = "B"
	sbB, err := m2.Ensure(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if sbB.ID == sbA.ID {
		t.Fatalf("the second replica handed A's pod %s to B", sbA.ID)
	}
	if got := kubetest.Exec(t, sbB, "cat /workspace/f 2>/dev/null || echo none"); strings.TrimSpace(got) != "none" {
		t.Fatalf("B's workspace has %q: A's file", got)
	}

	m3 := newManager() // the first server, replaced
	gotA, err := m3.Ensure(ctx, a)
	if err != nil || gotA.ID != sbA.ID || gotA.PoolName != sbA.PoolName {
		t.Fatalf("A after the server was replaced: %+v, %v, want pod %s", gotA, err, sbA.ID)
	}
	if got := kubetest.Exec(t, gotA, "cat /workspace/f"); strings.TrimSpace(got) != "A" {
		t.Fatalf("A's workspace after the server was replaced: %q", got)
	}
	gotB, err := m3.Ensure(ctx, b)
	if err != nil || gotB.ID != sbB.ID {
		t.Fatalf("B after the server was replaced: %+v, %v, want pod %s", gotB, err, sbB.ID)
	}

	if err := m3.Remove(ctx, "claims", "A"); err != nil {
		t.Fatal(err)
	}
	if cs, err := c.New(t, cfg, "").Claims().List(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("claims after A was removed: %+v, %v", cs, err)
	}
}
