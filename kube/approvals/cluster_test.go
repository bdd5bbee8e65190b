package approvals

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/policies"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRD installs the chart's Approval CRD if the cluster lacks it,
// labelled kubetest.LabelTest, and waits until it is established. It is
// left installed: deleting a CRD deletes every Approval of the cluster,
// also those of a chart release another test installed meanwhile (Helm
// installs crds/ only when absent), and the cluster's teardown removes it.
func installCRD(t *testing.T, dc dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	crds := dc.Resource(crdGVR)
	if _, err := crds.Get(ctx, CRDName, metav1.GetOptions{}); err == nil {
		return
	} else if !apierrors.IsNotFound(err) {
		t.Fatalf("get CRD %s: %v", CRDName, err)
	}
	b, err := os.ReadFile(filepath.Join("..", "deploy", "helm", "shellbox", "crds", "approvals.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var u unstructured.Unstructured
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[kubetest.LabelTest] = "1"
	u.SetLabels(labels)
	if _, err := crds.Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CRD %s: %v", CRDName, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := crds.Get(ctx, CRDName, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not established within 30s: %v", CRDName, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

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
	installCRD(t, dc)
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
