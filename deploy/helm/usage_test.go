package helm

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestUsageKubeletStats: get on nodes/proxy (the kubelet summaries usage
// reads on Kubernetes) is granted only when usage.kubeletStats asks for
// it, to the release's service account, and nothing more.
func TestUsageKubeletStats(t *testing.T) {
	for key := range render(t, nil) {
		if key == "ClusterRole//prod-shellbox-usage" || key == "ClusterRoleBinding//prod-shellbox-usage" {
			t.Errorf("%s rendered without usage.kubeletStats", key)
		}
	}
	objs := render(t, map[string]any{"usage": map[string]any{"kubeletStats": true}})
	cr := get[*rbacv1.ClusterRole](t, objs, "ClusterRole//prod-shellbox-usage")
	if len(cr.Rules) != 1 || !slices.Equal(cr.Rules[0].Resources, []string{"nodes/proxy"}) || !slices.Equal(cr.Rules[0].Verbs, []string{"get"}) ||
		!slices.Equal(cr.Rules[0].APIGroups, []string{""}) {
		t.Errorf("rules: %+v", cr.Rules)
	}
	b := get[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding//prod-shellbox-usage")
	if b.RoleRef.Name != cr.Name || len(b.Subjects) != 1 || b.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "prod", Namespace: "shellbox"}) {
		t.Errorf("binding: %+v", b)
	}
}
