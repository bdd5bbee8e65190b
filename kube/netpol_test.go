package kube

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/shellbox/shellbox/sandbox"
)

// TestNetworkPolicy: every field of the session pods' policy: no egress,
// ingress from the server pods to the agent port only.
func TestNetworkPolicy(t *testing.T) {
	if np := networkPolicy(testConfig(t, nil)); np != nil {
		t.Errorf("a policy without a server selector: %+v", np)
	}
	cfg := testConfig(t, func(c *Config) {
		c.ServerSelector = map[string]string{"app.kubernetes.io/name": "shellbox"}
		c.ServerNamespace = "shellbox-system"
	})
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(7070)
	want := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shellbox-sessions-prod", Namespace: "sessions",
			Labels: map[string]string{"app.kubernetes.io/managed-by": "shellbox", "org.shellbox.release": "prod"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"org.shellbox.managed": "true", "org.shellbox.release": "prod"}},
			PolicyTypes: []networkingv1.PolicyType{"Ingress", "Egress"},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "shellbox"}},
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "shellbox-system"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
	got := networkPolicy(cfg)
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("policy differs (-got +want):\n%s", diff.Diff(got, want))
	}
	if got.Spec.Egress != nil {
		t.Errorf("egress rules: %+v, want none (deny all)", got.Spec.Egress)
	}
	// The session pods are what it selects.
	pod, _ := translate(testSpec(t), cfg)
	for k, v := range got.Spec.PodSelector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("the policy selects %s=%s, the pod has %q", k, v, pod.Labels[k])
		}
	}
	// Same namespace: no namespace selector.
	cfg.ServerNamespace = cfg.Namespace
	if np := networkPolicy(cfg); np.Spec.Ingress[0].From[0].NamespaceSelector != nil {
		t.Errorf("namespace selector for servers in the sessions' namespace")
	}
}

// TestEnsureNetworkPolicy: created, left alone when right, updated when
// not, and a foreign one of that name is a conflict.
func TestEnsureNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	sel := func(cfg *Config) { cfg.ServerSelector = map[string]string{"app": "shellbox"} }
	r := c.runtime(t, sel)
	nps := c.cs.NetworkingV1().NetworkPolicies("sessions")
	if err := r.EnsureNetworkPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := nps.Get(ctx, "shellbox-sessions-prod", metav1.GetOptions{})
	if err != nil || !equality.Semantic.DeepEqual(got.Spec, networkPolicy(r.cfg).Spec) {
		t.Fatalf("created: %+v, %v", got, err)
	}
	if err := r.EnsureNetworkPolicy(ctx); err != nil {
		t.Errorf("again: %v", err)
	}
	r2 := c.runtime(t, func(cfg *Config) { sel(cfg); cfg.AgentPort = 9000 })
	if err := r2.EnsureNetworkPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ = nps.Get(ctx, "shellbox-sessions-prod", metav1.GetOptions{})
	if got.Spec.Ingress[0].Ports[0].Port.IntValue() != 9000 {
		t.Errorf("not updated: %+v", got.Spec.Ingress)
	}
	if err := nps.Delete(ctx, got.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nps.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: got.Name, Namespace: "sessions"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.EnsureNetworkPolicy(ctx); !errors.Is(err, sandbox.ErrConflict) {
		t.Errorf("over a foreign policy: %v, want ErrConflict", err)
	}
	if err := c.runtime(t, nil).EnsureNetworkPolicy(ctx); err != nil {
		t.Errorf("without a selector: %v", err)
	}
}
