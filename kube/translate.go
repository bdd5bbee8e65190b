package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/sandbox"
)

// Labels and annotations of a session pod (and its Secret) besides
// sandbox.Label*. Label values are limited to 63 characters of
// [A-Za-z0-9._-], which tenant, session and owner ids need not be: their
// labels carry a sanitised form (for selectors and humans), the annotations
// the exact ids (what Get, List and Remove go by).
const (
	// LabelRelease is the shellbox installation (Helm release) that made
	// the pod: the NetworkPolicy and the chart select session pods by it.
	LabelRelease = "org.shellbox.release"
	// LabelManagedBy is the well-known label, "shellbox".
	LabelManagedBy = "app.kubernetes.io/managed-by"

	AnnotationTenant  = "org.shellbox.tenant"
	AnnotationSession = "org.shellbox.session"
	AnnotationOwner   = "org.shellbox.owner"
	AnnotationImage   = "org.shellbox.image"
	AnnotationRuntime = "org.shellbox.runtime"
	AnnotationNetwork = "org.shellbox.network"
	// AnnotationMounts is the Spec's mounts as JSON (always "[]" today:
	// host directories are hostPath volumes, which the pod's Pod Security
	// level forbids, so Create refuses them).
	AnnotationMounts = "org.shellbox.mounts"
	// AnnotationSettings is the Spec's Settings (sandbox.LabelSettings):
	// any replica reads what the session asked for from its pod.
	AnnotationSettings = sandbox.LabelSettings
	// AnnotationLastUsed is the sandbox's last use (RFC 3339, UTC), as
	// the replicas record it (RecordUse): the leader's reaper judges by
	// the uses of all of them.
	AnnotationLastUsed = "org.shellbox.last-used"
)

// Names inside a session pod.
const (
	// ContainerSandbox runs the agent (PID 1) and the commands.
	ContainerSandbox = "sandbox"
	// ContainerInstall is the init container that copies the agent in.
	ContainerInstall = "install-agent"
	// SecretKey is the token's key in the session's Secret.
	SecretKey = "token"
	// PortName names the agent's container port (the readiness probe's
	// target, and what a NetworkPolicy opens to the server).
	PortName = "agent"

	volAgent     = "agent"
	volWorkspace = "workspace"
	volTmp       = "tmp"
	volSpill     = "spill"
	volToken     = "token"
	volHostDir   = "hostdir"
	// tokenFile is the token's file in TokenDir, and tokenDirBytes the
	// size of its emptyDir.
	tokenFile     = "token"
	tokenDirBytes = 64 << 10
	// installDir is where the init container sees the agent's emptyDir.
	installDir = "/shellbox-install"
)

// SpillDir is the agent's spill directory in a session pod: its own
// memory-backed emptyDir, below sandbox.HostDirMount.
var SpillDir = sandbox.HostDirMount + "/spill"

// TokenDir is where the init container writes the session's token and the
// agent reads (and removes) it: a memory emptyDir of its own.
var TokenDir = sandbox.HostDirMount + "/token"

// hostDirBytes is the size of an egress pod's /run/shellbox
// (sandbox.HostDirMount), a memory emptyDir: the agent's directory, as the
// host directory Docker and containerd bind there is, where the agent
// writes the CA bundle its commands trust (egresswire.CAFile) when the
// relay terminates TLS. The container's root is read-only, so without it
// the bundle cannot be written. Room for two bundles at their bound
// (agent/egress.MaxBundleBytes: the image's roots up to 8 MiB and the
// relay's CA), the old and the new while one replaces the other. Its pages
// count towards the pod's memory limit as they are written: a Debian
// image's bundle is about 220 KiB.
const hostDirBytes = 17 << 20

// partLen bounds each of the tenant and session parts of a pod name, so
// that "shellbox-" + 2 parts + the hash stays a DNS-1123 label (63 bytes):
// the pod's hostname-safe name.
const partLen = 20

// PodName returns the pod (and Secret) name of a session's sandbox:
// shellbox-<tenant>-<session>-<hash>, each id lowercased, other characters
// than [a-z0-9] turned into '-' (runs collapsed), cut to 20 bytes, and a
// hash of the exact pair, so pairs that sanitise or cut alike never share a
// name. The name makes a second create for a session fail, and lets Get
// find a session's pod with one lookup.
func PodName(tenant, session string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + session))
	name := "shellbox"
	for _, p := range []string{part(tenant), part(session)} {
		if p != "" {
			name += "-" + p
		}
	}
	return name + "-" + hex.EncodeToString(sum[:5])
}

func part(id string) string {
	var b strings.Builder
	dash := true
	for _, r := range strings.ToLower(id) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	s := b.String()
	if len(s) > partLen {
		s = s[:partLen]
	}
	return strings.Trim(s, "-")
}

// LabelValue returns v if it is a valid label value, else a sanitised form
// with a hash of v (the exact value is in an annotation).
func LabelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	s := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, v)
	if len(s) > 50 {
		s = s[:50]
	}
	s = strings.Trim(s, "._-")
	if s == "" {
		return hex.EncodeToString(sum[:6])
	}
	return s + "-" + hex.EncodeToString(sum[:6])
}

// translate turns a validated Spec into the session's pod and the skeleton
// of its Secret (name, labels; Create adds the token and the owner
// reference to the pod). It is pure; every hardening decision of the
// Kubernetes backend is here (the package doc says why each is what it is).
// cfg has its defaults filled (Config.withDefaults).
func translate(spec sandbox.Spec, cfg Config) (*corev1.Pod, *corev1.Secret) {
	name := PodName(spec.Tenant, spec.Session)
	restricted := cfg.PodSecurity == PodSecurityRestricted

	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[sandbox.LabelManaged] = "true"
	labels[sandbox.LabelTenant] = LabelValue(spec.Tenant)
	labels[sandbox.LabelSession] = LabelValue(spec.Session)
	labels[sandbox.LabelOwner] = LabelValue(spec.Owner)
	labels[sandbox.LabelRuntime] = spec.Runtime
	labels[sandbox.LabelNetwork] = spec.Network
	labels[LabelRelease] = LabelValue(cfg.Release)
	labels[LabelManagedBy] = "shellbox"

	mounts, _ := json.Marshal(append([]sandbox.Mount{}, spec.Mounts...))
	annotations := map[string]string{
		AnnotationTenant:  spec.Tenant,
		AnnotationSession: spec.Session,
		AnnotationOwner:   spec.Owner,
		AnnotationImage:   spec.Image,
		AnnotationRuntime: spec.Runtime,
		AnnotationNetwork: spec.Network,
		AnnotationMounts:  string(mounts),
	}
	if spec.Settings != "" {
		annotations[AnnotationSettings] = spec.Settings
	}

	args := append([]string{}, spec.AgentArgs...)
	args = append(args, "--listen", ":"+strconv.Itoa(int(cfg.AgentPort)), "--spill-dir", SpillDir)
	if spec.Network == sandbox.NetworkEgress {
		// The agent's proxy listens on the pod's loopback; its connections
		// leave only through the server's relay (the NetworkPolicy denies
		// the pod all egress).
		args = append(args, "--egress-listen", egresswire.DefaultListen)
	}
	if spec.Runtime == sandbox.RuntimeRunsc {
		// A pod spec has no pids limit (the kubelet's podPidsLimit is the
		// node's) and no rlimits: under gVisor, which counts RLIMIT_NPROC
		// per uid among the sandbox's own tasks, the agent sets it for
		// its commands, as Docker's nproc ulimit does. (Not on runc: the
		// kernel would count the uid's processes on the whole node.)
		// Restricted: the agent is the commands' uid, so its own threads
		// (agentThreads) count too, and are added.
		nproc := spec.PidsLimit
		if restricted {
			nproc += agentThreads
		}
		args = append(args, "--nproc", strconv.FormatInt(nproc, 10))
	}
	if restricted {
		args = append(args, "--no-setuid")
	} else if cfg.SaveOnDelete {
		// SIGTERM fences the agent, which serves on through the grace
		// for the server to save the workspace (WatchDeletions). (Under
		// --no-setuid the agent ignores SIGTERM and serves on anyway.)
		args = append(args, "--serve-through-grace")
	}

	env := make([]corev1.EnvVar, 0, len(spec.Env)+2)
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	env = append(env,
		corev1.EnvVar{Name: sandbox.EnvSpillBytes, Value: strconv.FormatInt(spec.SpillBytes, 10)},
	)
	// The token reaches the agent as a file, not as a variable of the
	// sandbox container: an initial environment stays in PID 1's memory
	// as /proc/1/environ, which gVisor shows to the commands' uid whatever
	// the agent's dumpability. A Secret volume would do no better: a file
	// the agent can read, a command of its uid (restricted) can read too,
	// and the agent could not remove it (read-only). So the init container
	// gets the Secret's key in its environment (it exits before any
	// command exists) and writes it into a memory emptyDir of its own,
	// mode 0400 (--token-out); the agent reads it and removes it at start
	// (--token-file), before it serves.
	args = append(args, "--token-file", TokenDir+"/"+tokenFile)

	cpu := resource.NewMilliQuantity(int64(spec.CPUs*1000+0.5), resource.DecimalSI)
	cpuReq := resource.NewMilliQuantity(max(1, int64(spec.CPUs*1000*cfg.CPURequestRatio+0.5)), resource.DecimalSI)
	mem := resource.NewQuantity(spec.MemoryBytes, resource.BinarySI)
	res := corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *mem},
		Requests: corev1.ResourceList{corev1.ResourceCPU: *cpuReq, corev1.ResourceMemory: *mem},
	}
	if cfg.WorkspaceMedium == sandbox.WorkspaceDisk {
		// The workspace's room on the node's disk, for the scheduler.
		res.Requests[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(spec.WorkspaceBytes, resource.BinarySI)
	}

	// The sandbox container: the agent as PID 1 (a container of its own
	// pid namespace: shareProcessNamespace false), commands below it.
	sc := &corev1.SecurityContext{
		Privileged:               ptr(false),
		AllowPrivilegeEscalation: ptr(false),
		ReadOnlyRootFilesystem:   ptr(true),
		ProcMount:                ptr(corev1.DefaultProcMount),
	}
	if restricted {
		sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot = ptr(int64(spec.UID)), ptr(int64(spec.GID)), ptr(true)
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	} else {
		sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot = ptr(int64(0)), ptr(int64(0)), ptr(false)
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: append([]corev1.Capability{}, agentCaps...)}
	}
	agentDir := path.Dir(sandbox.AgentPath)
	vmounts := []corev1.VolumeMount{
		{Name: volAgent, MountPath: agentDir, ReadOnly: true},
		{Name: volWorkspace, MountPath: sandbox.WorkspacePath},
		{Name: volTmp, MountPath: sandbox.TmpPath},
	}
	if spec.Network == sandbox.NetworkEgress {
		// Before the spill and token volumes, which it holds: each is
		// its own mount on a directory the runtime makes in it.
		vmounts = append(vmounts, corev1.VolumeMount{Name: volHostDir, MountPath: sandbox.HostDirMount})
	}
	vmounts = append(vmounts,
		corev1.VolumeMount{Name: volSpill, MountPath: SpillDir},
		corev1.VolumeMount{Name: volToken, MountPath: TokenDir},
	)
	sandboxC := corev1.Container{
		Name:            ContainerSandbox,
		Image:           spec.Image,
		ImagePullPolicy: cfg.ImagePullPolicy,
		Command:         []string{sandbox.AgentPath},
		Args:            args,
		Env:             env,
		WorkingDir:      sandbox.WorkspacePath,
		Ports:           []corev1.ContainerPort{{Name: PortName, ContainerPort: cfg.AgentPort, Protocol: corev1.ProtocolTCP}},
		// Ready when the agent accepts connections: it listens only once
		// its executor is up.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(PortName)}},
			PeriodSeconds:    1,
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: 3,
		},
		Resources:                res,
		SecurityContext:          sc,
		VolumeMounts:             vmounts,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}

	// The init container: the agent binary of the shellbox image copies
	// itself into the agent's emptyDir (the image needs no shell), and,
	// where it may (baseline: root with CAP_CHOWN only), gives /workspace
	// to the sandbox user as Docker's tmpfs is (uid=,gid=,mode=0755).
	installArgs := []string{"--install", installDir + "/" + path.Base(sandbox.AgentPath), "--token-out", TokenDir + "/" + tokenFile}
	isc := &corev1.SecurityContext{
		Privileged:               ptr(false),
		AllowPrivilegeEscalation: ptr(false),
		ReadOnlyRootFilesystem:   ptr(true),
		ProcMount:                ptr(corev1.DefaultProcMount),
	}
	if restricted {
		isc.RunAsUser, isc.RunAsGroup, isc.RunAsNonRoot = ptr(int64(spec.UID)), ptr(int64(spec.GID)), ptr(true)
		isc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	} else {
		installArgs = append(installArgs, "--own", sandbox.WorkspacePath,
			"--uid", strconv.Itoa(spec.UID), "--gid", strconv.Itoa(spec.GID))
		isc.RunAsUser, isc.RunAsGroup, isc.RunAsNonRoot = ptr(int64(0)), ptr(int64(0)), ptr(false)
		isc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN"}}
	}
	installC := corev1.Container{
		Name:            ContainerInstall,
		Image:           cfg.AgentImage,
		ImagePullPolicy: cfg.ImagePullPolicy,
		Command:         []string{cfg.AgentPath},
		Args:            installArgs,
		Env: []corev1.EnvVar{{Name: EnvToken, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: SecretKey,
		}}}},
		// The same as the sandbox's: the pod's effective request is the
		// larger of the two, so this adds nothing, and a LimitRange that
		// demands limits is met.
		Resources:       *res.DeepCopy(),
		SecurityContext: isc,
		VolumeMounts: []corev1.VolumeMount{
			{Name: volAgent, MountPath: installDir},
			{Name: volWorkspace, MountPath: sandbox.WorkspacePath},
			{Name: volToken, MountPath: TokenDir},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}

	memDir := func(name string, size int64) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(size, resource.BinarySI),
		}}}
	}
	workspace := memDir(volWorkspace, spec.WorkspaceBytes)
	if cfg.WorkspaceMedium == sandbox.WorkspaceDisk {
		// On the node's disk (Config.WorkspaceMedium says what that
		// costs): no memory, a size the kubelet enforces by eviction.
		workspace.EmptyDir.Medium = corev1.StorageMediumDefault
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: cfg.Namespace, Labels: labels, Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			InitContainers:                []corev1.Container{installC},
			Containers:                    []corev1.Container{sandboxC},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(cfg.GracePeriodSeconds),
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			ShareProcessNamespace:         ptr(false),
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			Hostname:                      "sandbox",
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				RunAsNonRoot:   ptr(restricted),
			},
			Volumes: []corev1.Volume{
				// The agent binary: written once by the init container, on
				// the node's disk (it is not the session's memory).
				{Name: volAgent, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					SizeLimit: resource.NewQuantity(cfg.AgentDirBytes, resource.BinarySI),
				}}},
				// Memory-backed by default: a tmpfs of exactly
				// sizeLimit, so a full disk is ENOSPC for the command, and
				// not an eviction of the whole session by the kubelet's
				// periodic disk check (a disk emptyDir's sizeLimit is
				// enforced only that way). The pages count towards the
				// memory limit. Config.WorkspaceMedium disk trades the
				// one for the other.
				workspace,
				memDir(volTmp, spec.TmpBytes),
				memDir(volSpill, max(spec.SpillBytes, minSpillDir)),
				// The token, from the init container to the agent, which
				// removes it (a page is all it takes).
				memDir(volToken, tokenDirBytes),
			},
		},
	}
	if spec.Network == sandbox.NetworkEgress {
		// The agent's directory (hostDirBytes), for the egress CA.
		pod.Spec.Volumes = append(pod.Spec.Volumes, memDir(volHostDir, hostDirBytes))
	}
	if rc := cfg.RuntimeClasses[spec.Runtime]; rc != "" {
		pod.Spec.RuntimeClassName = ptr(rc)
	}

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: cfg.Namespace, Labels: maps.Clone(labels),
			Annotations: map[string]string{AnnotationTenant: spec.Tenant, AnnotationSession: spec.Session, AnnotationOwner: spec.Owner},
		},
		Type: corev1.SecretTypeOpaque,
	}
	return pod, secret
}

// agentThreads is what the agent's own threads may count towards
// RLIMIT_NPROC when it runs as the commands' uid: the 96 it makes at start
// (agent, reserveThreads) and some more.
const agentThreads = 128

// minSpillDir is the spill emptyDir's size when spilling is off (the agent
// still makes its directory there).
const minSpillDir = 1 << 20

// agentCaps are the capabilities the agent (root, baseline) keeps, as on
// Docker: SETUID and SETGID to start each command as the sandbox user with
// its tag group, KILL to signal commands, which are not its uid. Commands
// get none: the uid change clears them, no_new_privs keeps them out.
var agentCaps = []corev1.Capability{"SETUID", "SETGID", "KILL"}

func ptr[T any](v T) *T { return &v }
