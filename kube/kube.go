package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"golang.org/x/sync/errgroup"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/sandbox"
)

// EnvToken is the agent's token variable (cmd/shellbox-agent reads it with
// --listen).
const EnvToken = "SHELLBOX_AGENT_TOKEN"

// Pod Security levels a session pod can be made for (Config.PodSecurity;
// see the package doc for what each costs).
const (
	PodSecurityBaseline   = "baseline"
	PodSecurityRestricted = "restricted"
)

// Defaults of Config.
const (
	DefaultRelease      = "shellbox"
	DefaultAgentPath    = "/usr/local/bin/shellbox-agent"
	DefaultAgentPort    = 7070
	DefaultGVisorClass  = "gvisor"
	DefaultReadyTimeout = 2 * time.Minute
	DefaultPoll         = 100 * time.Millisecond
	// DefaultSaveGraceSeconds is the pods' termination grace with
	// SaveOnDelete: time to stream a workspace of a few hundred MiB into
	// the store (docs/kubernetes.md, Pods deleted behind shellbox's back).
	DefaultSaveGraceSeconds = 60
)

// Config configures a Runtime.
type Config struct {
	// Namespace holds the session pods and their Secrets. Required.
	Namespace string
	// Release names this shellbox installation (the Helm release):
	// LabelRelease on every pod. Default DefaultRelease.
	Release string
	// AgentImage is the image the init container copies the static agent
	// from (the shellbox server image). Required.
	AgentImage string
	// AgentPath is the agent binary's path in AgentImage. Default
	// DefaultAgentPath.
	AgentPath string
	// AgentPort is the agent's TCP port in the pod. Default
	// DefaultAgentPort.
	AgentPort int32
	// RuntimeClasses maps the Spec runtimes to RuntimeClass names: runc to
	// "" (the cluster's default handler) and runsc to DefaultGVisorClass
	// unless set.
	RuntimeClasses map[string]string
	// PodSecurity is the Pod Security level the pods are made for:
	// PodSecurityBaseline (the default: a root agent with SETUID, SETGID
	// and KILL, exact tree kills) or PodSecurityRestricted (agent and
	// commands share the non-root uid; see the package doc).
	PodSecurity string
	// ImagePullPolicy of both containers. Default IfNotPresent: images are
	// loaded into the nodes' containerd, there is no registry.
	ImagePullPolicy corev1.PullPolicy
	// CPURequestRatio is the CPU request as a fraction of the limit
	// (Spec.CPUs), so idle sessions do not reserve whole cores. Memory is
	// requested in full: it is what tmpfs pages and commands really use.
	// Default 0.1.
	CPURequestRatio float64
	// AgentDirBytes is the sizeLimit of the agent's emptyDir. Default
	// 128 MiB.
	AgentDirBytes int64
	// WorkspaceMedium is what a session pod's /workspace is (the
	// spec's WorkspaceBytes in size): sandbox.WorkspaceMemory (the default), a
	// memory emptyDir, a tmpfs that ENOSPCs at its size and whose pages
	// count towards the pod's memory limit; or sandbox.WorkspaceDisk, an emptyDir
	// on the node's disk with that sizeLimit, requested as
	// ephemeral-storage so the scheduler finds it room: no memory, but
	// the kubelet enforces the size by its periodic check, evicting the
	// pod (its files with it) instead of refusing the write.
	WorkspaceMedium sandbox.WorkspaceMedium
	// GracePeriodSeconds is the pods' terminationGracePeriodSeconds: how
	// long the kubelet waits after SIGTERM before SIGKILL when someone
	// else deletes a pod (shellbox's own deletions take at most
	// RemoveGraceSeconds). With SaveOnDelete it bounds the time to save
	// the workspace of a pod deleted behind shellbox's back. Default 2,
	// DefaultSaveGraceSeconds with SaveOnDelete.
	GracePeriodSeconds int64
	// SaveOnDelete: the server saves the workspace of a session pod that
	// someone else deletes (kubectl delete, an eviction, a drain) during
	// its termination grace (WatchDeletions; set with a snapshot store).
	// The agent then serves through the grace (--serve-through-grace):
	// SIGTERM fences it instead of ending it.
	SaveOnDelete bool
	// ReadyTimeout bounds Create's wait for the pod to be running and its
	// agent port ready. Default DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Poll is the interval of Create's and Remove's status checks (and ten
	// of them that of Create's look at a pending pod's events). Default
	// DefaultPoll.
	Poll time.Duration
	// ServerSelector are the labels of the shellbox server pods, the only
	// pods the session pods' NetworkPolicy lets reach the agent port
	// (EnsureNetworkPolicy). Empty: the runtime manages no NetworkPolicy.
	ServerSelector map[string]string
	// ServerNamespace is the server pods' namespace. Default Namespace.
	ServerNamespace string
}

// Validate reports the first setting of c that cannot work, naming it as
// the configuration does (kube.agentImage); New checks the same.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// configError is a setting that cannot work: sandbox.ErrInvalid, with a
// text that names the setting and nothing else.
type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == sandbox.ErrInvalid }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

func (c Config) withDefaults() (Config, error) {
	if c.Namespace == "" || len(validation.IsDNS1123Label(c.Namespace)) > 0 {
		return c, configErrorf("kube.namespace %q: must be a DNS-1123 label", c.Namespace)
	}
	if c.Release == "" {
		c.Release = DefaultRelease
	}
	if c.AgentImage == "" {
		return c, configErrorf("kube.agentImage: required (the shellbox image, whose static agent the init container copies)")
	}
	if c.AgentPath == "" {
		c.AgentPath = DefaultAgentPath
	}
	if !strings.HasPrefix(c.AgentPath, "/") {
		return c, configErrorf("kube.agentPath %q: must be absolute", c.AgentPath)
	}
	if c.AgentPort == 0 {
		c.AgentPort = DefaultAgentPort
	}
	if c.AgentPort < 1 || c.AgentPort > 65535 {
		return c, configErrorf("kube.agentPort %d: must be 1 to 65535", c.AgentPort)
	}
	rcs := map[string]string{sandbox.RuntimeRunc: "", sandbox.RuntimeRunsc: DefaultGVisorClass}
	for k, v := range c.RuntimeClasses {
		if k != sandbox.RuntimeRunc && k != sandbox.RuntimeRunsc {
			return c, configErrorf("kube.runtimeClasses: %q is not a runtime (runc or runsc)", k)
		}
		if v != "" && len(validation.IsDNS1123Subdomain(v)) > 0 {
			return c, configErrorf("kube.runtimeClasses.%s %q: not a valid RuntimeClass name", k, v)
		}
		rcs[k] = v
	}
	c.RuntimeClasses = rcs
	switch c.PodSecurity {
	case "":
		c.PodSecurity = PodSecurityBaseline
	case PodSecurityBaseline, PodSecurityRestricted:
	default:
		return c, configErrorf("kube.podSecurity %q: must be %q or %q", c.PodSecurity, PodSecurityBaseline, PodSecurityRestricted)
	}
	switch c.ImagePullPolicy {
	case "":
		c.ImagePullPolicy = corev1.PullIfNotPresent
	case corev1.PullIfNotPresent, corev1.PullNever, corev1.PullAlways:
	default:
		return c, configErrorf("kube.imagePullPolicy %q: must be IfNotPresent, Never or Always", c.ImagePullPolicy)
	}
	if c.CPURequestRatio == 0 {
		c.CPURequestRatio = 0.1
	}
	if c.CPURequestRatio < 0 || c.CPURequestRatio > 1 {
		return c, configErrorf("kube.cpuRequestRatio %v: must be in (0, 1]", c.CPURequestRatio)
	}
	if c.AgentDirBytes == 0 {
		c.AgentDirBytes = 128 * sandbox.MiB
	}
	if c.GracePeriodSeconds == 0 {
		c.GracePeriodSeconds = 2
		if c.SaveOnDelete {
			c.GracePeriodSeconds = DefaultSaveGraceSeconds
		}
	}
	switch c.WorkspaceMedium {
	case "":
		c.WorkspaceMedium = sandbox.WorkspaceMemory
	case sandbox.WorkspaceMemory, sandbox.WorkspaceDisk:
	default:
		return c, configErrorf("kube.workspaceMedium %q: must be %s or %s", c.WorkspaceMedium, sandbox.WorkspaceMemory, sandbox.WorkspaceDisk)
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Poll == 0 {
		c.Poll = DefaultPoll
	}
	if c.ServerNamespace == "" {
		c.ServerNamespace = c.Namespace
	}
	if len(validation.IsDNS1123Label(c.ServerNamespace)) > 0 {
		return c, configErrorf("kube.serverNamespace %q: must be a DNS-1123 label", c.ServerNamespace)
	}
	switch {
	case c.AgentDirBytes < 0:
		return c, configErrorf("kube.agentDirBytes %d: must not be negative", c.AgentDirBytes)
	case c.GracePeriodSeconds < 0:
		return c, configErrorf("kube.gracePeriodSeconds %d: must not be negative", c.GracePeriodSeconds)
	case c.ReadyTimeout < 0:
		return c, configErrorf("kube.readyTimeout %v: must not be negative", c.ReadyTimeout)
	}
	for k, v := range c.ServerSelector {
		if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			return c, configErrorf("kube.serverSelector: %q=%q is not a valid label", k, v)
		}
	}
	return c, nil
}

// Runtime is the Kubernetes backend of sandbox.Runtime: one pod per
// session, named PodName(tenant, session), in Config.Namespace, with a
// Secret of the same name holding its agent's token.
type Runtime struct {
	cfg Config
	cs  kubernetes.Interface
	// exit asks an agent to end (agentapi.ExitEndpoint; tests replace it).
	exit func(ctx context.Context, ep agentapi.Endpoint) error
	// stats caches the nodes' kubelet summaries Usage read (usage.go).
	stats summaries
	// pods is the informer of session pods the watches share (deletions.go).
	pods podInformer
}

var (
	_ sandbox.Runtime       = (*Runtime)(nil)
	_ sandbox.Pinger        = (*Runtime)(nil)
	_ sandbox.RuntimeLister = (*Runtime)(nil)
)

// New returns a Runtime on the clientset cs (in a cluster:
// kubernetes.NewForConfig(rest.InClusterConfig())). It does not contact the
// API server (Ping does).
func New(cs kubernetes.Interface, cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Runtime{cfg: cfg, cs: cs, exit: agentapi.ExitEndpoint}, nil
}

// Config returns the configuration, defaults filled in.
func (r *Runtime) Config() Config { return r.cfg }

// check refuses what a pod cannot carry.
func (r *Runtime) check(spec sandbox.Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if len(spec.Mounts) > 0 {
		return fmt.Errorf("%w: kube: mounts: host directories would be hostPath volumes, which the %s Pod Security level forbids", sandbox.ErrInvalid, r.cfg.PodSecurity)
	}
	// The pod's rule (workspace, tmp and spill are memory-backed emptyDirs),
	// which the policy loader checks at load too.
	if err := spec.Resources.CheckMemory(confine.BackingPod); err != nil {
		return fmt.Errorf("%w: memory: %w", sandbox.ErrInvalid, err)
	}
	for k, v := range spec.Labels {
		if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			return fmt.Errorf("%w: labels: %q=%q is not a valid Kubernetes label", sandbox.ErrInvalid, k, v)
		}
	}
	if spec.Runtime == sandbox.RuntimeRunsc && r.cfg.RuntimeClasses[sandbox.RuntimeRunsc] == "" {
		return fmt.Errorf("%w: kube: runtime runsc has no RuntimeClass configured", sandbox.ErrUnavailable)
	}
	return nil
}

// Create implements sandbox.Runtime: the pod, then its Secret (the token,
// owned by the pod so the garbage collector deletes it with the pod), then
// a wait until the pod runs and its agent port is ready.
//
// Pod first, Secret second, because that order cannot leak a Secret: a
// Secret exists only with its owner reference, so whatever becomes of this
// process, it goes when the pod goes; a pod left without its Secret (the
// server died in between) is a labelled shellbox pod that never becomes
// ready, which Manager.Adopt and the idle reaper remove. (Secret first
// would leave an ownerless Secret for every crash between the two calls.)
// The kubelet starts the sandbox container only once the Secret exists
// (its token variable refers to it; until then the container waits in
// CreateContainerConfigError), and the init container runs before, so the
// Secret is nearly always there first.
//
// On any failure after the pod was created, the pod and the Secret are
// deleted again (under a context of their own: the caller's may be done).
// A pod that does not become ready within ReadyTimeout (or ctx) fails with
// its state and its last events: image not on the node, unschedulable,
// RuntimeClass handler missing on the node, ...
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := r.check(spec); err != nil {
		return sandbox.Sandbox{}, err
	}
	pod, secret := translate(spec, r.cfg)
	token, err := newToken()
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("%w: kube: token: %v", sandbox.ErrUnavailable, err)
	}
	pods := r.cs.CoreV1().Pods(r.cfg.Namespace)
	var created *corev1.Pod
	for attempt := 0; ; attempt++ {
		created, err = pods.Create(ctx, pod, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			break
		}
		// A pod of that name: the session's (ErrAlreadyExists), someone
		// else's (ErrConflict), or gone since (a deletion that just
		// finished): then once more.
		if err := r.existing(ctx, spec, pod.Name); !errors.Is(err, sandbox.ErrNotFound) || attempt > 0 {
			return sandbox.Sandbox{}, err
		}
	}
	if err != nil {
		return sandbox.Sandbox{}, r.convert(err, "pods", "create pod %s", pod.Name)
	}
	done := false
	defer func() {
		if !done {
			r.undo(ctx, created)
		}
	}()

	secret.Data = map[string][]byte{SecretKey: []byte(token)}
	secret.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Pod", Name: created.Name, UID: created.UID, Controller: ptr(true),
	}}
	if err := r.createSecret(ctx, secret); err != nil {
		return sandbox.Sandbox{}, err
	}

	ready, err := r.waitReady(ctx, created)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	done = true
	sb := describe(ready, token, r.cfg.AgentPort)
	return sb, nil
}

// existing classifies the pod that made a create fail: a shellbox pod of
// that session is ErrAlreadyExists, anything else ErrConflict; ErrNotFound
// if it is gone already.
func (r *Runtime) existing(ctx context.Context, spec sandbox.Spec, name string) error {
	p, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s/%s: pod %s/%s existed at create and is gone now", sandbox.ErrNotFound, spec.Tenant, spec.Session, r.cfg.Namespace, name)
	}
	if err != nil {
		return r.convert(err, "pods", "get pod %s", name)
	}
	if err := r.ours(p, spec.Tenant, spec.Session); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s/%s (pod %s/%s)", sandbox.ErrAlreadyExists, spec.Tenant, spec.Session, r.cfg.Namespace, name)
}

// ours returns ErrConflict unless p is the shellbox pod of tenant/session.
func (r *Runtime) ours(p *corev1.Pod, tenant, session string) error {
	if p.Labels[sandbox.LabelManaged] != "true" {
		return fmt.Errorf("%w: kube: pod %s/%s was not created by shellbox", sandbox.ErrConflict, p.Namespace, p.Name)
	}
	if p.Annotations[AnnotationTenant] != tenant || p.Annotations[AnnotationSession] != session {
		return fmt.Errorf("%w: kube: pod %s/%s belongs to %q/%q, not %q/%q", sandbox.ErrConflict, p.Namespace, p.Name,
			p.Annotations[AnnotationTenant], p.Annotations[AnnotationSession], tenant, session)
	}
	return nil
}

// createSecret creates the session's Secret. One of the same name still
// there from an earlier pod of the session (the garbage collector had not
// got to it yet) is deleted and the create tried again; one that is not
// shellbox's is a conflict.
func (r *Runtime) createSecret(ctx context.Context, s *corev1.Secret) error {
	secrets := r.cs.CoreV1().Secrets(r.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		_, err := secrets.Create(ctx, s, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) || attempt > 0 {
			return r.convert(err, "secrets", "create secret %s", s.Name)
		}
		old, gerr := secrets.Get(ctx, s.Name, metav1.GetOptions{})
		if gerr != nil && !apierrors.IsNotFound(gerr) {
			return r.convert(gerr, "secrets", "get secret %s", s.Name)
		}
		if gerr == nil {
			if old.Labels[sandbox.LabelManaged] != "true" {
				return fmt.Errorf("%w: kube: secret %s/%s was not created by shellbox", sandbox.ErrConflict, r.cfg.Namespace, s.Name)
			}
			err := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &old.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return r.convert(err, "secrets", "delete stale secret %s", s.Name)
			}
		}
	}
}

// undo deletes what a failed Create made, even if ctx ended.
//
// The deletion is retried (0.25 s, doubling) for up to 30 s: a creation
// fails most often when the API server is overloaded, and then a single
// delete timed out too (a chart load at 200 agents left 6 pods and 12
// Secrets so). Past that the pod is the reaper's, once it is older than
// a creation may take (sandbox: beingCreated), with its Secret (owned).
func (r *Runtime) undo(ctx context.Context, p *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	zero := int64(0)
	for wait := 250 * time.Millisecond; ctx.Err() == nil; wait *= 2 {
		err := r.cs.CoreV1().Pods(r.cfg.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID},
		})
		// Gone, or another pod of the name now (the precondition): done.
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			break
		}
		t := time.NewTimer(min(wait, 8*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	r.deleteSecret(ctx, p.Name, p.UID)
}

// deleteSecret deletes the Secret name if it belongs to the pod of uid (or
// to no pod; uid "": to none): never the Secret of a newer pod of the same
// session. One owned by a pod that is gone is the garbage collector's.
func (r *Runtime) deleteSecret(ctx context.Context, name string, uid types.UID) {
	s, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	r.deleteSecretOf(ctx, s, uid)
}

// deleteSecretOf is deleteSecret of the Secret s, as read.
func (r *Runtime) deleteSecretOf(ctx context.Context, s *corev1.Secret, uid types.UID) {
	if s.Labels[sandbox.LabelManaged] != "true" {
		return
	}
	for _, o := range s.OwnerReferences {
		if o.Kind == "Pod" && o.UID != uid {
			return
		}
	}
	_ = r.cs.CoreV1().Secrets(r.cfg.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
}

// Image-related waiting reasons that do not go away by waiting: the image
// is not on the node (and there is no registry), or its name is wrong.
var fatalWaiting = map[string]bool{
	"ErrImageNeverPull": true, "InvalidImageName": true, "ErrImagePull": true,
	"ImagePullBackOff": true, "RunContainerError": true, "CreateContainerError": true,
}

// waitReady polls the pod until it runs with its sandbox container ready
// and an IP, it fails for good, or ReadyTimeout (or ctx) ends.
func (r *Runtime) waitReady(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.ReadyTimeout)
	defer cancel()
	pods := r.cs.CoreV1().Pods(r.cfg.Namespace)
	last := p
	checked := time.Now()
	var lastErr error // a poll's error that was not the API server's answer
	for {
		cur, err := pods.Get(wctx, p.Name, metav1.GetOptions{})
		var status apierrors.APIStatus
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%w: kube: pod %s/%s was deleted while starting", sandbox.ErrUnavailable, r.cfg.Namespace, p.Name)
		case err != nil && wctx.Err() == nil && errors.As(err, &status):
			return nil, r.convert(err, "pods", "get pod %s", p.Name)
		case err != nil:
			// No answer from the API server (its connection, or the
			// client's rate limiter refusing a wait it predicts would pass
			// the deadline, before the deadline has passed): not the pod's
			// state, so the wait goes on and its timeout says why.
			if wctx.Err() == nil {
				lastErr = err
			}
		case err == nil:
			if cur.UID != p.UID {
				return nil, fmt.Errorf("%w: kube: pod %s/%s was replaced while starting", sandbox.ErrUnavailable, r.cfg.Namespace, p.Name)
			}
			last = cur
			if ready(cur) {
				return cur, nil
			}
			if why := failed(cur); why != "" {
				return nil, r.notReady(ctx, cur, why)
			}
			// The kubelet says only in events that the node cannot run the
			// pod's RuntimeClass handler, and retries for ever: look at
			// them now and then.
			if cur.Status.Phase == corev1.PodPending && time.Since(checked) >= 10*r.cfg.Poll {
				checked = time.Now()
				if why := r.handlerMissing(wctx, cur); why != "" {
					return nil, r.notReady(ctx, cur, why)
				}
			}
		}
		select {
		case <-wctx.Done():
			why := "not ready within " + r.cfg.ReadyTimeout.String()
			if ctx.Err() != nil {
				why = "gave up waiting: " + ctx.Err().Error()
			}
			if lastErr != nil {
				why += " (the last poll: " + lastErr.Error() + ")"
			}
			err := r.notReady(ctx, last, why)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", err, ctx.Err())
			}
			return nil, err
		case <-time.After(r.cfg.Poll):
		}
	}
}

// ready: running, the sandbox container ready (its agent port answers the
// readiness probe), an IP to reach it at.
func ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerSandbox {
			return cs.Ready && cs.State.Running != nil
		}
	}
	return false
}

// failed says why a starting pod will never become ready, or "".
func failed(p *corev1.Pod) string {
	why := ""
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && fatalWaiting[w.Reason] {
			why = fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, cut(w.Message, 300))
			break
		}
		if t := cs.State.Terminated; t != nil && (cs.Name == ContainerSandbox || t.ExitCode != 0) {
			why = fmt.Sprintf("container %s terminated: %s (exit code %d): %s", cs.Name, t.Reason, t.ExitCode, cut(t.Message, 300))
			break
		}
	}
	switch {
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		if why == "" {
			return "pod " + string(p.Status.Phase) + statusText(p)
		}
		return "pod " + string(p.Status.Phase) + ": " + why
	case p.DeletionTimestamp != nil:
		return "pod is being deleted"
	}
	return why
}

// statusText is the pod's conditions and containers' states that say
// something, for an error.
func statusText(p *corev1.Pod) string {
	var parts []string
	if p.Status.Reason != "" || p.Status.Message != "" {
		parts = append(parts, strings.TrimSpace(p.Status.Reason+" "+p.Status.Message))
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && (c.Reason != "" || c.Message != "") {
			parts = append(parts, fmt.Sprintf("%s: %s %s", c.Type, c.Reason, cut(c.Message, 300)))
		}
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			parts = append(parts, fmt.Sprintf("container %s waiting: %s %s", cs.Name, w.Reason, cut(w.Message, 300)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// maxEvents bounds the events an error quotes.
const maxEvents = 5

// handlerMissing returns why, if the pod's events say that its node has no
// handler for its RuntimeClass (containerd: "no runtime for "runsc" is
// configured"; CRI-O: "runtime handler ... not supported"), or "".
func (r *Runtime) handlerMissing(ctx context.Context, p *corev1.Pod) string {
	evs, err := r.events(ctx, p)
	if err != nil {
		return ""
	}
	for _, e := range evs {
		m := strings.ToLower(e.Message)
		if e.Reason == "FailedCreatePodSandBox" && (strings.Contains(m, "no runtime for") || strings.Contains(m, "runtime handler")) {
			rc := ""
			if p.Spec.RuntimeClassName != nil {
				rc = *p.Spec.RuntimeClassName
			}
			return fmt.Sprintf("the node cannot run RuntimeClass %q (its handler is not configured in the node's container runtime)", rc)
		}
	}
	return ""
}

// events returns the pod's events, oldest first.
func (r *Runtime) events(ctx context.Context, p *corev1.Pod) ([]corev1.Event, error) {
	evs, err := r.cs.CoreV1().Events(r.cfg.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + p.Name,
	})
	if err != nil {
		return nil, err
	}
	var mine []corev1.Event
	for _, e := range evs.Items {
		// The field selector again: fakes and old servers ignore it.
		if e.InvolvedObject.Name == p.Name && (e.InvolvedObject.UID == "" || e.InvolvedObject.UID == p.UID) {
			mine = append(mine, e)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return eventTime(mine[i]).Before(eventTime(mine[j])) })
	return mine, nil
}

// notReady is the error of a pod that did not become ready: why, its
// state, and its last events (what the scheduler and the kubelet said).
func (r *Runtime) notReady(ctx context.Context, p *corev1.Pod, why string) error {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	msg := fmt.Sprintf("kube: pod %s/%s did not become ready: %s", r.cfg.Namespace, p.Name, why)
	if !strings.HasPrefix(why, "pod ") {
		msg += statusText(p)
	}
	mine, err := r.events(ectx, p)
	if err == nil {
		if len(mine) > maxEvents {
			mine = mine[len(mine)-maxEvents:]
		}
		var parts []string
		for _, e := range mine {
			parts = append(parts, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, cut(e.Message, 300)))
		}
		if len(parts) > 0 {
			msg += "; events: " + strings.Join(parts, "; ")
		}
	} else {
		msg += "; events: " + r.convert(err, "events", "list events").Error()
	}
	return fmt.Errorf("%w: %s", sandbox.ErrUnavailable, msg)
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

var _ sandbox.UseRecorder = (*Runtime)(nil)

// lastUsed is an AnnotationLastUsed value; zero when absent or not a time.
func lastUsed(v string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// RecordUse implements sandbox.UseRecorder: it sets the pod's
// AnnotationLastUsed with a JSON patch whose first operations test that
// the pod is still sb's session's (a pod of the same name made for another
// tenant or session meanwhile fails the patch, untouched). A claimed
// pooled sandbox's pod is its pooled name's (sb.PoolName). A pod that is
// gone is ErrNotFound.
func (r *Runtime) RecordUse(ctx context.Context, sb sandbox.Sandbox, at time.Time) error {
	path := func(k string) string {
		return "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
	}
	session := sb.Session
	if sb.PoolName != "" {
		session = sb.PoolName
	}
	patch, err := json.Marshal([]map[string]string{
		{"op": "test", "path": path(AnnotationTenant), "value": sb.Tenant},
		{"op": "test", "path": path(AnnotationSession), "value": session},
		{"op": "add", "path": path(AnnotationLastUsed), "value": at.UTC().Format(time.RFC3339Nano)},
	})
	if err != nil {
		return fmt.Errorf("kube: record the use of pod %s: %w", sb.ID, err)
	}
	if _, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Patch(ctx, sb.ID, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return r.convert(err, "pods", "record the use of pod %s", sb.ID)
	}
	return nil
}

// Get implements sandbox.Runtime.
func (r *Runtime) Get(ctx context.Context, tenant, session string) (sandbox.Sandbox, error) {
	name := PodName(tenant, session)
	p, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return sandbox.Sandbox{}, r.convert(err, "pods", "get pod %s", name)
	}
	if err := r.ours(p, tenant, session); err != nil {
		return sandbox.Sandbox{}, err
	}
	token, err := r.token(ctx, p)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return describe(p, token, r.cfg.AgentPort), nil
}

// token reads the pod's token from its Secret: "" if the Secret is gone
// or not the pod's (describe then calls the sandbox unusable).
func (r *Runtime) token(ctx context.Context, p *corev1.Pod) (string, error) {
	s, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", r.convert(err, "secrets", "get secret %s", p.Name)
	}
	return secretToken(s, p), nil
}

func secretToken(s *corev1.Secret, p *corev1.Pod) string {
	for _, o := range s.OwnerReferences {
		if o.Kind == "Pod" && o.UID == p.UID {
			return string(s.Data[SecretKey])
		}
	}
	return ""
}

// List implements sandbox.Runtime: the namespace's shellbox pods (of any
// release), and their Secrets, in two calls.
func (r *Runtime) List(ctx context.Context, owner string) ([]sandbox.Sandbox, error) {
	sel := labels.Set{sandbox.LabelManaged: "true"}.AsSelector().String()
	// The Secrets are listed while the pods are: one round trip. A pod
	// whose Secret is made after that list has no token here (describe:
	// not usable yet), as with a Secret made after a later list.
	var pl *corev1.PodList
	var sl *corev1.SecretList
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		pl, err = r.cs.CoreV1().Pods(r.cfg.Namespace).List(gctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return r.convert(err, "pods", "list pods")
		}
		return nil
	})
	g.Go(func() (err error) {
		sl, err = r.cs.CoreV1().Secrets(r.cfg.Namespace).List(gctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return r.convert(err, "secrets", "list secrets")
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	secrets := map[string]*corev1.Secret{}
	for i := range sl.Items {
		secrets[sl.Items[i].Name] = &sl.Items[i]
	}
	out := make([]sandbox.Sandbox, 0, len(pl.Items))
	for i := range pl.Items {
		p := &pl.Items[i]
		// The owner is compared here, on the exact annotation: the label
		// holds a sanitised form.
		if p.Labels[sandbox.LabelManaged] != "true" || (owner != "" && p.Annotations[AnnotationOwner] != owner) {
			continue
		}
		token := ""
		if s := secrets[p.Name]; s != nil {
			token = secretToken(s, p)
		}
		out = append(out, describe(p, token, r.cfg.AgentPort))
	}
	return out, nil
}

// Remove implements sandbox.Runtime: marks the pod as shellbox's own
// deletion (AnnotationRemoving, which the deletion watch leaves alone),
// deletes it with a grace of RemoveGraceSeconds, tells its agent to end
// now (POST /v1/exit: an agent serving through its grace would otherwise
// wait for the kubelet's SIGKILL), deletes its Secret, and waits, bounded
// by ctx, until the pod is gone, so a Get after Remove finds nothing and a
// new pod of the session can take the name. A pod shellbox did not create
// is ErrConflict and left alone.
//
// A pod someone else is deleting already (a deletionTimestamp without the
// mark: kubectl delete, an eviction, a drain) is only waited for: its
// grace is not shortened nor its agent ended nor its Secret deleted, since
// the server may be saving its workspace through it (WatchDeletions);
// the agent ends once that is done, or the grace does.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	pods := r.cs.CoreV1().Pods(r.cfg.Namespace)
	p, err := pods.Get(ctx, id, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.deleteSecret(ctx, id, "")
		return nil
	}
	if err != nil {
		return r.convert(err, "pods", "get pod %s", id)
	}
	if p.Labels[sandbox.LabelManaged] != "true" {
		return fmt.Errorf("%w: kube: pod %s/%s was not created by shellbox: not removing it", sandbox.ErrConflict, r.cfg.Namespace, id)
	}
	if p.DeletionTimestamp == nil || p.Annotations[AnnotationRemoving] != "" {
		if err := r.removeOwn(ctx, p); err != nil {
			return err
		}
	}
	for {
		cur, err := pods.Get(ctx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID) {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return r.convert(err, "pods", "get pod %s", id)
		}
		select {
		case <-ctx.Done():
			return r.convert(ctx.Err(), "pods", "wait for pod %s to go", id)
		case <-time.After(r.cfg.Poll):
		}
	}
}

// removeOwn is Remove's deletion of p: marked, deleted with a short grace,
// its agent told to end, its Secret deleted.
func (r *Runtime) removeOwn(ctx context.Context, p *corev1.Pod) error {
	pods := r.cs.CoreV1().Pods(r.cfg.Namespace)
	if p.Annotations[AnnotationRemoving] == "" {
		// Conditioned on the uid: never the mark of a newer pod of the
		// session. A pod gone or replaced meanwhile needs none.
		mark, err := json.Marshal([]map[string]string{
			{"op": "test", "path": "/metadata/uid", "value": string(p.UID)},
			{"op": "add", "path": "/metadata/annotations/" + jsonPointer(AnnotationRemoving), "value": time.Now().UTC().Format(time.RFC3339Nano)},
		})
		if err != nil {
			return fmt.Errorf("kube: mark pod %s removed: %w", p.Name, err)
		}
		if _, err := pods.Patch(ctx, p.Name, types.JSONPatchType, mark, metav1.PatchOptions{}); err != nil &&
			!apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			return r.convert(err, "pods", "mark pod %s removed", p.Name)
		}
	}
	grace := min(r.cfg.GracePeriodSeconds, RemoveGraceSeconds)
	err := r.cs.CoreV1().Pods(r.cfg.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return r.convert(err, "pods", "delete pod %s", p.Name)
	}
	s, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return nil // the garbage collector deletes it with the pod
	}
	if sb := describe(p, secretToken(s, p), r.cfg.AgentPort); sb.State == sandbox.StateRunning {
		// Best effort: an agent that does not answer is ended by the
		// kubelet at the grace's end.
		ectx, cancel := context.WithTimeout(ctx, exitBound)
		_ = r.exit(ectx, sb.Agent)
		cancel()
	}
	// The garbage collector would delete it too, once the pod is gone; now
	// is sooner.
	r.deleteSecretOf(ctx, s, p.UID)
	return nil
}

// exitBound bounds Remove's request to the agent to end.
const exitBound = 2 * time.Second

// jsonPointer escapes a key for a JSON patch path.
func jsonPointer(k string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(k) }

// Ping implements sandbox.Pinger: one list of at most one pod in the
// namespace, which needs the API server and the RBAC the runtime lives on.
func (r *Runtime) Ping(ctx context.Context) error {
	if _, err := r.cs.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return r.convert(err, "pods", "list pods")
	}
	return nil
}

// Runtimes implements sandbox.RuntimeLister: runc when it maps to the
// cluster's default handler or to a RuntimeClass that exists, runsc when
// its RuntimeClass exists. RuntimeClasses are cluster objects: without
// RBAC to get them (a namespaced Role) a configured class is counted, and
// Create says if it is missing.
func (r *Runtime) Runtimes(ctx context.Context) ([]string, error) {
	var out []string
	for _, rt := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		name := r.cfg.RuntimeClasses[rt]
		if name == "" {
			if rt == sandbox.RuntimeRunc {
				out = append(out, rt)
			}
			continue
		}
		_, err := r.cs.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil, apierrors.IsForbidden(err):
			out = append(out, rt)
		case apierrors.IsNotFound(err):
		default:
			return nil, r.convert(err, "runtimeclasses", "get runtime class %s", name)
		}
	}
	return out, nil
}

// describe returns what a pod says of its sandbox.
func describe(p *corev1.Pod, token string, port int32) sandbox.Sandbox {
	a := p.Annotations
	sb := sandbox.Sandbox{
		ID:       p.Name,
		Tenant:   a[AnnotationTenant],
		Session:  a[AnnotationSession],
		Owner:    a[AnnotationOwner],
		Runtime:  a[AnnotationRuntime],
		Image:    a[AnnotationImage],
		Network:  a[AnnotationNetwork],
		Settings: a[AnnotationSettings],
		LastUsed: lastUsed(a[AnnotationLastUsed]),
		Created:  p.CreationTimestamp.Time,
	}
	if m := a[AnnotationMounts]; m != "" && m != "[]" {
		_ = json.Unmarshal([]byte(m), &sb.Mounts)
	}
	sb.State, sb.OOMKilled = state(p)
	if token == "" && sb.State == sandbox.StateRunning {
		// Without its token nothing can talk to the agent. Create makes
		// the token's Secret right after the pod, so a young one is being
		// created (perhaps by another replica: the Manager waits for it);
		// one older than a creation takes is unusable, and the Manager
		// replaces it.
		sb.State = sandbox.StateCreated
	}
	if p.Status.PodIP != "" {
		sb.Agent = agentapi.Endpoint{Network: "tcp", Address: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))), Token: token}
	}
	return sb
}

// state maps a pod's phase and its sandbox container to a sandbox state,
// and tells whether the container was OOM-killed.
func state(p *corev1.Pod) (sandbox.State, bool) {
	if p.DeletionTimestamp != nil {
		return sandbox.StateOther, false
	}
	var c *corev1.ContainerStatus
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == ContainerSandbox {
			c = &p.Status.ContainerStatuses[i]
		}
	}
	oom := c != nil && c.State.Terminated != nil && c.State.Terminated.Reason == "OOMKilled"
	switch p.Status.Phase {
	case corev1.PodPending, "":
		return sandbox.StateCreated, false
	case corev1.PodRunning:
		if c != nil && c.State.Running != nil {
			return sandbox.StateRunning, false
		}
		if c != nil && c.State.Terminated != nil {
			return sandbox.StateExited, oom
		}
		return sandbox.StateOther, false
	case corev1.PodSucceeded, corev1.PodFailed:
		return sandbox.StateExited, oom
	}
	return sandbox.StateOther, false
}

func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
