package kube

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

// TestConformance runs the runtime conformance suite on the fake API
// server, whose "kubelet" starts every pod at once. Nothing runs in the
// pods (Exec nil): the checks from inside wait for the real cluster.
func TestConformance(t *testing.T) {
	c := newCluster(t)
	sandboxtest.Run(t, sandboxtest.Harness{
		Tenant: "conf",
		New: func(t *testing.T) sandbox.Runtime {
			// A new Runtime on the same API server: a restarted server.
			return c.runtime(t, nil)
		},
		Spec: func(t *testing.T, tenant, session, owner string) sandbox.Spec {
			s := testSpec(t)
			s.Tenant, s.Session, s.Owner = tenant, session, owner
			return s
		},
		Foreign: func(t *testing.T, tenant, session string) func() bool {
			name := PodName(tenant, session)
			pods := c.cs.CoreV1().Pods("sessions")
			if _, err := pods.Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sessions"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pods.Delete(context.Background(), name, metav1.DeleteOptions{}) })
			return func() bool { _, err := pods.Get(context.Background(), name, metav1.GetOptions{}); return err == nil }
		},
	})
}
