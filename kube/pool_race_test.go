package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellbox/shellbox/sandbox"
)

// Retire read the pod unclaimed, and a claim lands before its delete: the
// delete, conditioned on the resourceVersion read, conflicts, the pod read
// again is claimed, and Retire says so (ErrAlreadyExists) and leaves it.
// An unclaimed pod is deleted; a gone one is retired already.
func TestRetireLosesToClaim(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	r := c.runtime(t, nil)
	cl := r.Claims()
	ctx := context.Background()
	p1, p2 := c.pooledPod(t, r, 1), c.pooledPod(t, r, 2)
	name := PodName("acme", p1)

	before, err := c.pod(t, name) // as the leader listed it: unclaimed
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Claim(ctx, "acme", p1, "s1"); err != nil {
		t.Fatal(err)
	}
	var stale atomic.Bool
	c.cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == name && stale.CompareAndSwap(false, true) {
			return true, before.DeepCopy(), nil
		}
		return false, nil, nil
	})
	if err := cl.Retire(ctx, "acme", p1); !errors.Is(err, sandbox.ErrAlreadyExists) {
		t.Fatalf("Retire of a pod claimed since it was read: %v, want ErrAlreadyExists", err)
	}
	if !stale.Load() {
		t.Fatal("Retire never read the stale pod: the test proves nothing")
	}
	if p, err := c.pod(t, name); err != nil || p.Annotations[AnnotationClaimedBy] != "s1" {
		t.Fatalf("the claimed pod after Retire: %v, %v", p, err)
	}

	if err := cl.Retire(ctx, "acme", p2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pod(t, PodName("acme", p2)); !apierrors.IsNotFound(err) {
		t.Fatalf("a retired unclaimed pod: %v, want it deleted", err)
	}
	if _, err := cl.Claim(ctx, "acme", p2, "s2"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("claiming a retired pod: %v, want ErrNotFound", err)
	}
	if err := cl.Retire(ctx, "acme", p2); err != nil {
		t.Fatalf("retiring a gone pod: %v", err)
	}
}

// Two replicas claim different pooled pods for one session at once: the
// session's claim lock, created by one of them, names one pod, and both
// end up with it; the other pod stays unclaimed.
func TestClaimOnePerSession(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	r := c.runtime(t, nil)
	ctx := context.Background()
	p1, p2 := c.pooledPod(t, r, 1), c.pooledPod(t, r, 2)

	a, b := c.runtime(t, nil).Claims(), c.runtime(t, nil).Claims()
	var got [2]string
	var errs [2]error
	var wg sync.WaitGroup
	for i, cl := range []*Claims{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = cl.Claim(ctx, "acme", []string{p1, p2}[i], "s1")
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || got[0] != got[1] {
		t.Fatalf("claims for one session: %q, %v and %q, %v; want one pod for both", got[0], errs[0], got[1], errs[1])
	}
	cs, err := a.List(ctx)
	if err != nil || len(cs) != 1 || cs[0].Pooled != got[0] || cs[0].Session != "s1" {
		t.Fatalf("claims: %+v, %v; want s1 on %s only", cs, err, got[0])
	}
	lock, err := c.secret(t, ClaimLockName("acme", "s1"))
	if err != nil || lock.Annotations[AnnotationClaimPooled] != got[0] || len(lock.OwnerReferences) != 1 ||
		lock.OwnerReferences[0].Name != PodName("acme", got[0]) {
		t.Fatalf("the session's claim lock: %+v, %v", lock, err)
	}
	// The other pod is still anyone's.
	other := map[string]string{p1: p2, p2: p1}[got[0]]
	if held, err := a.Claim(ctx, "acme", other, "s2"); err != nil || held != other {
		t.Fatalf("the unused pod for another session: %q, %v", held, err)
	}
}

// A lock left by a claim whose pod went (removed, or never claimed: a crash
// between the lock and the patch, then the pod claimed by another session)
// does not keep the session from claiming.
func TestClaimStaleLock(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	r := c.runtime(t, nil)
	cl := r.Claims()
	ctx := context.Background()
	p1, p2, p3 := c.pooledPod(t, r, 1), c.pooledPod(t, r, 2), c.pooledPod(t, r, 3)
	if held, err := cl.Claim(ctx, "acme", p1, "s1"); err != nil || held != p1 {
		t.Fatalf("claim: %q, %v", held, err)
	}
	// s1's pod goes (the garbage collector has not deleted its lock yet).
	if err := r.Remove(ctx, PodName("acme", p1)); err != nil {
		t.Fatal(err)
	}
	if held, err := cl.Claim(ctx, "acme", p2, "s1"); err != nil || held != p2 {
		t.Fatalf("claim after the session's pod went: %q, %v, want %s", held, err, p2)
	}
	// A lock naming a pod another session claimed since.
	pod3, err := c.pod(t, PodName("acme", p3))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := cl.lock(ctx, "acme", "s9", p3, pod3); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Claim(ctx, "acme", p3, "s8"); err != nil {
		t.Fatal(err)
	}
	p4 := c.pooledPod(t, r, 4)
	if held, err := cl.Claim(ctx, "acme", p4, "s9"); err != nil || held != p4 {
		t.Fatalf("claim with a lock naming another session's pod: %q, %v, want %s", held, err, p4)
	}
}

// replicaSet is the ready pooled pods of two Managers of one release, both
// knowing every pod but in different orders, so that each claims another
// first.
type replicaSet struct {
	ms   [2]*sandbox.Manager
	tmpl sandbox.Spec
}

func newReplicas(t *testing.T, c *cluster, perReplica int) replicaSet {
	t.Helper()
	ctx := context.Background()
	var rs replicaSet
	rs.tmpl = testSpec(t)
	for i := range rs.ms {
		rt := c.runtime(t, nil)
		m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "prod", Claims: rt.Claims()})
		if err != nil {
			t.Fatal(err)
		}
		rs.ms[i] = m
	}
	for i, m := range rs.ms {
		// A Fill counts the pooled pods already there (the pools are the
		// cluster's): the second makes perReplica more.
		if rep, err := m.Fill(ctx, []sandbox.PoolTarget{{Template: rs.tmpl, Size: (i + 1) * perReplica}}); err != nil || rep.Created != perReplica {
			t.Fatalf("fill: %+v, %v", rep, err)
		}
	}
	// Adopt adds the other's pods after each one's own.
	for _, m := range rs.ms {
		if _, err := m.Adopt(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// Two replicas of a release (Managers on one fake API server that checks
// resourceVersions and preconditions) serve the first calls of the same
// new sessions at the same instant, each knowing every pooled pod but
// claiming another first, while the leader drains most of the pool (a
// pool that shrank). Over many rounds: every session gets one sandbox on
// both replicas, one pod carries its claim, and no pod a session holds is
// removed by the drain.
func TestPoolReplicasRace(t *testing.T) {
	const rounds, perReplica, keep = 25, 3, 3
	sessions := []string{"s1", "s2"}
	ctx := context.Background()
	var drained, spared int
	for round := range rounds {
		c := newCluster(t)
		c.withResourceVersions()
		rs := newReplicas(t, c, perReplica)

		got := make([][2]sandbox.Sandbox, len(sessions))
		var rep sandbox.FillReport
		var fillErr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range sessions {
			for j, m := range rs.ms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					spec := rs.tmpl.Clone()
					spec.Session = s
					sb, err := m.Ensure(ctx, spec)
					if err != nil {
						t.Errorf("round %d: Ensure(%s) on replica %d: %v", round, s, j, err)
					}
					got[i][j] = sb
				}()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// The leader (replica 0) shrinks the pool: its newest ready
			// pods, the other replica's first picks, go.
			rep, fillErr = rs.ms[0].Fill(ctx, []sandbox.PoolTarget{{Template: rs.tmpl, Size: keep}})
		}()
		close(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if fillErr != nil {
			t.Fatalf("round %d: drain: %v", round, fillErr)
		}
		drained += rep.Removed
		spared += rep.Claimed

		cs, err := rs.ms[0].List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, sb := range cs {
			per[sb.Session]++
		}
		for i, s := range sessions {
			a, b := got[i][0], got[i][1]
			if a.ID != b.ID {
				t.Fatalf("round %d: session %s has two sandboxes: %s on one replica, %s on the other", round, s, a.ID, b.ID)
			}
			if per[s] != 1 {
				t.Fatalf("round %d: session %s holds %d sandboxes, want 1 (%+v)", round, s, per[s], cs)
			}
			p, err := c.pod(t, a.ID)
			if err != nil {
				t.Fatalf("round %d: session %s's pod %s: %v (removed by the drain?)", round, s, a.ID, err)
			}
			if p.Annotations[AnnotationClaimedBy] != s {
				t.Fatalf("round %d: session %s's pod is claimed by %q", round, s, p.Annotations[AnnotationClaimedBy])
			}
		}
	}
	t.Logf("%d rounds: %d pooled pods drained, %d spared because a session had claimed them", rounds, drained, spared)
	if drained == 0 {
		t.Error("the drain never removed a pod: the test proves nothing")
	}
}

// The drain race made deterministic: a pod the leader lists as ready that
// another replica has claimed survives the drain, and the drain removes
// the rest.
func TestPoolDrainSparesClaimed(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	rs := newReplicas(t, c, 1)
	ctx := context.Background()
	s := rs.tmpl.Clone()
	s.Session = "s1"
	sb, err := rs.ms[1].Ensure(ctx, s) // the replica's first pick: its own pod
	if err != nil || sb.PoolName == "" {
		t.Fatalf("claim: %+v, %v", sb, err)
	}
	other := rs.tmpl.Clone()
	other.Image = "another:1"
	rep, err := rs.ms[0].Fill(ctx, []sandbox.PoolTarget{{Template: other, Size: 0}})
	if err != nil {
		t.Fatal(err)
	}
	// The drain learns of the claim from the pods it lists first (Fill's
	// sync) or from its refused conditioned delete (Retire): either way
	// s1's pod stays.
	if rep.Removed != 1 {
		t.Fatalf("drain: %+v, want 1 removed", rep)
	}
	if p, err := c.pod(t, sb.ID); err != nil || p.Annotations[AnnotationClaimedBy] != "s1" {
		t.Fatalf("s1's pod after the drain: %v, %v", p, err)
	}
	pl, err := c.cs.CoreV1().Pods("sessions").List(ctx, metav1.ListOptions{})
	if err != nil || len(pl.Items) != 1 {
		t.Fatalf("pods after the drain: %d, %v; want s1's only", len(pl.Items), err)
	}
}

// coldVersusClaim: replica 0 starts session s cold (its template, another
// image, matches no pool) while replica 1 claims a pooled pod for s, at
// the same instant. What each got.
func coldVersusClaim(t *testing.T, rs replicaSet, s string) [2]sandbox.Sandbox {
	t.Helper()
	ctx := context.Background()
	specs := [2]sandbox.Spec{rs.tmpl.Clone(), rs.tmpl.Clone()}
	specs[0].Image = "another:1"
	var got [2]sandbox.Sandbox
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, m := range rs.ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			spec := specs[i]
			spec.Session = s
			sb, err := m.Ensure(ctx, spec)
			if err != nil {
				t.Errorf("Ensure(%s) on replica %d: %v", s, i, err)
			}
			got[i] = sb
		}()
	}
	close(start)
	wg.Wait()
	return got
}

// A session's first calls reach two replicas at once, one of which starts
// it cold while the other claims a pooled pod for it: over many rounds
// both replicas end with the same one sandbox (the session's claim lock
// is taken by the cold start too), and no second pod of the session
// exists. Without the cold start's lock the session got both.
func TestColdStartRacesClaim(t *testing.T) {
	const rounds = 25
	ctx := context.Background()
	var cold, claimed int
	for round := range rounds {
		c := newCluster(t)
		c.withResourceVersions()
		rs := newReplicas(t, c, 1)
		got := coldVersusClaim(t, rs, "s1")
		if t.Failed() {
			t.FailNow()
		}
		if got[0].ID != got[1].ID {
			t.Fatalf("round %d: session s1 has two sandboxes: %s (cold start) and %s (claim)", round, got[0].ID, got[1].ID)
		}
		cs, err := rs.ms[1].List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sb := range cs {
			if sb.Session == "s1" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("round %d: session s1 holds %d sandboxes, want 1 (%+v)", round, n, cs)
		}
		if got[0].PoolName == "" {
			cold++
		} else {
			claimed++
		}
	}
	t.Logf("%d rounds: %d cold starts won, %d claims won", rounds, cold, claimed)
}

// The race made deterministic both ways, at Claims: a claim that finds the
// session's cold start under way answers the session's own name and
// leaves the pooled pod unclaimed (before and after the cold pod exists
// and owns the lock); a cold start that finds the session's claim answers
// the claimed pod. A cold start whose pod never came (done with no pod)
// frees the lock; a lock left by a dead cold start is believed for
// coldGrace only.
func TestColdStartLock(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	r := c.runtime(t, nil)
	cl := r.Claims()
	ctx := context.Background()
	p1, p2 := c.pooledPod(t, r, 1), c.pooledPod(t, r, 2)

	held, done, err := cl.Cold(ctx, "acme", "s1")
	if err != nil || held != "" || done == nil {
		t.Fatalf("first cold start: %q, %v", held, err)
	}
	if h, _, err := cl.Cold(ctx, "acme", "s1"); err != nil || h != "s1" {
		t.Fatalf("a second cold start while the first runs: %q, %v; want s1", h, err)
	}
	if h, err := cl.Claim(ctx, "acme", p1, "s1"); err != nil || h != "s1" {
		t.Fatalf("a claim while the cold start runs: %q, %v; want s1", h, err)
	}
	spec := testSpec(t)
	spec.Session = "s1"
	sb, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	done()
	lock, err := c.secret(t, ClaimLockName("acme", "s1"))
	if err != nil || len(lock.OwnerReferences) != 1 || lock.OwnerReferences[0].Name != sb.ID {
		t.Fatalf("the cold start's lock after done: %+v, %v; want it owned by pod %s", lock, err, sb.ID)
	}
	if h, err := cl.Claim(ctx, "acme", p1, "s1"); err != nil || h != "s1" {
		t.Fatalf("a claim after the cold start: %q, %v; want s1", h, err)
	}
	if p, err := c.pod(t, PodName("acme", p1)); err != nil || p.Annotations[AnnotationClaimedBy] != "" {
		t.Fatalf("the pooled pod a cold-started session did not take: %v, %v", p.Annotations, err)
	}
	// The pod goes (the garbage collector, which the fake has not, would
	// take the lock a moment later): the lock is stale at once.
	if err := c.cs.CoreV1().Pods("sessions").Delete(ctx, sb.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if h, done, err := cl.Cold(ctx, "acme", "s1"); err != nil || h != "" {
		t.Fatalf("a cold start after the pod went: %q, %v; want the lock", h, err)
	} else {
		done() // no pod: the lock goes
	}
	if _, err := c.secret(t, ClaimLockName("acme", "s1")); !apierrors.IsNotFound(err) {
		t.Fatalf("the lock of a cold start that made no pod: %v; want it deleted", err)
	}

	// Claimed first: a cold start gets the claimed pod.
	if h, err := cl.Claim(ctx, "acme", p2, "s2"); err != nil || h != p2 {
		t.Fatal(h, err)
	}
	if h, _, err := cl.Cold(ctx, "acme", "s2"); err != nil || h != p2 {
		t.Fatalf("a cold start of a session that claimed %s: %q, %v", p2, h, err)
	}

	// A dead cold start's lock: believed while young, stale after.
	for _, age := range []time.Duration{time.Second, r.cfg.ReadyTimeout + 2*time.Minute} {
		_ = c.cs.CoreV1().Secrets("sessions").Delete(ctx, ClaimLockName("acme", "s3"), metav1.DeleteOptions{})
		dead := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name: ClaimLockName("acme", "s3"), Namespace: "sessions", UID: "dead", ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(time.Now().Add(-age)),
			Labels:            map[string]string{LabelClaimLock: "true"},
			Annotations:       map[string]string{AnnotationTenant: "acme", AnnotationSession: "s3", AnnotationClaimPooled: "s3"},
		}}
		if err := c.cs.Tracker().Add(dead); err != nil {
			t.Fatal(err)
		}
		h, done, err := cl.Cold(ctx, "acme", "s3")
		want := "s3"
		if age > time.Minute {
			want = ""
		}
		if err != nil || h != want {
			t.Fatalf("a cold start beside a dead one's lock %v old: %q, %v; want %q", age, h, err, want)
		}
		if done != nil {
			done()
		}
	}
	// With its creator's deadline on it: believed until that deadline
	// (and coldMargin), however young.
	for _, until := range []time.Time{time.Now().Add(-time.Minute), time.Now().Add(time.Minute)} {
		_ = c.cs.CoreV1().Secrets("sessions").Delete(ctx, ClaimLockName("acme", "s4"), metav1.DeleteOptions{})
		dead := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name: ClaimLockName("acme", "s4"), Namespace: "sessions", UID: "dead4", ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Second)),
			Labels:            map[string]string{LabelClaimLock: "true"},
			Annotations: map[string]string{AnnotationTenant: "acme", AnnotationSession: "s4", AnnotationClaimPooled: "s4",
				AnnotationColdUntil: until.UTC().Format(time.RFC3339Nano)},
		}}
		if err := c.cs.Tracker().Add(dead); err != nil {
			t.Fatal(err)
		}
		h, done, err := cl.Cold(ctx, "acme", "s4")
		want := "s4"
		if until.Before(time.Now()) {
			want = ""
		}
		if err != nil || h != want {
			t.Fatalf("a cold start beside a dead one's lock due %v: %q, %v; want %q", until, h, err, want)
		}
		if done != nil {
			done()
		}
	}
	// A lock Cold makes carries its context's deadline.
	dctx, cancel := context.WithTimeout(ctx, 42*time.Second)
	defer cancel()
	if h, done, err := cl.Cold(dctx, "acme", "s5"); err != nil || h != "" {
		t.Fatal(h, err)
	} else {
		lock, err := c.secret(t, ClaimLockName("acme", "s5"))
		d, _ := dctx.Deadline()
		if err != nil || lock.Annotations[AnnotationColdUntil] != d.UTC().Format(time.RFC3339Nano) {
			t.Fatalf("the cold start's lock: %v, %v; want due %v", lock.Annotations, err, d)
		}
		_ = done()
	}
}

// A cold start taken over (its lock judged dead by a replica whose clock
// is ahead) finds, when it settles, what became of the lock: taken over
// by a claim of a pooled pod (that pod is the session's:
// ErrAlreadyExists), also when the claimer died before writing the claim
// (written now); deleted and not made again (made again, owned by the
// cold pod); taken by another cold start (the pod is the session's; that
// one's Create finds it); or naming a pooled pod another session has
// (stale: made again, owned by the cold pod).
func TestColdStartTakenOver(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	r := c.runtime(t, nil)
	cl := r.Claims()
	ctx := context.Background()
	secrets := c.cs.CoreV1().Secrets("sessions")
	for i, takeOver := range []string{"claim", "delete", "cold", "unwritten", "stale"} {
		session := fmt.Sprintf("slow-%d", i)
		lockName := ClaimLockName("acme", session)
		h, done, err := cl.Cold(ctx, "acme", session)
		if err != nil || h != "" {
			t.Fatal(h, err)
		}
		// Judged dead meanwhile: deleted by another replica, which then...
		if err := secrets.Delete(ctx, lockName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var pooled string
		switch takeOver {
		case "claim": // ... claims a pooled pod for the session
			pooled = c.pooledPod(t, r, i)
			if h, err := cl.Claim(ctx, "acme", pooled, session); err != nil || h != pooled {
				t.Fatalf("the claim taking over: %q, %v", h, err)
			}
		case "cold": // ... starts it cold itself
			if h, _, err := cl.Cold(ctx, "acme", session); err != nil || h != "" {
				t.Fatalf("the cold start taking over: %q, %v", h, err)
			}
		case "unwritten", "stale": // ... makes the lock naming a pooled pod, and dies
			pooled = c.pooledPod(t, r, i)
			p, err := c.pod(t, PodName("acme", pooled))
			if err != nil {
				t.Fatal(err)
			}
			if takeOver == "stale" { // (which another session claimed)
				if h, err := cl.Claim(ctx, "acme", pooled, "other"); err != nil || h != pooled {
					t.Fatal(h, err)
				}
			}
			if _, err := cl.createLock(ctx, "acme", session, pooled, &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		spec := testSpec(t)
		spec.Session = session
		sb, err := r.Create(ctx, spec) // the slow creator's pod
		if err != nil {
			t.Fatal(err)
		}
		err = done()
		lock, lerr := c.secret(t, lockName)
		switch takeOver {
		case "claim", "unwritten":
			if p, perr := c.pod(t, PodName("acme", pooled)); perr != nil || p.Annotations[AnnotationClaimedBy] != session {
				t.Fatalf("the pooled pod the lock names: %v, %v; want it claimed for %s", p.Annotations, perr, session)
			}
			if !errors.Is(err, sandbox.ErrAlreadyExists) || !strings.Contains(err.Error(), pooled) {
				t.Fatalf("settling a cold start whose session claimed %s meanwhile: %v; want ErrAlreadyExists naming it", pooled, err)
			}
			if lerr != nil || lock.Annotations[AnnotationClaimPooled] != pooled {
				t.Fatalf("the claim's lock after the slow settle: %+v, %v", lock, lerr)
			}
		case "delete", "stale":
			if err != nil || lerr != nil || lock.Annotations[AnnotationClaimPooled] != session ||
				len(lock.OwnerReferences) != 1 || lock.OwnerReferences[0].Name != sb.ID {
				t.Fatalf("settling a cold start whose lock was deleted: %v; lock %+v, %v; want it made again, owned by pod %s", err, lock, lerr, sb.ID)
			}
		case "cold":
			if err != nil || lerr != nil || lock.Annotations[AnnotationClaimPooled] != session {
				t.Fatalf("settling a cold start whose lock another cold start took: %v; lock %+v, %v", err, lock, lerr)
			}
		}
	}
}

// A replica finding a session's pod pending (another replica's cold start
// under way) waits for it rather than removing it as dead, and both get
// that one pod.
func TestEnsureWaitsForPendingPod(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	rs := newReplicas(t, c, 0)
	ctx := context.Background()
	c.setKubelet(func(p *corev1.Pod) []corev1.Event {
		p.Status = corev1.PodStatus{Phase: corev1.PodPending}
		return nil
	})
	spec := rs.tmpl.Clone()
	spec.Session = "s1"
	first := make(chan sandbox.Sandbox, 1)
	go func() {
		sb, err := rs.ms[0].Ensure(ctx, spec)
		if err != nil {
			t.Errorf("the cold start: %v", err)
		}
		first <- sb
	}()
	name := PodName("acme", "s1")
	var p *corev1.Pod
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if p, err = c.pod(t, name); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cold start made no pod")
		}
		time.Sleep(time.Millisecond)
	}
	second := make(chan sandbox.Sandbox, 1)
	go func() {
		sb, err := rs.ms[1].Ensure(ctx, spec)
		if err != nil {
			t.Errorf("the other replica: %v", err)
		}
		second <- sb
	}()
	time.Sleep(time.Second) // the other replica's first looks (250 ms, then 500)
	if _, err := c.pod(t, name); err != nil {
		t.Fatalf("the pending pod while another replica looked at it: %v (removed as dead?)", err)
	}
	c.runReady(p)
	if _, err := c.cs.CoreV1().Pods("sessions").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a, b := <-first, <-second
	if a.ID != name || b.ID != name {
		t.Fatalf("the session's sandbox: %q on one replica, %q on the other; want %s on both", a.ID, b.ID, name)
	}
}

// A replica whose cold start's lock another replica judged dead (its
// clock ahead) and replaced by a claim of a pooled pod for the session
// removes the pod it made and serves the session from the claimed one:
// the session keeps one sandbox.
func TestEnsureColdStartTakenOver(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	rt := c.runtime(t, nil)
	m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "prod", Claims: rt.Claims()})
	if err != nil {
		t.Fatal(err)
	}
	pooled := c.pooledPod(t, rt, 7)
	pooledPod, err := c.pod(t, PodName("acme", pooled))
	if err != nil {
		t.Fatal(err)
	}
	cold := PodName("acme", "s1")
	lockName := ClaimLockName("acme", "s1")
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	var once sync.Once
	// Just before the cold pod is made, the other replica's claim: the lock deleted and made again naming the
	// pooled pod, which it claims. Reactors hold the fake's lock: the
	// tracker is written directly.
	c.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).Name != cold {
			return false, nil, nil
		}
		once.Do(func() {
			if err := c.cs.Tracker().Delete(secrets, "sessions", lockName); err != nil {
				t.Errorf("deleting the cold start's lock: %v", err)
			}
			lock := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
				Name: lockName, Namespace: "sessions", UID: "claimer", ResourceVersion: "999",
				Labels:          map[string]string{LabelClaimLock: "true"},
				Annotations:     map[string]string{AnnotationTenant: "acme", AnnotationSession: "s1", AnnotationClaimPooled: pooled},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pooledPod.Name, UID: pooledPod.UID}},
			}}
			if err := c.cs.Tracker().Add(lock); err != nil {
				t.Errorf("the claimer's lock: %v", err)
			}
			p := pooledPod.DeepCopy()
			p.Annotations[AnnotationClaimedBy] = "s1"
			p.Labels[LabelClaimedBy] = LabelValue("s1")
			if err := c.cs.Tracker().Update(podsResource, p, "sessions"); err != nil {
				t.Errorf("the claim: %v", err)
			}
		})
		return false, nil, nil
	})
	spec := testSpec(t)
	spec.Session = "s1"
	sb, err := m.Ensure(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if sb.PoolName != pooled || sb.ID != pooledPod.Name {
		t.Fatalf("the session's sandbox: %+v; want the pooled pod %s the other replica claimed", sb, pooledPod.Name)
	}
	if _, err := c.pod(t, cold); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod the slow cold start made: %v; want it removed", err)
	}
}

// Inspect found a new session without a sandbox, and the creation that
// follows takes that answer instead of looking again; another replica
// gets the session its sandbox in between (a claim, or a cold start): the
// creation meets that replica's claim lock and ends with its sandbox, not
// a second one.
func TestInspectThenCreatedElsewhere(t *testing.T) {
	ctx := context.Background()
	for _, cold := range []bool{false, true} {
		t.Run(map[bool]string{false: "claim", true: "cold"}[cold], func(t *testing.T) {
			c := newCluster(t)
			c.withResourceVersions()
			rs := newReplicas(t, c, 1)
			spec := rs.tmpl.Clone()
			spec.Session = "s1"
			if cold {
				spec.Image = "another:1" // no pool's template
			}
			if _, err := rs.ms[0].Inspect(ctx, spec.Tenant, spec.Session); !errors.Is(err, sandbox.ErrNotFound) {
				t.Fatalf("Inspect: %v, want ErrNotFound", err)
			}
			other, err := rs.ms[1].Ensure(ctx, spec)
			if err != nil || (other.PoolName == "") != cold {
				t.Fatalf("Ensure on the other replica: %+v, %v", other, err)
			}
			got, err := rs.ms[0].Ensure(ctx, spec)
			if err != nil {
				t.Fatalf("Ensure after Inspect: %v", err)
			}
			if got.ID != other.ID {
				t.Fatalf("session s1 has two sandboxes: %s (here) and %s (the other replica)", got.ID, other.ID)
			}
			list, err := rs.ms[0].List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, sb := range list {
				if sb.Session == "s1" {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("session s1 holds %d sandboxes, want 1: %+v", n, list)
			}
		})
	}
}

// A replica that waits for another's cold start (the session's claim lock
// names it) until its own creation time runs out says what it last saw of
// that creation, not only that time ran out.
func TestWaitForColdStartElsewhereSaysWhy(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	rt := c.runtime(t, nil)
	ctx := context.Background()
	// Another replica's cold start, whose pod never comes within the wait.
	held, _, err := rt.Claims().Cold(ctx, "acme", "s1")
	if err != nil || held != "" {
		t.Fatalf("Cold: %q, %v", held, err)
	}
	m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "srv", Claims: rt.Claims(), CreateTimeout: 700 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t)
	spec.Session = "s1"
	_, err = m.Ensure(ctx, spec)
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("Ensure: %v, want ErrUnavailable", err)
	}
	for _, want := range []string{"being created by another server", "last look", "claim lock names a cold start under way"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Ensure: %v; want it to say %q", err, want)
		}
	}
}
