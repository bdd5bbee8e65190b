package kube

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/shellbox/shellbox/sandbox"
)

// Warm pools work on Kubernetes through the runtime seam unchanged: pooled
// sandboxes are pods under their pooled names, a claim (Claims, on the
// pod) hands one to a session, and a restarted server finds it as the
// session's.
func TestWarmPoolOnPods(t *testing.T) {
	c := newCluster(t)
	newManager := func() *sandbox.Manager {
		rt := c.runtime(t, nil)
		m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "srv", Claims: rt.Claims()})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ctx := context.Background()
	m := newManager()
	tmpl := testSpec(t)
	rep, err := m.Fill(ctx, []sandbox.PoolTarget{{Template: tmpl, Size: 2}})
	if err != nil || rep.Created != 2 {
		t.Fatalf("fill: %+v, %v", rep, err)
	}
	s1 := tmpl.Clone()
	s1.Session = "s1"
	sb, err := m.Ensure(ctx, s1)
	if err != nil || sb.Session != "s1" || !sandbox.IsPooled(sb.PoolName) {
		t.Fatalf("claim: %+v, %v", sb, err)
	}
	if _, err := c.pod(t, PodName(tmpl.Tenant, sb.PoolName)); err != nil {
		t.Fatalf("the claimed pod under its pooled name: %v", err)
	}
	if sb.Agent.Token == "" {
		t.Fatal("a claimed pod has no agent token")
	}

	m2 := newManager()
	adopt, err := m2.Adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(adopt.Kept) != 1 || adopt.Kept[0].ID != sb.ID || adopt.Kept[0].Session != "s1" || len(adopt.Pooled) != 1 {
		t.Fatalf("after a restart: kept %+v, pooled %+v", adopt.Kept, adopt.Pooled)
	}
	if err := m2.Remove(ctx, tmpl.Tenant, "s1"); err != nil {
		t.Fatal(err)
	}
	if cs, _ := c.runtime(t, nil).Claims().List(ctx); len(cs) != 0 {
		t.Fatalf("claims after removing s1: %+v", cs)
	}
}

// A new session's claim of a pooled pod is five API requests, the first
// two at once (the claim's lookup, the session's own pod), then the
// pooled pod, the claim lock created without reading it first, the
// claim: each is a round trip of the session's first call.
func TestClaimRequests(t *testing.T) {
	c := newCluster(t)
	rt := c.runtime(t, nil)
	m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "srv", Claims: rt.Claims()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tmpl := testSpec(t)
	if _, err := m.Fill(ctx, []sandbox.PoolTarget{{Template: tmpl, Size: 2}}); err != nil {
		t.Fatal(err)
	}
	requests := func() []string {
		var got []string
		for _, a := range c.cs.Actions() {
			got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
		}
		c.cs.ClearActions()
		return got
	}
	requests()
	s1 := tmpl.Clone()
	s1.Session = "s1"
	if sb, err := m.Ensure(ctx, s1); err != nil || sb.PoolName == "" {
		t.Fatalf("claim: %+v, %v", sb, err)
	}
	got := requests()
	slices.Sort(got[:2]) // concurrent
	want := []string{"get pods", "list pods", "get pods", "create secrets", "patch pods"}
	if !slices.Equal(got, want) {
		t.Fatalf("a claim's requests: %q, want %q", got, want)
	}

	// A new session's first call reads its settings (Inspect) first: the
	// claim takes that look instead of looking again.
	s2 := tmpl.Clone()
	s2.Session = "s2"
	if _, err := m.Inspect(ctx, "acme", "s2"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Inspect of a new session: %v, want ErrNotFound", err)
	}
	if sb, err := m.Ensure(ctx, s2); err != nil || sb.PoolName == "" {
		t.Fatalf("claim after Inspect: %+v, %v", sb, err)
	}
	got = requests()
	slices.Sort(got[:2])
	want = []string{"get pods", "list pods", "get pods", "create secrets", "patch pods"}
	if !slices.Equal(got, want) {
		t.Fatalf("Inspect and a claim: %q, want %q (the claim looks the session up again)", got, want)
	}
}
