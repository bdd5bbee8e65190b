package approvals

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/policies"
)

// The chart's CRD, which kubetest.ApplyCRD makes the cluster's.
var crdFile = filepath.Join("..", "..", "deploy", "helm", "shellbox", "crds", "approvals.yaml")

// Two stores on the real API server, as two replicas of a release: a call
// held by A's Engine is listed and approved through B's, and A's waiting
// call runs; of two concurrent decisions by A and B exactly one is
// written. The time from B's decision to A's call returning is logged.
func TestClusterApprovalAcrossReplicas(t *testing.T) {
	c := kubetest.Connect(t)
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyCRD(t, crdFile)
	ns := c.Namespace(t) // deleted, with its Approvals, when the test ends
	replica := func() *Store {
		st, err := New(dc, Config{Namespace: ns, Release: "test", Poll: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := st.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	}
	sa, sb := replica(), replica()
	// A minute to answer: the test decides as soon as B's watch shows the ask.
	slow := strings.Replace(policy, "askTimeout: 300ms", "askTimeout: 1m", 1)
	ea, eb := engine(t, sa, slow), engine(t, sb, slow)
	pending := make(chan policies.Approval, 4)
	eb.Subscribe(func(a policies.Approval) {
		if a.State == policies.Pending {
			pending <- a
		}
	})

	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		_, err := ea.Check(context.Background(), call("git push origin main"))
		done <- result{err, time.Now()}
	}()
	var ap policies.Approval
	select {
	case ap = <-pending:
	case <-time.After(10 * time.Second):
		t.Fatal("B's watch did not show A's ask within 10s")
	}
	if l := eb.Approvals("acme"); len(l) != 1 || l[0].ID != ap.ID || l[0].Command != "git push origin main" {
		t.Fatalf("B lists %+v", l)
	}
	if l := eb.Approvals("beta"); len(l) != 0 {
		t.Errorf("another tenant lists %+v", l)
	}
	// Timed from before the write: A may hear of it before B's update
	// returns.
	deciding := time.Now()
	if _, err := eb.Decide("acme", ap.ID, true, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("A's call, approved on B: %v", r.err)
	}
	t.Logf("B's decision started → A's call returned: %v", r.at.Sub(deciding))

	// One decision wins.
	held, err := sa.Add(context.Background(), ask("acme"))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, st := range []*Store{sa, sb} {
		go func() {
			_, err := st.Finish(context.Background(), "acme", held.ID, policies.Denied, "x", "", time.Now())
			errs <- err
		}()
	}
	won := 0
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, policies.ErrAlreadyDecided):
			t.Error(err)
		}
	}
	if won != 1 {
		t.Errorf("%d decisions won", won)
	}
}
