package kube_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
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

// TestClusterPoolRace runs both warm-pool races on the real cluster: two
// replicas of one release (Managers with the release's claims), each having
// filled a pooled pod and adopted the other's, serve the first call of one
// new session at the same instant, each claiming another pod first: both
// hand out the same pod, which the session's claim lock names. Then each
// drains the pool (the template changed): the pod the session holds,
// still on the losing replica's list of ready pods, survives, the other
// goes. The API server itself refuses a delete conditioned on the
// resourceVersion read before the claim (what Retire relies on).
func TestClusterPoolRace(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.Namespace(t)
	cfg := kubetest.Config(ns)
	c.New(t, cfg, sandbox.RuntimeRunc)
	ctx := context.Background()
	tmpl := kubetest.Spec(t, "race", "template", cfg.Release, sandbox.RuntimeRunc)

	ms := replicaManagers(t, c, cfg)
	var fills sync.WaitGroup
	for _, m := range ms {
		fills.Add(1)
		go func() {
			defer fills.Done()
			if rep, err := m.Fill(ctx, []sandbox.PoolTarget{{Template: tmpl, Size: 1}}); err != nil || rep.Created != 1 {
				t.Errorf("fill: %+v, %v", rep, err)
			}
		}()
	}
	fills.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, m := range ms {
		if _, err := m.Adopt(ctx); err != nil {
			t.Fatalf("adopt: %v", err)
		}
		if ps := m.Pools(); len(ps) != 1 || ps[0].Ready != 2 {
			t.Fatalf("a replica's pools: %+v, want both pods ready", ps)
		}
	}
	pl, err := c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pl.Items) != 2 {
		t.Fatalf("pods after the fills: %v, %v", pl, err)
	}
	before := map[string]string{} // name -> resourceVersion, unclaimed
	for _, p := range pl.Items {
		before[p.Name] = p.ResourceVersion
	}

	s := tmpl.Clone()
	s.Session = "S"
	var got [2]sandbox.Sandbox
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := m.Ensure(ctx, s)
			if err != nil {
				t.Errorf("replica %d: Ensure(S): %v", i, err)
			}
			got[i] = sb
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if got[0].ID != got[1].ID || got[0].PoolName == "" {
		t.Fatalf("session S got pod %s on one replica and %s on the other", got[0].ID, got[1].ID)
	}
	held := got[0].ID
	lock, err := c.CS.CoreV1().Secrets(ns).Get(ctx, kube.ClaimLockName("race", "S"), metav1.GetOptions{})
	if err != nil || lock.Annotations[kube.AnnotationClaimPooled] != got[0].PoolName ||
		len(lock.OwnerReferences) != 1 || lock.OwnerReferences[0].Name != held {
		t.Fatalf("S's claim lock: %+v, %v", lock, err)
	}
	kubetest.Exec(t, got[1], "echo S > /workspace/f")

	// A delete conditioned on the read from before the claim is refused.
	rv := before[held]
	err = c.CS.CoreV1().Pods(ns).Delete(ctx, held, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("a delete of the claimed pod conditioned on its unclaimed resourceVersion: %v, want a Conflict", err)
	}

	// The losing replica listed S's pod as ready: its drain learns of the
	// claim from the pods it lists first (Fill's sync) or, had the claim
	// landed after that, from the refused conditioned delete (Retire).
	for _, m := range ms {
		rep, err := m.Fill(ctx, nil) // no policy wants the pool any more
		if err != nil {
			t.Fatalf("drain: %+v, %v", rep, err)
		}
	}
	pl, err = c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pl.Items) != 1 || pl.Items[0].Name != held || pl.Items[0].Annotations[kube.AnnotationClaimedBy] != "S" {
		t.Fatalf("pods after the drains: %v, %v; want S's %s only", pl, err, held)
	}
	if out := kubetest.Exec(t, got[0], "cat /workspace/f"); strings.TrimSpace(out) != "S" {
		t.Fatalf("S's workspace after the drains: %q", out)
	}
	if err := ms[0].Remove(ctx, "race", "S"); err != nil {
		t.Fatal(err)
	}
}

// TestClusterColdStartRace: on the real cluster, a new session's first
// calls reach two replicas at once; one finds no pooled pod for its
// template (another env) and starts the session cold, the other claims the
// pooled pod: both replicas get the same one pod, the session has no
// second, and its claim lock is owned by that pod, so the garbage
// collector takes it with the pod once the session is removed.
func TestClusterColdStartRace(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.Namespace(t)
	cfg := kubetest.Config(ns)
	c.New(t, cfg, sandbox.RuntimeRunc)
	ctx := context.Background()
	tmpl := kubetest.Spec(t, "cold", "template", cfg.Release, sandbox.RuntimeRunc)
	ms := replicaManagers(t, c, cfg)
	wins := map[bool]int{}
	for round := range 3 {
		if rep, err := ms[1].Fill(ctx, []sandbox.PoolTarget{{Template: tmpl, Size: 1}}); err != nil {
			t.Fatalf("fill: %+v, %v", rep, err)
		}
		session := fmt.Sprintf("C%d", round)
		specs := [2]sandbox.Spec{tmpl.Clone(), tmpl.Clone()}
		specs[0].Env = append(specs[0].Env, "COLD=1") // no pool has this template
		var got [2]sandbox.Sandbox
		var wg sync.WaitGroup
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := specs[i]
				s.Session = session
				if i == 1 {
					// The claimer later each round: the cold start's
					// lock comes first at some point.
					time.Sleep(time.Duration(round) * 100 * time.Millisecond)
				}
				sb, err := m.Ensure(ctx, s)
				if err != nil {
					t.Errorf("round %d: replica %d: Ensure(%s): %v", round, i, session, err)
				}
				got[i] = sb
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if got[0].ID != got[1].ID {
			t.Fatalf("round %d: session %s got pod %s on one replica and %s on the other", round, session, got[0].ID, got[1].ID)
		}
		pl, err := c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var its []string
		for _, p := range pl.Items {
			if p.Annotations[kube.AnnotationSession] == session || p.Annotations[kube.AnnotationClaimedBy] == session {
				its = append(its, p.Name)
			}
		}
		if len(its) != 1 {
			t.Fatalf("round %d: session %s's pods: %v, want one", round, session, its)
		}
		lock, err := c.CS.CoreV1().Secrets(ns).Get(ctx, kube.ClaimLockName("cold", session), metav1.GetOptions{})
		if err != nil || len(lock.OwnerReferences) != 1 || lock.OwnerReferences[0].Name != got[0].ID {
			t.Fatalf("round %d: %s's claim lock: %+v, %v; want it owned by pod %s", round, session, lock, err, got[0].ID)
		}
		wins[got[0].PoolName == ""]++
		if err := ms[0].Remove(ctx, "cold", session); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			_, err := c.CS.CoreV1().Secrets(ns).Get(ctx, lock.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %s's claim lock a minute after its pod went: %v", round, session, err)
			}
		}
	}
	t.Logf("3 rounds: cold start won %d, claim won %d", wins[true], wins[false])
	if wins[true] == 0 {
		t.Error("the cold start never won: the lock's cold side went untested")
	}
	if _, err := ms[1].Fill(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// replicaManagers returns two replicas of cfg's release: Managers on
// runtimes of their own, with the release's claims (kept on the pods).
func replicaManagers(t *testing.T, c *kubetest.Cluster, cfg kube.Config) [2]*sandbox.Manager {
	t.Helper()
	var ms [2]*sandbox.Manager
	for i := range ms {
		rt := c.New(t, cfg, "")
		m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: cfg.Release, Claims: rt.Claims()})
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	return ms
}
