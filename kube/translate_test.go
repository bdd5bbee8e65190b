package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/shellbox/shellbox/agent/egress"
	"github.com/shellbox/shellbox/sandbox"
)

func testConfig(t *testing.T, mod func(*Config)) Config {
	t.Helper()
	cfg := Config{Namespace: "sessions", Release: "prod", AgentImage: "shellbox:1.0"}
	if mod != nil {
		mod(&cfg)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func testSpec(t *testing.T, opts ...sandbox.Opt) sandbox.Spec {
	t.Helper()
	s, err := sandbox.NewSpec("acme", "s-1", append([]sandbox.Opt{
		sandbox.WithImage("shellbox-test:latest"),
		sandbox.WithAgentArgs("--uid", "1000", "--gid", "1000"),
		sandbox.WithEnv("LANG", "C.UTF-8"),
		sandbox.WithLabels(map[string]string{"team": "blue"}),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.Owner = "prod"
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

// wantPod is the pod of testSpec on testConfig at the baseline level,
// written out field by field: every decision of translate is here.
func wantPod() *corev1.Pod {
	f, tr := false, true
	zero := int64(0)
	grace := int64(2)
	name := PodName("acme", "s-1")
	res := corev1.ResourceRequirements{
		Limits: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"),
		},
		Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
		},
	}
	mem := func(n string, size string) corev1.Volume {
		q := resource.MustParse(size)
		return corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &q}}}
	}
	agentDir := resource.MustParse("128Mi")
	dp := corev1.DefaultProcMount
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "sessions",
			Labels: map[string]string{
				"team":                         "blue",
				"org.shellbox.managed":         "true",
				"org.shellbox.tenant":          "acme",
				"org.shellbox.session":         "s-1",
				"org.shellbox.owner":           "prod",
				"org.shellbox.runtime":         "runc",
				"org.shellbox.network":         "none",
				"org.shellbox.release":         "prod",
				"app.kubernetes.io/managed-by": "shellbox",
			},
			Annotations: map[string]string{
				"org.shellbox.tenant":  "acme",
				"org.shellbox.session": "s-1",
				"org.shellbox.owner":   "prod",
				"org.shellbox.image":   "shellbox-test:latest",
				"org.shellbox.runtime": "runc",
				"org.shellbox.network": "none",
				"org.shellbox.mounts":  "[]",
			},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name:            "install-agent",
				Image:           "shellbox:1.0",
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/usr/local/bin/shellbox-agent"},
				Args: []string{"--install", "/shellbox-install/agent", "--token-out", "/run/shellbox/token/token",
					"--own", "/workspace", "--uid", "1000", "--gid", "1000"},
				// The token: in the init container's environment only.
				Env: []corev1.EnvVar{{Name: "SHELLBOX_AGENT_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "token"}}}},
				Resources: res,
				SecurityContext: &corev1.SecurityContext{
					Privileged: &f, AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &tr, ProcMount: &dp,
					RunAsUser: &zero, RunAsGroup: &zero, RunAsNonRoot: &f,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN"}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "agent", MountPath: "/shellbox-install"},
					{Name: "workspace", MountPath: "/workspace"},
					{Name: "token", MountPath: "/run/shellbox/token"},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Containers: []corev1.Container{{
				Name:            "sandbox",
				Image:           "shellbox-test:latest",
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/.shellbox/agent"},
				Args:            []string{"--uid", "1000", "--gid", "1000", "--listen", ":7070", "--spill-dir", "/run/shellbox/spill", "--token-file", "/run/shellbox/token/token"},
				Env: []corev1.EnvVar{
					{Name: "LANG", Value: "C.UTF-8"},
					{Name: "SHELLBOX_SPILL_BYTES", Value: "67108864"},
				},
				WorkingDir: "/workspace",
				Ports:      []corev1.ContainerPort{{Name: "agent", ContainerPort: 7070, Protocol: corev1.ProtocolTCP}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("agent")}},
					PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
				},
				Resources: res,
				SecurityContext: &corev1.SecurityContext{
					Privileged: &f, AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &tr, ProcMount: &dp,
					RunAsUser: &zero, RunAsGroup: &zero, RunAsNonRoot: &f,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"SETUID", "SETGID", "KILL"}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "agent", MountPath: "/.shellbox", ReadOnly: true},
					{Name: "workspace", MountPath: "/workspace"},
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "spill", MountPath: "/run/shellbox/spill"},
					{Name: "token", MountPath: "/run/shellbox/token"},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			ShareProcessNamespace:         &f,
			Hostname:                      "sandbox",
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				RunAsNonRoot:   &f,
			},
			Volumes: []corev1.Volume{
				{Name: "agent", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &agentDir}}},
				mem("workspace", "512Mi"),
				mem("tmp", "128Mi"),
				mem("spill", "64Mi"),
				mem("token", "64Ki"),
			},
		},
	}
}

// TestTranslateBaseline: every field of the default (baseline) pod.
func TestTranslateBaseline(t *testing.T) {
	pod, secret := translate(testSpec(t), testConfig(t, nil))
	want := wantPod()
	if !equality.Semantic.DeepEqual(pod, want) {
		t.Errorf("pod differs (-got +want):\n%s", diff.Diff(pod, want))
	}
	wantSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: want.Name, Namespace: "sessions", Labels: want.Labels,
			Annotations: map[string]string{"org.shellbox.tenant": "acme", "org.shellbox.session": "s-1", "org.shellbox.owner": "prod"},
		},
		Type: corev1.SecretTypeOpaque,
	}
	if !equality.Semantic.DeepEqual(secret, wantSecret) {
		t.Errorf("secret differs (-got +want):\n%s", diff.Diff(secret, wantSecret))
	}
}

// TestTranslateRestricted: the restricted pod differs from the baseline
// one in the users, the capabilities and the agent's --no-setuid only.
func TestTranslateRestricted(t *testing.T) {
	pod, _ := translate(testSpec(t), testConfig(t, func(c *Config) { c.PodSecurity = PodSecurityRestricted }))
	want := wantPod()
	tr, uid, gid := true, int64(1000), int64(1000)
	for _, sc := range []*corev1.SecurityContext{want.Spec.InitContainers[0].SecurityContext, want.Spec.Containers[0].SecurityContext} {
		sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot = &uid, &gid, &tr
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	}
	want.Spec.InitContainers[0].Args = []string{"--install", "/shellbox-install/agent", "--token-out", "/run/shellbox/token/token"}
	args := want.Spec.Containers[0].Args
	want.Spec.Containers[0].Args = append(args[:len(args)-2:len(args)-2], "--no-setuid", "--token-file", "/run/shellbox/token/token")
	want.Spec.SecurityContext.RunAsNonRoot = &tr
	if !equality.Semantic.DeepEqual(pod, want) {
		t.Errorf("pod differs (-got +want):\n%s", diff.Diff(pod, want))
	}
}

// TestTranslateEgressHostDir: an egress pod, baseline or restricted, has
// the baseline pod's volumes and mounts and one more: a memory emptyDir at
// /run/shellbox (mounted before the spill and token volumes it holds), so
// the agent can write the egress CA bundle there (egresswire.CAFile); the
// container's root is read-only. It holds two bundles at their bound (one
// replacing the other).
func TestTranslateEgressHostDir(t *testing.T) {
	for _, ps := range []string{PodSecurityBaseline, PodSecurityRestricted} {
		pod, _ := translate(testSpec(t, sandbox.WithNetwork(sandbox.NetworkEgress)), testConfig(t, func(c *Config) { c.PodSecurity = ps }))
		want := wantPod()
		m := want.Spec.Containers[0].VolumeMounts
		want.Spec.Containers[0].VolumeMounts = append(m[:3:3], append([]corev1.VolumeMount{{Name: "hostdir", MountPath: "/run/shellbox"}}, m[3:]...)...)
		q := resource.MustParse("17Mi")
		want.Spec.Volumes = append(want.Spec.Volumes, corev1.Volume{Name: "hostdir", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &q}}})
		for _, c := range []struct {
			name      string
			got, want any
		}{
			{"sandbox mounts", pod.Spec.Containers[0].VolumeMounts, want.Spec.Containers[0].VolumeMounts},
			{"init mounts", pod.Spec.InitContainers[0].VolumeMounts, want.Spec.InitContainers[0].VolumeMounts},
			{"volumes", pod.Spec.Volumes, want.Spec.Volumes},
		} {
			if !equality.Semantic.DeepEqual(c.got, c.want) {
				t.Errorf("%s %s differ (-got +want):\n%s", ps, c.name, diff.Diff(c.got, c.want))
			}
		}
	}
	if hostDirBytes < 2*egress.MaxBundleBytes {
		t.Errorf("hostDirBytes %d holds less than two bundles of %d", hostDirBytes, egress.MaxBundleBytes)
	}
	// Without egress there is no CA: /run/shellbox stays read-only.
	pod, _ := translate(testSpec(t), testConfig(t, nil))
	for _, v := range pod.Spec.Volumes {
		if v.Name == "hostdir" {
			t.Errorf("a pod without egress has the hostdir volume")
		}
	}
}

// TestTranslateVariants: runsc, egress, CPUs and sizes.
func TestTranslateVariants(t *testing.T) {
	spec := testSpec(t, sandbox.WithRuntime(sandbox.RuntimeRunsc), sandbox.WithNetwork(sandbox.NetworkEgress),
		sandbox.WithCPUs(0.25), sandbox.WithMemory(300*sandbox.MiB), sandbox.WithWorkspaceSize(100*sandbox.MiB),
		sandbox.WithTmpSize(10*sandbox.MiB), sandbox.WithSpillSize(0))
	pod, _ := translate(spec, testConfig(t, func(c *Config) {
		c.RuntimeClasses = map[string]string{"runsc": "my-gvisor"}
		c.AgentPort = 9000
		c.CPURequestRatio = 0.5
		c.ImagePullPolicy = corev1.PullNever
	}))
	if rc := pod.Spec.RuntimeClassName; rc == nil || *rc != "my-gvisor" {
		t.Errorf("runtimeClassName %v, want my-gvisor", rc)
	}
	c := pod.Spec.Containers[0]
	if got := strings.Join(c.Args, " "); got != "--uid 1000 --gid 1000 --listen :9000 --spill-dir /run/shellbox/spill --egress-listen 127.0.0.1:3128 --nproc 256 --token-file /run/shellbox/token/token" {
		t.Errorf("args %q", got)
	}
	if c.Ports[0].ContainerPort != 9000 || c.ImagePullPolicy != corev1.PullNever || pod.Spec.InitContainers[0].ImagePullPolicy != corev1.PullNever {
		t.Errorf("port %d, pull %s", c.Ports[0].ContainerPort, c.ImagePullPolicy)
	}
	if l, r := c.Resources.Limits[corev1.ResourceCPU], c.Resources.Requests[corev1.ResourceCPU]; l.MilliValue() != 250 || r.MilliValue() != 125 {
		t.Errorf("cpu limit %s request %s, want 250m 125m", l.String(), r.String())
	}
	if l := c.Resources.Limits[corev1.ResourceMemory]; l.Value() != 300*sandbox.MiB {
		t.Errorf("memory %s", l.String())
	}
	sizes := map[string]int64{}
	for _, v := range pod.Spec.Volumes {
		sizes[v.Name] = v.EmptyDir.SizeLimit.Value()
	}
	if sizes["workspace"] != 100*sandbox.MiB || sizes["tmp"] != 10*sandbox.MiB || sizes["spill"] != minSpillDir {
		t.Errorf("volume sizes %v", sizes)
	}
	if pod.Labels[sandbox.LabelRuntime] != "runsc" || pod.Labels[sandbox.LabelNetwork] != "egress" || pod.Annotations[AnnotationNetwork] != "egress" {
		t.Errorf("labels %v", pod.Labels)
	}
	// Restricted under gVisor: the agent's threads count with the commands.
	pod, _ = translate(spec, testConfig(t, func(c *Config) { c.PodSecurity = PodSecurityRestricted }))
	if got := strings.Join(pod.Spec.Containers[0].Args, " "); !strings.HasSuffix(got, "--nproc 384 --no-setuid --token-file /run/shellbox/token/token") {
		t.Errorf("restricted runsc args %q", got)
	}
	// runc on the cluster's default handler: no runtimeClassName.
	pod, _ = translate(testSpec(t), testConfig(t, nil))
	if pod.Spec.RuntimeClassName != nil {
		t.Errorf("runc: runtimeClassName %q, want none", *pod.Spec.RuntimeClassName)
	}
}

// TestTranslateWorkspaceDisk: kube.workspaceMedium disk makes the
// workspace, and only it, an emptyDir on the node's disk of the same
// sizeLimit, with its size requested as ephemeral-storage by both
// containers; everything else is the baseline pod.
func TestTranslateWorkspaceDisk(t *testing.T) {
	pod, _ := translate(testSpec(t), testConfig(t, func(c *Config) { c.WorkspaceMedium = sandbox.WorkspaceDisk }))
	want := wantPod()
	for i, v := range want.Spec.Volumes {
		if v.Name == "workspace" {
			want.Spec.Volumes[i].EmptyDir.Medium = corev1.StorageMediumDefault
		}
	}
	ws := want.Spec.Volumes[1].EmptyDir.SizeLimit
	for _, c := range []*corev1.Container{&want.Spec.InitContainers[0], &want.Spec.Containers[0]} {
		c.Resources = *c.Resources.DeepCopy()
		c.Resources.Requests[corev1.ResourceEphemeralStorage] = *ws
	}
	if !equality.Semantic.DeepEqual(pod, want) {
		t.Errorf("pod differs (-got +want):\n%s", diff.Diff(pod, want))
	}
	if _, err := (Config{Namespace: "ns", AgentImage: "x", WorkspaceMedium: "ssd"}).withDefaults(); err == nil ||
		err.Error() != `kube.workspaceMedium "ssd": must be memory or disk` {
		t.Errorf("workspaceMedium ssd: %v", err)
	}
}

// TestPodSecurity evaluates the pods with the Pod Security admission's own
// checks: the baseline pod meets baseline and fails restricted on exactly
// the two checks the package doc names; the restricted pod meets
// restricted.
func TestPodSecurity(t *testing.T) {
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	eval := func(pod *corev1.Pod, level psapi.Level) policy.AggregateCheckResult {
		return policy.AggregateCheckResults(ev.EvaluatePod(psapi.LevelVersion{Level: level, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec))
	}
	for _, rt := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		base, _ := translate(testSpec(t, sandbox.WithRuntime(rt)), testConfig(t, nil))
		if r := eval(base, psapi.LevelBaseline); !r.Allowed {
			t.Errorf("%s: baseline pod fails baseline: %s: %s", rt, r.ForbiddenReason(), r.ForbiddenDetail())
		}
		r := eval(base, psapi.LevelRestricted)
		if got := strings.Join(r.ForbiddenReasons, ", "); r.Allowed || got != "unrestricted capabilities, runAsNonRoot != true, runAsUser=0" {
			t.Errorf("%s: baseline pod under restricted: allowed %v, reasons %q (%s), want exactly capabilities, runAsNonRoot and runAsUser",
				rt, r.Allowed, got, r.ForbiddenDetail())
		}
		restr, _ := translate(testSpec(t, sandbox.WithRuntime(rt)), testConfig(t, func(c *Config) { c.PodSecurity = PodSecurityRestricted }))
		if r := eval(restr, psapi.LevelRestricted); !r.Allowed {
			t.Errorf("%s: restricted pod fails restricted: %s: %s", rt, r.ForbiddenReason(), r.ForbiddenDetail())
		}
	}
}

func TestPodName(t *testing.T) {
	long := strings.Repeat("X", 64)
	cases := [][2]string{{"acme", "s-1"}, {"a-b", "c"}, {"a", "b-c"}, {"Acme@corp:x", "S.1_2"}, {long, long}, {"---", "@@@"}}
	seen := map[string]bool{}
	for _, c := range cases {
		n := PodName(c[0], c[1])
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Errorf("PodName(%q, %q) = %q: %v", c[0], c[1], n, errs)
		}
		if seen[n] {
			t.Errorf("PodName(%q, %q) = %q twice", c[0], c[1], n)
		}
		seen[n] = true
	}
	if n := PodName("Acme@corp:x", "S.1_2"); !strings.HasPrefix(n, "shellbox-acme-corp-x-s-1-2-") {
		t.Errorf("sanitised name %q", n)
	}
	if PodName("acme", "s-1") != PodName("acme", "s-1") {
		t.Error("PodName is not deterministic")
	}
}

func TestLabelValue(t *testing.T) {
	for _, v := range []string{"acme", "a@b:c", strings.Repeat("x", 64), "@@", "-a-"} {
		got := LabelValue(v)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q: %v", v, got, errs)
		}
	}
	if LabelValue("acme") != "acme" {
		t.Errorf("a valid value is changed: %q", LabelValue("acme"))
	}
	if LabelValue("a@b") == LabelValue("a:b") {
		t.Errorf("values that sanitise alike share a label")
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{
		{AgentImage: "x"},
		{Namespace: "Bad_NS", AgentImage: "x"},
		{Namespace: "ns"},
		{Namespace: "ns", AgentImage: "x", AgentPath: "relative"},
		{Namespace: "ns", AgentImage: "x", PodSecurity: "privileged"},
		{Namespace: "ns", AgentImage: "x", RuntimeClasses: map[string]string{"kata": "k"}},
		{Namespace: "ns", AgentImage: "x", CPURequestRatio: 2},
	} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
