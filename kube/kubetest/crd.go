package kubetest

import (
	"context"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ApplyCRD makes the cluster's CustomResourceDefinition the one file (a
// chart's crds/ YAML) defines, labelled LabelTest: created when absent,
// its spec replaced when present (a cluster kept from an earlier run holds
// the schema of that run's tree, and Helm installs crds/ only when they are
// absent), and waits until it is established. It is left installed:
// deleting a CRD deletes every object of its kind, also those of a chart
// release another test installed meanwhile; .ci/teardown-kube.sh deletes
// the cluster's data.
func (c *Cluster) ApplyCRD(t testing.TB, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var want unstructured.Unstructured
	if err := yaml.Unmarshal(b, &want.Object); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	labels := want.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelTest] = "1"
	want.SetLabels(labels)
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds, name := dc.Resource(crdGVR), want.GetName()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	changed := false
	// Tests in other packages apply the same file at the same time.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := crds.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = crds.Create(ctx, want.DeepCopy(), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(crdGVR.GroupResource(), name, err)
			}
			return err
		} else if err != nil {
			return err
		}
		cur.Object["spec"] = want.Object["spec"]
		cur.SetLabels(labels)
		up, err := crds.Update(ctx, cur, metav1.UpdateOptions{})
		changed = err == nil && up.GetGeneration() != cur.GetGeneration()
		return err
	})
	if err != nil {
		t.Fatalf("apply CRD %s: %v", name, err)
	}
	if changed {
		// The API server serves a changed schema once its CRD handler
		// has seen the update, which status does not report.
		t.Logf("CRD %s: the cluster held an older spec; replaced by %s", name, file)
		time.Sleep(2 * time.Second)
	}
	for {
		got, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("CRD %s not established within a minute: %v", name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
