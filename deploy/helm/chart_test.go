package helm

import (
	"context"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/approvals"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
)

const chartDir = "shellbox"

// render templates the chart and decodes every object: typed where client-go knows the kind, unstructured otherwise.
func render(t *testing.T, vals map[string]any) map[string]runtime.Object {
	t.Helper()
	rel, err := template(t, vals)
	if err != nil {
		t.Fatalf("template: %v", err)
	}
	objs := map[string]runtime.Object{}
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if u.Object == nil {
			continue
		}
		key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		if _, dup := objs[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			objs[key] = &u // not a client-go kind (ServiceMonitor)
			continue
		}
		objs[key] = obj
	}
	return objs
}

// template runs `helm template` (an install with DryRun and ClientOnly)
// as release "prod" in namespace "shellbox".
func template(t *testing.T, vals map[string]any) (*release.Release, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "prod", "shellbox"
	return inst.RunWithContext(context.Background(), ch, vals)
}

func get[T runtime.Object](t *testing.T, objs map[string]runtime.Object, key string) T {
	t.Helper()
	o, ok := objs[key].(T)
	if !ok {
		t.Fatalf("no %s among %v", key, slices.Sorted(maps.Keys(objs)))
	}
	return o
}

// helm lint passes with the defaults and with every value set.
func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"defaults": nil, "full": fullValues()} {
		res := action.NewLint().Run([]string{chartDir}, vals)
		for _, m := range res.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("%s: %s", name, m)
			}
		}
		for _, err := range res.Errors {
			t.Errorf("%s: %v", name, err)
		}
	}
}

const hashA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func fullValues() map[string]any {
	return map[string]any{
		"tokens":         map[string]any{"tenants": map[string]any{"acme": []any{hashA}}, "operatorTokens": []any{hashA}},
		"server":         map[string]any{"tenants": map[string]any{"acme": map[string]any{"maxConcurrentCalls": 4}}},
		"policies":       map[string]any{"default.yaml": "version: 1\n"},
		"serviceMonitor": map[string]any{"enabled": true},
		"config":         map[string]any{"limits": map[string]any{"tailBytes": 20000}},
		"replicaCount":   3,
		"service":        map[string]any{"sessionAffinity": "None"},
		"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
			"whenUnsatisfiable": "ScheduleAnyway", "labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/instance": "prod"}}}},
	}
}

// The defaults render exactly these objects.
func TestObjects(t *testing.T) {
	got := slices.Sorted(maps.Keys(render(t, nil)))
	want := []string{
		"ConfigMap/shellbox/prod-config", "ConfigMap/shellbox/prod-policies", "Deployment/shellbox/prod",
		"Namespace//prod-sessions", "PodDisruptionBudget/shellbox/prod", "Role/prod-sessions/prod",
		"RoleBinding/prod-sessions/prod", "Secret/shellbox/prod-egress-key", "Secret/shellbox/prod-tokens", "Service/shellbox/prod",
		"ServiceAccount/shellbox/prod",
	}
	if !slices.Equal(got, want) {
		t.Errorf("objects:\n got %v\nwant %v", got, want)
	}
}

// The server pod meets the restricted Pod Security level (the admission's
// own checks), runs non-root on a read-only root with no capabilities,
// probes /healthz and /readyz, and never pulls.
func TestServerPod(t *testing.T) {
	objs := render(t, nil)
	d := get[*appsv1.Deployment](t, objs, "Deployment/shellbox/prod")
	ps := d.Spec.Template.Spec
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := policy.AggregateCheckResults(ev.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()},
		&d.Spec.Template.ObjectMeta, &ps))
	if !r.Allowed {
		t.Errorf("the server pod fails restricted: %s: %s", r.ForbiddenReason(), r.ForbiddenDetail())
	}
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *d.Spec.Replicas)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("containers: %d", len(ps.Containers))
	}
	c := ps.Containers[0]
	sc := c.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
		sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || !*ps.SecurityContext.RunAsNonRoot {
		t.Errorf("security context: %+v (pod %+v)", sc, ps.SecurityContext)
	}
	podName := false
	for _, e := range c.Env {
		podName = podName || e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}
	if !podName {
		t.Errorf("env %+v: no POD_NAME from the downward API (the leader Lease's identity)", c.Env)
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent || c.Image != "shellbox:latest" {
		t.Errorf("image %s, pull policy %s", c.Image, c.ImagePullPolicy)
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "http" {
			t.Errorf("probe %s: %+v", path, probe)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: %+v", c.Resources)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" {
			t.Errorf("mount %s uses subPath: its file would never be updated", m.Name)
		}
		mounts[m.Name] = m.MountPath
	}
	if mounts["policies"] != "/etc/shellbox/policies" || mounts["tokens"] != "/etc/shellbox/tokens" || mounts["config"] != "/etc/shellbox/config" {
		t.Errorf("mounts: %v", mounts)
	}
	svc := get[*corev1.Service](t, objs, "Service/shellbox/prod")
	if !maps.Equal(svc.Spec.Selector, d.Spec.Selector.MatchLabels) || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("service: %+v", svc.Spec)
	}
}

// The Role grants what kube calls, exactly, in the sessions
// namespace, to the server's ServiceAccount.
func TestRole(t *testing.T) {
	objs := render(t, nil)
	role := get[*rbacv1.Role](t, objs, "Role/prod-sessions/prod")
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "get", "list", "delete", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch", "create", "delete"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"shellbox.dev"}, Resources: []string{"approvals"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	}
	if len(role.Rules) != len(want) {
		t.Fatalf("rules: %+v", role.Rules)
	}
	for i := range want {
		g, w := role.Rules[i], want[i]
		if !slices.Equal(g.APIGroups, w.APIGroups) || !slices.Equal(g.Resources, w.Resources) || !slices.Equal(g.Verbs, w.Verbs) ||
			len(g.ResourceNames) > 0 || len(g.NonResourceURLs) > 0 {
			t.Errorf("rule %d: %+v, want %+v", i, g, w)
		}
	}
	rb := get[*rbacv1.RoleBinding](t, objs, "RoleBinding/prod-sessions/prod")
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "prod" || len(rb.Subjects) != 1 ||
		rb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "prod", Namespace: "shellbox"}) {
		t.Errorf("binding: %+v", rb)
	}
	ns := get[*corev1.Namespace](t, objs, "Namespace//prod-sessions")
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "baseline" || ns.Labels["pod-security.kubernetes.io/warn"] != "restricted" {
		t.Errorf("sessions namespace labels: %v", ns.Labels)
	}
	// Approvals in memory: no rule for the Approval objects.
	objs = render(t, map[string]any{"kube": map[string]any{"approvals": "memory"}})
	role = get[*rbacv1.Role](t, objs, "Role/prod-sessions/prod")
	if len(role.Rules) != len(want)-1 || slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.APIGroups, "shellbox.dev") }) {
		t.Errorf("kube.approvals memory: rules %+v", role.Rules)
	}
	if cfg := loadRendered(t, objs); cfg.Kube.Approvals != config.ApprovalsMemory {
		t.Errorf("kube.approvals %q", cfg.Kube.Approvals)
	}
}

// The chart's crds/ holds the Approval CRD kube/approvals uses.
func TestApprovalCRD(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	crds := chrt.CRDObjects()
	if len(crds) != 1 {
		t.Fatalf("%d CRDs", len(crds))
	}
	var crd struct {
		Metadata struct{ Name string }
		Spec     struct {
			Group, Scope string
			Names        struct{ Kind, Plural string }
			Versions     []struct {
				Name            string
				Served, Storage bool
			}
		}
	}
	if err := yaml.Unmarshal(crds[0].File.Data, &crd); err != nil {
		t.Fatal(err)
	}
	g := approvals.GVR
	if crd.Metadata.Name != approvals.CRDName || crd.Spec.Group != g.Group || crd.Spec.Scope != "Namespaced" ||
		crd.Spec.Names.Kind != approvals.Kind || crd.Spec.Names.Plural != g.Resource ||
		len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != g.Version || !crd.Spec.Versions[0].Served || !crd.Spec.Versions[0].Storage {
		t.Errorf("CRD %+v", crd)
	}
}

// loadRendered writes the rendered config and tokens where a test can
// read them and loads them with package config, as the server does.
func loadRendered(t *testing.T, objs map[string]runtime.Object) config.Config {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SHELLBOX_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	dir := t.TempDir()
	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/shellbox/prod-config")
	file := filepath.Join(dir, "shellbox.yaml")
	os.WriteFile(file, []byte(cm.Data["shellbox.yaml"]), 0o644)
	sec := get[*corev1.Secret](t, objs, "Secret/shellbox/prod-tokens")
	tokens := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(tokens, []byte(sec.StringData["tokens.yaml"]), 0o600)
	if !strings.Contains(cm.Data["shellbox.yaml"], "tokensFile: /etc/shellbox/tokens/tokens.yaml") {
		t.Errorf("the config does not read the mounted tokens:\n%s", cm.Data["shellbox.yaml"])
	}
	t.Setenv("SHELLBOX_SERVER_TOKENSFILE", tokens)
	cfg, err := config.Load(nil, file)
	if err != nil {
		t.Fatalf("the rendered config does not load: %v\n%s", err, cm.Data["shellbox.yaml"])
	}
	return cfg
}

// The defaults' ConfigMap is a valid kube configuration, whose namespace,
// release, agent image and server selector are the chart's own objects'.
func TestConfigDefaults(t *testing.T) {
	objs := render(t, nil)
	cfg := loadRendered(t, objs)
	d := get[*appsv1.Deployment](t, objs, "Deployment/shellbox/prod")
	k := cfg.Kube.Runtime()
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Backend != "kube" || k.Namespace != "prod-sessions" || k.Release != "prod" || cfg.Owner() != "prod" ||
		k.AgentImage != d.Spec.Template.Spec.Containers[0].Image || k.AgentPath != kube.DefaultAgentPath ||
		k.ServerNamespace != "shellbox" || k.RuntimeClasses["runsc"] != "gvisor" || k.PodSecurity != "baseline" ||
		k.WorkspaceMedium != sandbox.WorkspaceMemory {
		t.Errorf("kube config: %+v", k)
	}
	// kube.workspaceMedium reaches the runtime's config.
	if k := loadRendered(t, render(t, map[string]any{"kube": map[string]any{"workspaceMedium": "disk"}})).Kube.Runtime(); k.WorkspaceMedium != sandbox.WorkspaceDisk {
		t.Errorf("kube.workspaceMedium disk: rendered %q", k.WorkspaceMedium)
	}
	if cfg.Kube.Approvals != config.ApprovalsCluster {
		t.Errorf("kube.approvals %q", cfg.Kube.Approvals)
	}
	// The NetworkPolicy the server keeps admits exactly the server pods.
	if !maps.Equal(k.ServerSelector, d.Spec.Selector.MatchLabels) {
		t.Errorf("kube.serverSelector %v, server pods %v", k.ServerSelector, d.Spec.Selector.MatchLabels)
	}
	if cfg.Server.Listen != ":8080" || cfg.Policies.Dir != "" || cfg.Audit.File != "/var/lib/shellbox/audit.log" || len(cfg.Server.Tenants) != 0 {
		t.Errorf("server config: listen %q, policies %q, audit %q, tenants %v", cfg.Server.Listen, cfg.Policies.Dir, cfg.Audit.File, cfg.Server.Tenants)
	}
}

// Tokens, tenants, policies and extra config reach the server's
// configuration; the policy files are ones the engine loads.
func TestConfigValues(t *testing.T) {
	objs := render(t, fullValues())
	cfg := loadRendered(t, objs)
	acme := cfg.Server.Tenants["acme"]
	if !slices.Equal(acme.Tokens, []string{hashA}) || acme.MaxConcurrentCalls != 4 || !slices.Equal(cfg.Server.OperatorTokens, []string{hashA}) {
		t.Errorf("tenants %+v, operator tokens %v", cfg.Server.Tenants, cfg.Server.OperatorTokens)
	}
	if cfg.Policies.Dir != "/etc/shellbox/policies" || cfg.Limits.TailBytes != 20000 {
		t.Errorf("policies.dir %q, limits.tailBytes %d", cfg.Policies.Dir, cfg.Limits.TailBytes)
	}
	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/shellbox/prod-policies")
	dir := t.TempDir()
	for name, body := range cm.Data {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	e, err := policies.Open(dir, policies.Options{NoWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Ready(); err != nil {
		t.Errorf("the rendered policies do not load: %v", err)
	}
	if _, err := e.Policy("acme"); err != nil {
		t.Errorf("acme's policy: %v", err)
	}
	// A config change rolls the server (it reads its config once); a
	// policy change does not (it reloads them).
	d0 := get[*appsv1.Deployment](t, render(t, nil), "Deployment/shellbox/prod")
	d1 := get[*appsv1.Deployment](t, objs, "Deployment/shellbox/prod")
	if d0.Spec.Template.Annotations["checksum/config"] == d1.Spec.Template.Annotations["checksum/config"] {
		t.Errorf("the config checksum did not change with the config")
	}
}

// N replicas roll one at a time, a new one ready before an old one goes,
// and an old one leaves without losing a call: it sleeps in preStop (out
// of the endpoints, still serving), then the server's drain delay, then
// its drain, all within the grace period; the Service keeps a client on
// one replica (its legacy MCP sessions), and drains leave N-1 serving.
func TestReplicas(t *testing.T) {
	for _, tc := range []struct {
		name                              string
		vals                              map[string]any
		replicas, preStop, delay, timeout int
		affinity                          corev1.ServiceAffinity
	}{
		{"defaults", nil, 2, 5, 2, 30, corev1.ServiceAffinityClientIP},
		{"set", map[string]any{
			"replicaCount": 3,
			"server":       map[string]any{"preStopSleepSeconds": 8, "drainDelaySeconds": 4, "shutdownTimeoutSeconds": 60},
			"service":      map[string]any{"sessionAffinity": "None"},
		}, 3, 8, 4, 60, corev1.ServiceAffinityNone},
		{"no preStop", map[string]any{"server": map[string]any{"preStopSleepSeconds": 0}}, 2, 0, 2, 30, corev1.ServiceAffinityClientIP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.vals)
			d := get[*appsv1.Deployment](t, objs, "Deployment/shellbox/prod")
			if *d.Spec.Replicas != int32(tc.replicas) {
				t.Errorf("replicas %d, want %d", *d.Spec.Replicas, tc.replicas)
			}
			st := d.Spec.Strategy
			if st.Type != appsv1.RollingUpdateDeploymentStrategyType || st.RollingUpdate == nil ||
				st.RollingUpdate.MaxUnavailable.String() != "0" || st.RollingUpdate.MaxSurge.String() != "1" {
				t.Errorf("strategy %+v: want RollingUpdate, maxUnavailable 0, maxSurge 1", st)
			}
			ps := d.Spec.Template.Spec
			c := ps.Containers[0]
			switch {
			case tc.preStop == 0 && c.Lifecycle != nil:
				t.Errorf("preStop 0: lifecycle %+v", c.Lifecycle)
			case tc.preStop > 0 && (c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil ||
				c.Lifecycle.PreStop.Sleep.Seconds != int64(tc.preStop) || c.Lifecycle.PreStop.Exec != nil):
				t.Errorf("lifecycle %+v: want a preStop sleep of %d s (no exec: the image has no shell)", c.Lifecycle, tc.preStop)
			}
			if want := int64(tc.preStop + tc.delay + tc.timeout + 10); *ps.TerminationGracePeriodSeconds != want {
				t.Errorf("terminationGracePeriodSeconds %d, want %d", *ps.TerminationGracePeriodSeconds, want)
			}
			cfg := loadRendered(t, objs)
			if cfg.Server.DrainDelay != time.Duration(tc.delay)*time.Second || cfg.Server.ShutdownTimeout != time.Duration(tc.timeout)*time.Second {
				t.Errorf("server.drainDelay %s, shutdownTimeout %s", cfg.Server.DrainDelay, cfg.Server.ShutdownTimeout)
			}
			if len(ps.TopologySpreadConstraints) != 1 || ps.TopologySpreadConstraints[0].TopologyKey != "kubernetes.io/hostname" ||
				ps.TopologySpreadConstraints[0].WhenUnsatisfiable != corev1.ScheduleAnyway ||
				!maps.Equal(ps.TopologySpreadConstraints[0].LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("topology spread: %+v", ps.TopologySpreadConstraints)
			}
			svc := get[*corev1.Service](t, objs, "Service/shellbox/prod")
			if svc.Spec.SessionAffinity != tc.affinity {
				t.Errorf("sessionAffinity %s, want %s", svc.Spec.SessionAffinity, tc.affinity)
			}
			if tc.affinity == corev1.ServiceAffinityClientIP && (svc.Spec.SessionAffinityConfig == nil ||
				*svc.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds != 10800) {
				t.Errorf("sessionAffinityConfig %+v", svc.Spec.SessionAffinityConfig)
			}
			if tc.affinity == corev1.ServiceAffinityNone && svc.Spec.SessionAffinityConfig != nil {
				t.Errorf("sessionAffinity None with a config %+v", svc.Spec.SessionAffinityConfig)
			}
			pdb := get[*policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/shellbox/prod")
			if pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
				t.Errorf("pdb: %+v", pdb.Spec)
			}
		})
	}
	// Given spread constraints replace the default.
	own := []any{map[string]any{"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
		"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/instance": "prod"}}}}
	d := get[*appsv1.Deployment](t, render(t, map[string]any{"topologySpreadConstraints": own}), "Deployment/shellbox/prod")
	if tsc := d.Spec.Template.Spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].TopologyKey != "topology.kubernetes.io/zone" || tsc[0].MaxSkew != 2 {
		t.Errorf("topologySpreadConstraints: %+v", tsc)
	}
}

// serviceMonitor.enabled and podDisruptionBudget.enabled add and remove
// their objects.
func TestToggles(t *testing.T) {
	objs := render(t, map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "15s"},
		"podDisruptionBudget": map[string]any{"enabled": false}})
	sm := get[*unstructured.Unstructured](t, objs, "ServiceMonitor/shellbox/prod")
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || len(eps) != 1 ||
		eps[0].(map[string]any)["path"] != "/metrics" || eps[0].(map[string]any)["interval"] != "15s" {
		t.Errorf("service monitor: %v", sm.Object)
	}
	if _, ok := objs["PodDisruptionBudget/shellbox/prod"]; ok {
		t.Errorf("a PodDisruptionBudget with podDisruptionBudget.enabled false")
	}
	pdb := get[*policyv1.PodDisruptionBudget](t, render(t, nil), "PodDisruptionBudget/shellbox/prod")
	if pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] != "prod" {
		t.Errorf("pdb: %+v", pdb.Spec)
	}
	if _, ok := render(t, map[string]any{"sessions": map[string]any{"createNamespace": false}})["Namespace//prod-sessions"]; ok {
		t.Errorf("a Namespace with sessions.createNamespace false")
	}
}

// The session pods cannot share the server's namespace: they get their own
// Pod Security level.
func TestSessionsNamespaceApart(t *testing.T) {
	_, err := template(t, map[string]any{"sessions": map[string]any{"namespace": "shellbox"}})
	if err == nil || !strings.Contains(err.Error(), "sessions.namespace must differ from the release's namespace") {
		t.Errorf("same namespace: %v", err)
	}
}

// snapshots.store s3 reaches the server's config with the secret key as a
// file of the named Secret, mounted read-only; none is the default; a
// store that cannot work on Kubernetes (dir) or an s3 store without its
// endpoint, bucket or Secret is refused by name when templating.
func TestSnapshots(t *testing.T) {
	if cfg := loadRendered(t, render(t, nil)); cfg.Snapshots.StoreKind(cfg.Backend) != config.StoreNone {
		t.Errorf("default store %q", cfg.Snapshots.StoreKind(cfg.Backend))
	}
	s3 := map[string]any{"store": "s3", "suspendedTTL": "48h", "s3": map[string]any{
		"endpoint": "minio.store:9000", "bucket": "sessions", "prefix": "prod/", "insecure": true,
		"accessKey": "AKID", "secretKeySecret": "store-creds", "secretKeySecretKey": "sk"}}
	objs := render(t, map[string]any{"snapshots": s3})
	cfg := loadRendered(t, objs)
	sn := cfg.Snapshots
	if sn.StoreKind(cfg.Backend) != config.StoreS3 || sn.S3.Endpoint != "minio.store:9000" || sn.S3.Bucket != "sessions" ||
		sn.S3.Prefix != "prod/" || !sn.S3.Insecure || sn.S3.AccessKey != "AKID" || sn.S3.SecretKey != "" ||
		sn.S3.SecretKeyFile != "/etc/shellbox/snapshots-s3/sk" || sn.SuspendedTTL != 48*time.Hour {
		t.Errorf("snapshots config: %+v", sn)
	}
	if cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/shellbox/prod-config"); strings.Contains(cm.Data["shellbox.yaml"], "secretKey:") {
		t.Errorf("a secret key in the ConfigMap:\n%s", cm.Data["shellbox.yaml"])
	}
	pod := get[*appsv1.Deployment](t, objs, "Deployment/shellbox/prod").Spec.Template.Spec
	var mounted, volume bool
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.Name == "snapshots-s3" {
			mounted = m.MountPath == "/etc/shellbox/snapshots-s3" && m.ReadOnly
		}
	}
	for _, v := range pod.Volumes {
		if v.Name == "snapshots-s3" && v.Secret != nil {
			volume = v.Secret.SecretName == "store-creds" && len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "sk" && v.Secret.Items[0].Path == "sk"
		}
	}
	if !mounted || !volume {
		t.Errorf("the secret key's Secret: mounted %v, volume %v: %+v", mounted, volume, pod.Volumes)
	}
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"store": "dir"}, `snapshots.store "dir": want none or s3`},
		{map[string]any{"store": "s3", "s3": map[string]any{"endpoint": "e:1", "bucket": "b"}}, "snapshots.store s3 needs"},
		{map[string]any{"store": "s3", "s3": map[string]any{"bucket": "b", "secretKeySecret": "s"}}, "snapshots.store s3 needs"},
	} {
		if _, err := template(t, map[string]any{"snapshots": tc.vals}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("snapshots %v: %v, want an error with %q", tc.vals, err, tc.want)
		}
	}
}
