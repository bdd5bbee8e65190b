package helm

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestSecretsFromASecret: secrets.existingSecret is mounted read-only
// (whole: its keys are the secrets' names) as the server's secrets.dir;
// without it the server has no secrets dir and mounts nothing.
func TestSecretsFromASecret(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		dir  string
	}{
		{nil, ""},
		{map[string]any{"secrets": map[string]any{"existingSecret": "agent-credentials"}}, "/etc/shellbox/secrets"},
	} {
		objs := render(t, tc.vals)
		if cfg := loadRendered(t, objs); cfg.Secrets.Dir != tc.dir {
			t.Errorf("%v: secrets.dir %q, want %q", tc.vals, cfg.Secrets.Dir, tc.dir)
		}
		pod := get[*appsv1.Deployment](t, objs, "Deployment/shellbox/prod").Spec.Template.Spec
		var mounted, volume bool
		for _, m := range pod.Containers[0].VolumeMounts {
			if m.Name == "secrets" {
				mounted = m.MountPath == "/etc/shellbox/secrets" && m.ReadOnly
			}
		}
		for _, v := range pod.Volumes {
			if v.Name == "secrets" && v.Secret != nil {
				volume = v.Secret.SecretName == "agent-credentials" && len(v.Secret.Items) == 0
			}
		}
		if want := tc.dir != ""; mounted != want || volume != want {
			t.Errorf("%v: secrets mounted %v, volume %v, want %v", tc.vals, mounted, volume, want)
		}
	}
}
