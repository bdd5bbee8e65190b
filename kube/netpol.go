package kube

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/shellbox/shellbox/sandbox"
)

// NetworkPolicyName is the name of the release's session NetworkPolicy.
func NetworkPolicyName(release string) string {
	return "shellbox-sessions-" + part(release) // part: DNS-1123, at most 20 bytes
}

// networkPolicy returns the NetworkPolicy of the release's session pods,
// or nil when cfg names no server pods (ServerSelector empty: the chart
// installs it). It is pure. The session pods of the release get:
//
//   - no egress at all (policyTypes Egress, no rule): not the API server,
//     not another session pod, not the cluster DNS, nothing outside. The
//     egress allowlist and network grants work through the relay on the
//     agent connection, which the server opens, not the pod;
//   - ingress only from the server pods (ServerSelector, in
//     ServerNamespace) to the agent port.
//
// The kubelet's TCP readiness probe comes from the node, which most
// implementations let through whatever the policy says (the API leaves
// node traffic undefined): check it on the cluster's implementation.
func networkPolicy(cfg Config) *networkingv1.NetworkPolicy {
	if len(cfg.ServerSelector) == 0 {
		return nil
	}
	peer := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: maps.Clone(cfg.ServerSelector)}}
	if cfg.ServerNamespace != cfg.Namespace {
		peer.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": cfg.ServerNamespace}}
	}
	tcp := ptr(corev1.ProtocolTCP)
	port := intstr.FromInt32(cfg.AgentPort)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: NetworkPolicyName(cfg.Release), Namespace: cfg.Namespace,
			Labels: map[string]string{LabelManagedBy: "shellbox", LabelRelease: LabelValue(cfg.Release)},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				sandbox.LabelManaged: "true", LabelRelease: LabelValue(cfg.Release),
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{peer},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: tcp, Port: &port}},
			}},
		},
	}
}

// EnsureNetworkPolicy creates the release's session NetworkPolicy, or
// updates it to what the configuration says; a server calls it at start.
// Without a ServerSelector it does nothing. A NetworkPolicy of that name
// that shellbox did not create is ErrConflict and left alone. RBAC:
// networkpolicies get, create, update in the namespace.
func (r *Runtime) EnsureNetworkPolicy(ctx context.Context) error {
	want := networkPolicy(r.cfg)
	if want == nil {
		return nil
	}
	nps := r.cs.NetworkingV1().NetworkPolicies(r.cfg.Namespace)
	cur, err := nps.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err := nps.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return r.convert(err, "networkpolicies", "create network policy %s", want.Name)
		}
		return nil
	}
	if err != nil {
		return r.convert(err, "networkpolicies", "get network policy %s", want.Name)
	}
	if cur.Labels[LabelManagedBy] != "shellbox" {
		return fmt.Errorf("%w: kube: network policy %s/%s was not created by shellbox", sandbox.ErrConflict, r.cfg.Namespace, want.Name)
	}
	if equality.Semantic.DeepEqual(cur.Spec, want.Spec) && equality.Semantic.DeepEqual(cur.Labels, want.Labels) {
		return nil
	}
	cur.Spec, cur.Labels = want.Spec, want.Labels
	if _, err := nps.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return r.convert(err, "networkpolicies", "update network policy %s", want.Name)
	}
	return nil
}
