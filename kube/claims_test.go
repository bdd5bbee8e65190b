package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellbox/shellbox/sandbox"
)

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// withResourceVersions makes the fake API server keep pods'
// resourceVersion as the real one does: set on create, bumped on every
// update and merge patch, and one of those carrying another than the
// stored one refused with a Conflict; and deletes of pods and Secrets
// check their preconditions. (The fake's tracker neither sets nor checks
// resourceVersions: its update replaces the stored object whatever the
// version, a patch's resourceVersion simply overwrites the stored one,
// and a delete ignores its options.) Secrets' merge patches are checked
// and bumped the same way. It returns the count of writes refused.
func (c *cluster) withResourceVersions() *atomic.Int32 {
	var conflicts atomic.Int32
	c.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).ResourceVersion = "1"
		return false, nil, nil
	})
	// Reactors run one at a time (the fake holds its lock around them), so
	// each read and write below is one step, as in etcd.
	write := func(ns, name, rv string, apply func(cur *corev1.Pod) (*corev1.Pod, error)) (bool, runtime.Object, error) {
		obj, err := c.cs.Tracker().Get(podsResource, ns, name)
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*corev1.Pod)
		if rv != "" && rv != cur.ResourceVersion {
			conflicts.Add(1)
			return true, nil, apierrors.NewConflict(podsResource.GroupResource(), name,
				fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
		}
		p, err := apply(cur.DeepCopy())
		if err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		n, _ := strconv.Atoi(cur.ResourceVersion)
		p.ResourceVersion = strconv.Itoa(n + 1)
		if err := c.cs.Tracker().Update(podsResource, p, ns); err != nil {
			return true, nil, err
		}
		return true, p, nil
	}
	c.cs.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.UpdateAction).GetObject().(*corev1.Pod).DeepCopy()
		return write(p.Namespace, p.Name, p.ResourceVersion, func(*corev1.Pod) (*corev1.Pod, error) { return p, nil })
	})
	c.cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetPatchType() != types.MergePatchType {
			return false, nil, nil
		}
		rv, err := patchVersion(pa)
		if err != nil {
			return true, nil, err
		}
		return write(pa.GetNamespace(), pa.GetName(), rv, func(cur *corev1.Pod) (*corev1.Pod, error) {
			orig, err := json.Marshal(cur)
			if err != nil {
				return nil, err
			}
			// A strategic merge of metadata's maps is a JSON merge.
			out, err := strategicpatch.StrategicMergePatch(orig, pa.GetPatch(), corev1.Pod{})
			if err != nil {
				return nil, err
			}
			p := &corev1.Pod{}
			return p, json.Unmarshal(out, p)
		})
	})
	// Secrets too, for merge patches (a cold start's lock settled), with
	// versions from one counter, as etcd's: a Secret deleted and made
	// again has another.
	secretsResource := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	var secretVersions atomic.Int64
	c.cs.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s := a.(k8stesting.CreateAction).GetObject().(*corev1.Secret); s.ResourceVersion == "" {
			s.ResourceVersion = strconv.FormatInt(secretVersions.Add(1), 10)
		}
		return false, nil, nil
	})
	c.cs.PrependReactor("patch", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetPatchType() != types.MergePatchType {
			return false, nil, nil
		}
		rv, err := patchVersion(pa)
		if err != nil {
			return true, nil, err
		}
		obj, err := c.cs.Tracker().Get(secretsResource, pa.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*corev1.Secret)
		if rv != "" && rv != cur.ResourceVersion {
			conflicts.Add(1)
			return true, nil, apierrors.NewConflict(secretsResource.GroupResource(), pa.GetName(),
				fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
		}
		orig, err := json.Marshal(cur)
		if err != nil {
			return true, nil, err
		}
		out, err := strategicpatch.StrategicMergePatch(orig, pa.GetPatch(), corev1.Secret{})
		if err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		next := &corev1.Secret{}
		if err := json.Unmarshal(out, next); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		next.ResourceVersion = strconv.FormatInt(secretVersions.Add(1), 10)
		return true, next, c.cs.Tracker().Update(secretsResource, next, pa.GetNamespace())
	})
	// Deletes honour their preconditions (uid, resourceVersion), which the
	// fake's tracker ignores: a pod or Secret written or replaced since it
	// was read is not deleted (Conflict).
	for _, res := range []string{"pods", "secrets"} {
		gvr := schema.GroupVersionResource{Version: "v1", Resource: res}
		c.cs.PrependReactor("delete", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
			da := a.(k8stesting.DeleteAction)
			pre := da.GetDeleteOptions().Preconditions
			if pre == nil {
				return false, nil, nil
			}
			obj, err := c.cs.Tracker().Get(gvr, da.GetNamespace(), da.GetName())
			if err != nil {
				return true, nil, err
			}
			m, err := meta.Accessor(obj)
			if err != nil {
				return true, nil, err
			}
			if (pre.UID != nil && *pre.UID != m.GetUID()) || (pre.ResourceVersion != nil && *pre.ResourceVersion != m.GetResourceVersion()) {
				conflicts.Add(1)
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), da.GetName(),
					fmt.Errorf("the object has been modified: precondition failed"))
			}
			return true, nil, c.cs.Tracker().Delete(gvr, da.GetNamespace(), da.GetName())
		})
	}
	return &conflicts
}

// patchVersion is the resourceVersion a merge patch carries ("" if none).
func patchVersion(pa k8stesting.PatchAction) (string, error) {
	var meta struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(pa.GetPatch(), &meta); err != nil {
		return "", apierrors.NewBadRequest(err.Error())
	}
	return meta.Metadata.ResourceVersion, nil
}

// pooledPod creates the running pod of a pooled sandbox of tenant acme
// (release prod) and returns its pooled name.
func (c *cluster) pooledPod(t *testing.T, r *Runtime, n int) string {
	t.Helper()
	spec := testSpec(t)
	spec.Session = fmt.Sprintf("%s0123456789abcdef-%08x", sandbox.PoolPrefix, n)
	if _, err := r.Create(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	return spec.Session
}

// Of replicas that all read a pooled pod unclaimed and then claim it for
// their own sessions, exactly one claim is written: the others' updates
// conflict, and the pod read again is another session's
// (ErrAlreadyExists). The winner claiming again succeeds.
func TestClaimsRace(t *testing.T) {
	c := newCluster(t)
	conflicts := c.withResourceVersions()
	r := c.runtime(t, nil)
	pooled := c.pooledPod(t, r, 1)
	name := PodName("acme", pooled)
	ctx := context.Background()

	// Every replica's first read sees the pod as it is now, unclaimed:
	// all of them then update with the same resourceVersion.
	const n = 8
	snapshot, err := c.pod(t, name)
	if err != nil {
		t.Fatal(err)
	}
	var stale atomic.Int32
	c.cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == name && stale.Add(1) <= n {
			return true, snapshot.DeepCopy(), nil
		}
		return false, nil, nil
	})

	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A Runtime per replica, on the one API server.
			_, errs[i] = c.runtime(t, nil).Claims().Claim(ctx, "acme", pooled, fmt.Sprintf("s%d", i))
		}()
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner < 0:
			winner = i
		case err == nil:
			t.Fatalf("sessions s%d and s%d both claimed %s", winner, i, pooled)
		case !errors.Is(err, sandbox.ErrAlreadyExists):
			t.Fatalf("s%d: %v, want ErrAlreadyExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no claim succeeded")
	}
	if got := conflicts.Load(); got != n-1 {
		t.Errorf("%d updates refused for their resourceVersion, want %d", got, n-1)
	}
	p, err := c.pod(t, name)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("s%d", winner)
	if p.Annotations[AnnotationClaimedBy] != want || p.Labels[LabelClaimedBy] != want {
		t.Fatalf("pod claimed by %q (label %q), want %q", p.Annotations[AnnotationClaimedBy], p.Labels[LabelClaimedBy], want)
	}
	// Idempotent for the winner, refused for everyone else.
	cl := r.Claims()
	if _, err := cl.Claim(ctx, "acme", pooled, want); err != nil {
		t.Fatalf("claiming again for %s: %v", want, err)
	}
	if _, err := cl.Claim(ctx, "acme", pooled, "late"); !errors.Is(err, sandbox.ErrAlreadyExists) {
		t.Fatalf("a later claim: %v, want ErrAlreadyExists", err)
	}
	if got, err := cl.Lookup(ctx, "acme", want); err != nil || got != pooled {
		t.Fatalf("Lookup(%s) = %q, %v", want, got, err)
	}
	// The pod is still known by its pooled name: the Manager maps it.
	sb, err := r.Get(ctx, "acme", pooled)
	if err != nil || sb.Session != pooled {
		t.Fatalf("Get by the pooled name: %+v, %v", sb, err)
	}
}

// Lookup and List find claims by the label and believe only the exact
// annotation: a label forged (or collided) without the annotation claims
// nothing. Session ids that are no label value (too long) are claimed and
// found through their sanitised label.
func TestClaimsLookupList(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	r := c.runtime(t, nil)
	cl := r.Claims()
	ctx := context.Background()
	p1, p2, p3 := c.pooledPod(t, r, 1), c.pooledPod(t, r, 2), c.pooledPod(t, r, 3)
	long := strings.Repeat("x", 64) // a valid session id, 64 > 63 bytes of a label value
	if LabelValue(long) == long {
		t.Fatal("the long session needs no sanitising: the test proves nothing")
	}

	if _, err := cl.Claim(ctx, "acme", p1, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Claim(ctx, "acme", p2, long); err != nil {
		t.Fatal(err)
	}
	// p3: the label of s3, but no annotation (written by hand, or by
	// someone with update on pods but not shellbox).
	forged, err := c.pod(t, PodName("acme", p3))
	if err != nil {
		t.Fatal(err)
	}
	forged.Labels[LabelClaimedBy] = "s3"
	if _, err := c.cs.CoreV1().Pods("sessions").Update(ctx, forged, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ tenant, session, want string }{
		{"acme", "s1", p1},
		{"acme", long, p2},
		{"acme", "s3", ""},     // forged label
		{"other", "s1", ""},    // another tenant's session of that name
		{"acme", "nobody", ""}, // no claim
		{"acme", p1, ""},       // a pooled name is no session
	} {
		got, err := cl.Lookup(ctx, tc.tenant, tc.session)
		if tc.want == "" {
			if !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("Lookup(%s, %s) = %q, %v, want ErrNotFound", tc.tenant, tc.session, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Lookup(%s, %s) = %q, %v, want %s", tc.tenant, tc.session, got, err, tc.want)
		}
	}

	got, err := cl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[sandbox.Claim]bool{{Tenant: "acme", Pooled: p1, Session: "s1"}: true, {Tenant: "acme", Pooled: p2, Session: long}: true}
	if len(got) != len(want) {
		t.Fatalf("List = %+v, want %v", got, want)
	}
	for _, g := range got {
		if !want[g] {
			t.Fatalf("List = %+v, want %v", got, want)
		}
	}

	// Another release's claims are not this one's.
	other := c.runtime(t, func(cfg *Config) { cfg.Release = "staging" }).Claims()
	if cs, err := other.List(ctx); err != nil || len(cs) != 0 {
		t.Errorf("another release's List = %+v, %v", cs, err)
	}
	if _, err := other.Claim(ctx, "acme", p3, "s9"); !errors.Is(err, sandbox.ErrConflict) {
		t.Errorf("another release claiming this one's pod: %v, want ErrConflict", err)
	}
}

// A claim goes with its pod: Release of a gone pod is nothing to do, and
// Release never unclaims a pod that still exists (it holds a session's
// workspace). Claims of gone pods, of names that are not pooled, and of
// pooled sessions are refused.
func TestClaimsRelease(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	r := c.runtime(t, nil)
	cl := r.Claims()
	ctx := context.Background()
	p1 := c.pooledPod(t, r, 1)
	if _, err := cl.Claim(ctx, "acme", p1, "s1"); err != nil {
		t.Fatal(err)
	}

	if err := cl.Release(ctx, "acme", p1); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.Lookup(ctx, "acme", "s1"); err != nil || got != p1 {
		t.Fatalf("after Release of a live pod: Lookup = %q, %v; the claim must stay", got, err)
	}
	if _, err := cl.Claim(ctx, "acme", p1, "s2"); !errors.Is(err, sandbox.ErrAlreadyExists) {
		t.Fatalf("claiming a released live pod for another session: %v", err)
	}

	if err := r.Remove(ctx, PodName("acme", p1)); err != nil {
		t.Fatal(err)
	}
	if err := cl.Release(ctx, "acme", p1); err != nil {
		t.Fatalf("Release of a gone pod: %v", err)
	}
	if _, err := cl.Lookup(ctx, "acme", "s1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Lookup after the pod went: %v", err)
	}
	if cs, err := cl.List(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("List after the pod went: %+v, %v", cs, err)
	}
	if _, err := cl.Claim(ctx, "acme", p1, "s1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Claim of a gone pod: %v, want ErrNotFound", err)
	}
	if _, err := cl.Claim(ctx, "acme", "s-1", "s1"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("Claim of a non-pooled name: %v, want ErrInvalid", err)
	}
	if _, err := cl.Claim(ctx, "acme", p1, p1); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("Claim for a pooled session name: %v, want ErrInvalid", err)
	}
	if err := cl.Release(ctx, "acme", "s-1"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("Release of a non-pooled name: %v, want ErrInvalid", err)
	}
}

// Two replicas (Managers on one API server, each with the release's
// claims) and a third that replaced the first: a pooled pod claimed by
// session A on one is A's on every other, and session B of the tenant gets
// a sandbox of its own, never A's.
func TestWarmPoolReplicas(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	newManager := func() *sandbox.Manager {
		rt := c.runtime(t, nil)
		m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "prod", Claims: rt.Claims()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Adopt(context.Background()); err != nil {
			t.Fatal(err)
		}
		return m
	}
	ctx := context.Background()
	tmpl := testSpec(t)
	m1 := newManager()
	if rep, err := m1.Fill(ctx, []sandbox.PoolTarget{{Template: tmpl, Size: 1}}); err != nil || rep.Created != 1 {
		t.Fatalf("fill: %+v, %v", rep, err)
	}
	m2 := newManager() // adopts the pooled pod into its own pool
	a := tmpl.Clone()
	a.Session = "A"
	sbA, err := m1.Ensure(ctx, a)
	if err != nil || sbA.PoolName == "" {
		t.Fatalf("A: %+v, %v (want a pooled sandbox)", sbA, err)
	}

	b := tmpl.Clone()
	b.Session = "B"
	for _, m := range []*sandbox.Manager{m2, newManager()} {
		sbB, err := m.Ensure(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if sbB.ID == sbA.ID {
			t.Fatalf("session B was handed A's sandbox %s", sbA.ID)
		}
		got, err := m.Inspect(ctx, "acme", "A")
		if err != nil || got.ID != sbA.ID || got.PoolName != sbA.PoolName {
			t.Fatalf("A on another replica: %+v, %v, want %s", got, err, sbA.ID)
		}
		if got, err := m.Ensure(ctx, a); err != nil || got.ID != sbA.ID {
			t.Fatalf("Ensure(A) on another replica: %+v, %v, want %s", got, err, sbA.ID)
		}
	}
}

// The use of a claimed pooled sandbox is recorded on its pod, which knows
// it by its pooled name (Sandbox.PoolName), not by the claiming session.
func TestRecordUseClaimed(t *testing.T) {
	c := newCluster(t)
	c.withResourceVersions()
	r := c.runtime(t, nil)
	ctx := context.Background()
	pooled := c.pooledPod(t, r, 1)
	if _, err := r.Claims().Claim(ctx, "acme", pooled, "s1"); err != nil {
		t.Fatal(err)
	}
	sb, err := r.Get(ctx, "acme", pooled)
	if err != nil {
		t.Fatal(err)
	}
	sb.PoolName, sb.Session = pooled, "s1" // as the Manager hands it out
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if err := r.RecordUse(ctx, sb, at); err != nil {
		t.Fatalf("RecordUse of a claimed pod: %v", err)
	}
	p, err := c.pod(t, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Annotations[AnnotationLastUsed]; got != at.Format(time.RFC3339Nano) {
		t.Fatalf("last use %q", got)
	}
}
