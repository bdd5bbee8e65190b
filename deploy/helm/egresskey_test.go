package helm

import (
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/shellbox/shellbox/secrets"
)

// TestEgressKey: every replica reads one egress key (egress.keyFile), the
// chart's Secret or the operator's, mounted read-only; the chart's is a
// key the server takes.
func TestEgressKey(t *testing.T) {
	objs := render(t, nil)
	cfg := loadRendered(t, objs)
	if cfg.Egress.KeyFile != "/etc/shellbox/egress-key/key" {
		t.Errorf("egress.keyFile %q", cfg.Egress.KeyFile)
	}
	sec := get[*corev1.Secret](t, objs, "Secret/shellbox/prod-egress-key")
	key := sec.Data["key"]
	if len(key) < secrets.MinDerivedKey {
		t.Fatalf("the chart's egress key is %d bytes", len(key))
	}
	f := filepath.Join(t.TempDir(), "key")
	os.WriteFile(f, key, 0o400)
	if _, err := secrets.LoadDerivedCAs(f); err != nil {
		t.Errorf("the server refuses the chart's key: %v", err)
	}
	if again := get[*corev1.Secret](t, render(t, nil), "Secret/shellbox/prod-egress-key"); string(again.Data["key"]) == string(key) {
		t.Error("two installs were given the same key")
	}
	for _, tc := range []struct {
		vals   map[string]any
		secret string
	}{
		{nil, "prod-egress-key"},
		{map[string]any{"egressKey": map[string]any{"existingSecret": "release-root"}}, "release-root"},
	} {
		objs := render(t, tc.vals)
		if _, made := objs["Secret/shellbox/prod-egress-key"]; made != (tc.vals == nil) {
			t.Errorf("%v: the chart's Secret rendered: %v", tc.vals, made)
		}
		pod := get[*appsv1.Deployment](t, objs, "Deployment/shellbox/prod").Spec.Template.Spec
		var mounted, volume bool
		for _, m := range pod.Containers[0].VolumeMounts {
			if m.Name == "egress-key" {
				mounted = m.MountPath == "/etc/shellbox/egress-key" && m.ReadOnly
			}
		}
		for _, v := range pod.Volumes {
			if v.Name == "egress-key" && v.Secret != nil {
				volume = v.Secret.SecretName == tc.secret && len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "key" && v.Secret.Items[0].Path == "key"
			}
		}
		if !mounted || !volume {
			t.Errorf("%v: egress key mounted %v, volume of Secret %s %v: %+v", tc.vals, mounted, tc.secret, volume, pod.Volumes)
		}
	}
}
