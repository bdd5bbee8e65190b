package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/sandbox"
)

// cluster is a fake API server (client-go's fake clientset) with what the
// real one and a kubelet would do to a created pod.
type cluster struct {
	cs *fake.Clientset
	n  atomic.Int64
	// kubelet says what becomes of a created pod: it may set its status
	// (as the kubelet would) and add events. Default: running and ready.
	mu      sync.Mutex
	kubelet func(p *corev1.Pod) []corev1.Event
	// exits counts Remove's requests to agents to end.
	exits atomic.Int64
}

func newCluster(t *testing.T, objs ...runtime.Object) *cluster {
	t.Helper()
	c := &cluster{cs: fake.NewClientset(objs...)}
	c.kubelet = c.runReady
	c.cs.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return false, nil, nil
		}
		// What the API server does: a uid and a creation time.
		if m.GetUID() == "" {
			m.SetUID(types.UID(fmt.Sprintf("uid-%d", c.n.Add(1))))
		}
		m.SetCreationTimestamp(metav1.Now())
		if p, ok := obj.(*corev1.Pod); ok {
			c.mu.Lock()
			k := c.kubelet
			c.mu.Unlock()
			for _, e := range k(p) {
				e.Namespace = p.Namespace
				e.InvolvedObject = corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
				if err := c.cs.Tracker().Add(&e); err != nil {
					t.Errorf("event: %v", err)
				}
			}
		}
		return false, nil, nil
	})
	return c
}

func (c *cluster) setKubelet(k func(p *corev1.Pod) []corev1.Event) {
	c.mu.Lock()
	c.kubelet = k
	c.mu.Unlock()
}

// runReady is a kubelet that starts the pod at once.
func (c *cluster) runReady(p *corev1.Pod) []corev1.Event {
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		PodIP: fmt.Sprintf("10.244.0.%d", c.n.Add(1)%250+2),
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: ContainerSandbox, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		}},
	}
	return nil
}

func (c *cluster) runtime(t *testing.T, mod func(*Config)) *Runtime {
	t.Helper()
	cfg := Config{Namespace: "sessions", Release: "prod", AgentImage: "shellbox:1.0", Poll: time.Millisecond, ReadyTimeout: 5 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(c.cs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The fake pods' addresses lead nowhere: Remove's request to the
	// agent to end is counted instead.
	r.exit = func(context.Context, agentapi.Endpoint) error { c.exits.Add(1); return nil }
	return r
}

func (c *cluster) pod(t *testing.T, name string) (*corev1.Pod, error) {
	t.Helper()
	return c.cs.CoreV1().Pods("sessions").Get(context.Background(), name, metav1.GetOptions{})
}

func (c *cluster) secret(t *testing.T, name string) (*corev1.Secret, error) {
	t.Helper()
	return c.cs.CoreV1().Secrets("sessions").Get(context.Background(), name, metav1.GetOptions{})
}

// TestLifecycle: create (pod, then its secret owned by it) → get → list →
// remove, with the endpoint and token as the server dials them.
func TestLifecycle(t *testing.T) {
	c := newCluster(t)
	r := c.runtime(t, nil)
	ctx := context.Background()
	spec := testSpec(t)
	sb, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	name := PodName("acme", "s-1")
	if sb.ID != name || sb.Tenant != "acme" || sb.Session != "s-1" || sb.Owner != "prod" || sb.Runtime != "runc" ||
		sb.Image != "shellbox-test:latest" || sb.Network != "none" || sb.State != sandbox.StateRunning || sb.Created.IsZero() {
		t.Errorf("created: %+v", sb)
	}
	p, err := c.pod(t, name)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Agent.Network != "tcp" || sb.Agent.Address != p.Status.PodIP+":7070" || len(sb.Agent.Token) != 64 {
		t.Errorf("endpoint %+v, pod IP %s", sb.Agent, p.Status.PodIP)
	}
	s, err := c.secret(t, name)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data[SecretKey]) != sb.Agent.Token {
		t.Errorf("secret token differs from the endpoint's")
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != p.UID || s.OwnerReferences[0].Kind != "Pod" ||
		s.OwnerReferences[0].Name != name || s.OwnerReferences[0].BlockOwnerDeletion != nil {
		t.Errorf("secret owner references %+v, want the pod %s", s.OwnerReferences, p.UID)
	}
	if s.Labels[sandbox.LabelManaged] != "true" || s.Labels[LabelRelease] != "prod" {
		t.Errorf("secret labels %v", s.Labels)
	}

	got, err := r.Get(ctx, "acme", "s-1")
	if err != nil || got.ID != sb.ID || got.Agent != sb.Agent || got.State != sandbox.StateRunning {
		t.Errorf("Get: %+v, %v; created %+v", got, err, sb)
	}
	// A second session, another owner.
	other := testSpec(t)
	other.Session, other.Owner = "s-2", "other"
	if _, err := r.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	for owner, want := range map[string]int{"prod": 1, "other": 1, "": 2, "nobody": 0} {
		list, err := r.List(ctx, owner)
		if err != nil || len(list) != want {
			t.Errorf("List(%q): %d sandboxes, %v; want %d", owner, len(list), err, want)
		}
		for _, l := range list {
			if l.Agent.Token == "" || l.State != sandbox.StateRunning {
				t.Errorf("List(%q): %+v", owner, l)
			}
		}
	}

	if err := r.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pod(t, name); !apierrors.IsNotFound(err) {
		t.Errorf("pod after Remove: %v", err)
	}
	if _, err := c.secret(t, name); !apierrors.IsNotFound(err) {
		t.Errorf("secret after Remove: %v", err)
	}
	if _, err := r.Get(ctx, "acme", "s-1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after Remove: %v", err)
	}
	if err := r.Remove(ctx, sb.ID); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// TestGetStates: what Get makes of pods in other states, and of a pod
// whose secret is gone.
func TestGetStates(t *testing.T) {
	c := newCluster(t)
	r := c.runtime(t, nil)
	ctx := context.Background()
	if _, err := r.Create(ctx, testSpec(t)); err != nil {
		t.Fatal(err)
	}
	name := PodName("acme", "s-1")
	update := func(f func(*corev1.Pod)) {
		p, err := c.pod(t, name)
		if err != nil {
			t.Fatal(err)
		}
		f(p)
		if _, err := c.cs.CoreV1().Pods("sessions").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	set := func(st corev1.PodStatus) { update(func(p *corev1.Pod) { p.Status = st }) }
	set(corev1.PodStatus{Phase: corev1.PodFailed, PodIP: "10.0.0.9", ContainerStatuses: []corev1.ContainerStatus{{
		Name: ContainerSandbox, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}})
	if sb, err := r.Get(ctx, "acme", "s-1"); err != nil || sb.State != sandbox.StateExited || !sb.OOMKilled {
		t.Errorf("OOM-killed: %+v, %v", sb, err)
	}
	set(corev1.PodStatus{Phase: corev1.PodPending})
	if sb, err := r.Get(ctx, "acme", "s-1"); err != nil || sb.State != sandbox.StateCreated || sb.Agent.Network != "" {
		t.Errorf("pending: %+v, %v", sb, err)
	}
	update(func(p *corev1.Pod) { c.runReady(p) })
	if err := c.cs.CoreV1().Secrets("sessions").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if sb, err := r.Get(ctx, "acme", "s-1"); err != nil || sb.State != sandbox.StateCreated || sb.Agent.Token != "" {
		t.Errorf("without its secret: %+v, %v; want StateCreated (not usable yet)", sb, err)
	}
}

// TestAlreadyExistsAndConflict: a second Create of a session is
// ErrAlreadyExists and changes nothing; a pod of the session's name that
// shellbox did not create is ErrConflict for Create, Get and Remove, and
// stays.
func TestAlreadyExistsAndConflict(t *testing.T) {
	c := newCluster(t)
	r := c.runtime(t, nil)
	ctx := context.Background()
	first, err := r.Create(ctx, testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, testSpec(t)); !errors.Is(err, sandbox.ErrAlreadyExists) {
		t.Errorf("second Create: %v, want ErrAlreadyExists", err)
	}
	if got, err := r.Get(ctx, "acme", "s-1"); err != nil || got.Agent != first.Agent {
		t.Errorf("after the refused Create: %+v, %v", got, err)
	}

	name := PodName("acme", "foreign")
	if _, err := c.cs.CoreV1().Pods("sessions").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sessions"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t)
	spec.Session = "foreign"
	if _, err := r.Create(ctx, spec); !errors.Is(err, sandbox.ErrConflict) {
		t.Errorf("Create over a foreign pod: %v, want ErrConflict", err)
	}
	if _, err := r.Get(ctx, "acme", "foreign"); !errors.Is(err, sandbox.ErrConflict) {
		t.Errorf("Get of a foreign pod: %v, want ErrConflict", err)
	}
	if err := r.Remove(ctx, name); !errors.Is(err, sandbox.ErrConflict) {
		t.Errorf("Remove of a foreign pod: %v, want ErrConflict", err)
	}
	if _, err := c.pod(t, name); err != nil {
		t.Errorf("the foreign pod is gone: %v", err)
	}
	if _, err := c.secret(t, name); !apierrors.IsNotFound(err) {
		t.Errorf("a secret was made for the foreign pod: %v", err)
	}
}

// TestStaleSecret: a secret of the session left by an earlier pod (the
// garbage collector has not run) is replaced; one shellbox did not make is
// a conflict, and the pod is deleted again.
func TestStaleSecret(t *testing.T) {
	name := PodName("acme", "s-1")
	stale := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sessions", UID: "old-secret",
		Labels:          map[string]string{sandbox.LabelManaged: "true"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: "old-pod"}}},
		Data: map[string][]byte{SecretKey: []byte("old")}}
	c := newCluster(t, stale)
	r := c.runtime(t, nil)
	sb, err := r.Create(context.Background(), testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.secret(t, name)
	if err != nil || string(s.Data[SecretKey]) != sb.Agent.Token || sb.Agent.Token == "old" {
		t.Errorf("secret after Create over a stale one: %+v, %v", s, err)
	}

	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: PodName("acme", "s-2"), Namespace: "sessions"}}
	c = newCluster(t, foreign)
	r = c.runtime(t, nil)
	spec := testSpec(t)
	spec.Session = "s-2"
	if _, err := r.Create(context.Background(), spec); !errors.Is(err, sandbox.ErrConflict) {
		t.Errorf("Create over a foreign secret: %v, want ErrConflict", err)
	}
	if _, err := c.pod(t, PodName("acme", "s-2")); !apierrors.IsNotFound(err) {
		t.Errorf("the pod of a failed Create is left: %v", err)
	}
}

// TestNotFound: Get of a session without a pod; Remove of a pod that is
// gone is success.
func TestNotFound(t *testing.T) {
	r := newCluster(t).runtime(t, nil)
	if _, err := r.Get(context.Background(), "acme", "none"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get: %v, want ErrNotFound", err)
	}
	if err := r.Remove(context.Background(), "shellbox-acme-none-0123456789"); err != nil {
		t.Errorf("Remove: %v", err)
	}
}

// TestForbidden: the API server's 403s become ErrUnavailable saying what
// is missing: RBAC for pods in the namespace, the RuntimeClass, or the
// namespace's Pod Security level.
func TestForbidden(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"rbac", apierrors.NewForbidden(pods, "", errors.New(`User "system:serviceaccount:shellbox:shellbox" cannot create resource "pods" in API group "" in the namespace "sessions"`)),
			"no RBAC for pods in namespace sessions"},
		{"runtimeclass", apierrors.NewForbidden(pods, "x", errors.New(`pod rejected: RuntimeClass "gvisor" not found`)),
			"RuntimeClass missing"},
		{"podsecurity", apierrors.NewForbidden(pods, "x", errors.New(`violates PodSecurity "restricted:latest": runAsNonRoot != true`)),
			"refused by Pod Security admission: label namespace sessions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			r := c.runtime(t, nil)
			_, err := r.Create(context.Background(), testSpec(t))
			if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Create: %v, want ErrUnavailable with %q", err, tc.want)
			}
		})
	}
	c := newCluster(t)
	c.cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(pods, "", errors.New(`User "u" cannot list resource "pods" in API group "" in the namespace "sessions"`))
	})
	r := c.runtime(t, nil)
	if err := r.Ping(context.Background()); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "no RBAC for pods in namespace sessions") {
		t.Errorf("Ping: %v", err)
	}
	if _, err := r.List(context.Background(), ""); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("List: %v", err)
	}
}

// TestNeverReady: a pod that cannot start fails Create with its reason and
// its events, and leaves neither pod nor secret behind.
func TestNeverReady(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kubelet func(p *corev1.Pod) []corev1.Event
		want    []string
	}{
		{"image not on the node", func(p *corev1.Pod) []corev1.Event {
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerSandbox,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull",
					Message: `Container image "shellbox-test:latest" is not present with pull policy of Never`}}}}}
			return []corev1.Event{{ObjectMeta: metav1.ObjectMeta{Name: p.Name + ".1"}, Type: "Warning", Reason: "ErrImageNeverPull",
				Message: `Container image "shellbox-test:latest" is not present with pull policy of Never`}}
		}, []string{"container sandbox: ErrImageNeverPull", "events: Warning ErrImageNeverPull"}},
		{"unschedulable", func(p *corev1.Pod) []corev1.Event {
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
				Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient memory."}}}
			return []corev1.Event{{ObjectMeta: metav1.ObjectMeta{Name: p.Name + ".1"}, Type: "Warning", Reason: "FailedScheduling",
				Message: "0/1 nodes are available: 1 Insufficient memory."}}
		}, []string{"not ready within 50ms", "PodScheduled: Unschedulable", "events: Warning FailedScheduling: 0/1 nodes are available"}},
		{"runtime handler missing on the node", func(p *corev1.Pod) []corev1.Event {
			p.Status = corev1.PodStatus{Phase: corev1.PodPending}
			return []corev1.Event{{ObjectMeta: metav1.ObjectMeta{Name: p.Name + ".1"}, Type: "Warning", Reason: "FailedCreatePodSandBox",
				Message: `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "runsc" is configured`}}
		}, []string{`the node cannot run RuntimeClass "gvisor"`, `events: Warning FailedCreatePodSandBox: Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "runsc"`}},
		{"agent exits", func(p *corev1.Pod) []corev1.Event {
			p.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerSandbox,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 2,
					Message: "shellbox-agent: --listen needs a per-session token"}}}}}
			return nil
		}, []string{"pod Failed", "container sandbox terminated: Error (exit code 2): shellbox-agent: --listen needs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.setKubelet(tc.kubelet)
			timeout := 50 * time.Millisecond
			spec := testSpec(t)
			if strings.HasPrefix(tc.name, "runtime handler") {
				// Found in the events long before the timeout.
				timeout = time.Minute
				spec = testSpec(t, sandbox.WithRuntime(sandbox.RuntimeRunsc))
			}
			r := c.runtime(t, func(cfg *Config) { cfg.ReadyTimeout = timeout })
			start := time.Now()
			_, err := r.Create(context.Background(), spec)
			if time.Since(start) > 10*time.Second {
				t.Errorf("Create took %v", time.Since(start))
			}
			if !errors.Is(err, sandbox.ErrUnavailable) {
				t.Fatalf("Create: %v, want ErrUnavailable", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			name := PodName("acme", "s-1")
			if _, err := c.pod(t, name); !apierrors.IsNotFound(err) {
				t.Errorf("pod left behind: %v", err)
			}
			if _, err := c.secret(t, name); !apierrors.IsNotFound(err) {
				t.Errorf("secret left behind: %v", err)
			}
		})
	}
}

// TestNeverReadyPollErrors: a poll that gets no answer from the API server
// (here the client's rate limiter, which refuses a wait it predicts would
// pass the deadline before the deadline has passed, as a loaded CI cluster
// showed) is not the pod's state: the wait goes on, and its timeout names
// the pod's reason and the last poll's error.
func TestNeverReadyPollErrors(t *testing.T) {
	c := newCluster(t)
	c.setKubelet(func(p *corev1.Pod) []corev1.Event {
		p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient memory."}}}
		return nil
	})
	var gets atomic.Int64
	c.cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gets.Add(1)%2 == 0 {
			return true, nil, fmt.Errorf("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
		}
		return false, nil, nil
	})
	r := c.runtime(t, func(cfg *Config) { cfg.ReadyTimeout = 300 * time.Millisecond })
	_, err := r.Create(context.Background(), testSpec(t))
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("Create: %v, want ErrUnavailable", err)
	}
	for _, w := range []string{"not ready within 300ms", "PodScheduled: Unschedulable", "the last poll: client rate limiter"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\nlacks %q", err, w)
		}
	}
	if gets.Load() < 3 {
		t.Errorf("%d polls: the wait ended at the first error", gets.Load())
	}
}

// TestCreateCancelled: the caller giving up is ErrUnavailable carrying the
// context's error, and nothing is left.
func TestCreateCancelled(t *testing.T) {
	c := newCluster(t)
	c.setKubelet(func(p *corev1.Pod) []corev1.Event { return nil }) // stays pending
	r := c.runtime(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := r.Create(ctx, testSpec(t))
	if !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Create: %v", err)
	}
	if _, err := c.pod(t, PodName("acme", "s-1")); !apierrors.IsNotFound(err) {
		t.Errorf("pod left behind: %v", err)
	}
}

// TestRefusedSpecs: what a pod cannot carry is ErrInvalid before any call.
func TestRefusedSpecs(t *testing.T) {
	c := newCluster(t)
	r := c.runtime(t, nil)
	dir := t.TempDir()
	for name, spec := range map[string]sandbox.Spec{
		"mounts":           testSpec(t, sandbox.WithMounts(sandbox.Mount{Source: dir, Target: "/data"})),
		"volumes > memory": testSpec(t, sandbox.WithMemory(700*sandbox.MiB)),
		"bad label":        testSpec(t, sandbox.WithLabels(map[string]string{"a b": "c"})),
	} {
		if _, err := r.Create(context.Background(), spec); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := len(c.cs.Actions()); n != 0 {
		t.Errorf("%d API calls for refused specs", n)
	}
}

// TestRuntimes: runc on the default handler always; runsc when its
// RuntimeClass exists, or when RBAC does not let us look.
func TestRuntimes(t *testing.T) {
	ctx := context.Background()
	r := newCluster(t).runtime(t, nil)
	if got, err := r.Runtimes(ctx); err != nil || strings.Join(got, ",") != "runc" {
		t.Errorf("without RuntimeClasses: %v, %v", got, err)
	}
	r = newCluster(t, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}).runtime(t, nil)
	if got, err := r.Runtimes(ctx); err != nil || strings.Join(got, ",") != "runc,runsc" {
		t.Errorf("with gvisor: %v, %v", got, err)
	}
	c := newCluster(t)
	c.cs.PrependReactor("get", "runtimeclasses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "node.k8s.io", Resource: "runtimeclasses"}, "gvisor", errors.New("cannot get"))
	})
	if got, err := c.runtime(t, nil).Runtimes(ctx); err != nil || strings.Join(got, ",") != "runc,runsc" {
		t.Errorf("without RBAC on runtimeclasses: %v, %v", got, err)
	}
	// runsc without a class configured cannot be created.
	r = newCluster(t).runtime(t, func(c *Config) { c.RuntimeClasses = map[string]string{"runsc": ""} })
	if got, _ := r.Runtimes(ctx); strings.Join(got, ",") != "runc" {
		t.Errorf("runsc unmapped: %v", got)
	}
	if _, err := r.Create(ctx, testSpec(t, sandbox.WithRuntime(sandbox.RuntimeRunsc))); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("Create runsc unmapped: %v", err)
	}
}

// TestCreateRaceWithDeletion: a pod of the session that is gone by the
// time Create looks at it (a deletion finishing) does not fail Create.
func TestCreateRaceWithDeletion(t *testing.T) {
	c := newCluster(t)
	var once atomic.Bool
	c.cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if once.CompareAndSwap(false, true) {
			return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "pods"}, "x")
		}
		return false, nil, nil
	})
	sb, err := c.runtime(t, nil).Create(context.Background(), testSpec(t))
	if err != nil || sb.State != sandbox.StateRunning {
		t.Errorf("Create: %+v, %v", sb, err)
	}
}

// TestConvert: the API server's errors and the context's, classed once.
func TestConvert(t *testing.T) {
	r := newCluster(t).runtime(t, nil)
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err   error
		class error
		text  string
	}{
		{apierrors.NewNotFound(gr, "p"), sandbox.ErrNotFound, "not found"},
		{apierrors.NewAlreadyExists(gr, "p"), sandbox.ErrAlreadyExists, "already exists"},
		{apierrors.NewConflict(gr, "p", errors.New("modified")), sandbox.ErrConflict, "modified"},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil), sandbox.ErrInvalid, "invalid"},
		{apierrors.NewBadRequest("bad"), sandbox.ErrInvalid, "bad"},
		{apierrors.NewUnauthorized("who"), sandbox.ErrUnavailable, "rejected shellbox's credentials"},
		{apierrors.NewForbidden(gr, "", errors.New("quota exceeded")), sandbox.ErrUnavailable, "refused by admission"},
		{apierrors.NewServiceUnavailable("down"), sandbox.ErrUnavailable, "down"},
		{apierrors.NewTooManyRequests("slow down", 1), sandbox.ErrUnavailable, "slow down"},
		{errors.New("dial tcp 10.96.0.1:443: connect: connection refused"), sandbox.ErrUnavailable, "connection refused"},
		{context.DeadlineExceeded, sandbox.ErrUnavailable, "deadline"},
	} {
		got := r.convert(tc.err, "pods", "get pod %s", "p")
		if !errors.Is(got, tc.class) || !strings.Contains(got.Error(), tc.text) || !strings.Contains(got.Error(), "kube: get pod p") {
			t.Errorf("convert(%v) = %v, want %v with %q", tc.err, got, tc.class, tc.text)
		}
	}
	if got := r.convert(context.Canceled, "pods", "x"); !errors.Is(got, context.Canceled) {
		t.Errorf("the context's error is lost: %v", got)
	}
}

// A setting that cannot work is ErrInvalid naming its configuration key.
func TestConfigValidate(t *testing.T) {
	ok := Config{Namespace: "sessions", AgentImage: "shellbox:1"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"namespace":   {func(c *Config) { c.Namespace = "Not_A_Label" }, `kube.namespace "Not_A_Label"`},
		"image":       {func(c *Config) { c.AgentImage = "" }, "kube.agentImage: required"},
		"path":        {func(c *Config) { c.AgentPath = "bin/agent" }, `kube.agentPath "bin/agent": must be absolute`},
		"port":        {func(c *Config) { c.AgentPort = 70000 }, "kube.agentPort 70000"},
		"runtime":     {func(c *Config) { c.RuntimeClasses = map[string]string{"kata": "x"} }, `kube.runtimeClasses: "kata" is not a runtime`},
		"class":       {func(c *Config) { c.RuntimeClasses = map[string]string{"runsc": "G V"} }, `kube.runtimeClasses.runsc "G V"`},
		"podSecurity": {func(c *Config) { c.PodSecurity = "privileged" }, `kube.podSecurity "privileged"`},
		"pull":        {func(c *Config) { c.ImagePullPolicy = "Sometimes" }, `kube.imagePullPolicy "Sometimes"`},
		"ratio":       {func(c *Config) { c.CPURequestRatio = 2 }, "kube.cpuRequestRatio 2"},
		"serverNs":    {func(c *Config) { c.ServerNamespace = "a.b" }, `kube.serverNamespace "a.b"`},
		"grace":       {func(c *Config) { c.GracePeriodSeconds = -1 }, "kube.gracePeriodSeconds -1"},
		"selector":    {func(c *Config) { c.ServerSelector = map[string]string{"app": "a b"} }, "kube.serverSelector"},
	} {
		c := ok
		tc.mod(&c)
		err := c.Validate()
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid starting %q", name, err, tc.want)
		}
	}
}

// RecordUse keeps the last use on the pod for every replica's reaper; a
// pod of the name that is not the sandbox's session's is left untouched.
func TestRecordUse(t *testing.T) {
	c := newCluster(t)
	r := c.runtime(t, nil)
	ctx := context.Background()
	sb, err := r.Create(ctx, testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	if !sb.LastUsed.IsZero() {
		t.Errorf("a new pod has a recorded use: %v", sb.LastUsed)
	}
	at := time.Date(2026, 12, 1, 23, 0, 0, 123456789, time.FixedZone("x", 3600))
	if err := r.RecordUse(ctx, sb, at); err != nil {
		t.Fatal(err)
	}
	got, err := r.Get(ctx, "acme", "s-1")
	if err != nil || !got.LastUsed.Equal(at) {
		t.Fatalf("Get: last used %v, %v; want %v", got.LastUsed, err, at)
	}
	if list, err := r.List(ctx, ""); err != nil || len(list) != 1 || !list[0].LastUsed.Equal(at) {
		t.Errorf("List: %+v, %v", list, err)
	}
	forged := sb
	forged.Session = "s-2"
	if err := r.RecordUse(ctx, forged, at.Add(time.Hour)); err == nil {
		t.Errorf("recorded a use on a pod of another session")
	}
	if got, _ := r.Get(ctx, "acme", "s-1"); !got.LastUsed.Equal(at) {
		t.Errorf("the refused record changed the pod: %v", got.LastUsed)
	}
	if err := r.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordUse(ctx, sb, at); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("RecordUse of a gone pod: %v, want ErrNotFound", err)
	}
}

// A failed Create's pod is deleted even when the API server times the
// first deletions out (as it did under a 200-agent chart load, leaving
// pods and Secrets behind): undo retries.
func TestCreateUndoRetries(t *testing.T) {
	c := newCluster(t)
	c.setKubelet(func(p *corev1.Pod) []corev1.Event { return nil }) // stays pending
	var deletes atomic.Int64
	c.cs.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if deletes.Add(1) <= 2 {
			return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "delete", 1)
		}
		return false, nil, nil
	})
	r := c.runtime(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := r.Create(ctx, testSpec(t)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Create: %v", err)
	}
	if _, err := c.pod(t, PodName("acme", "s-1")); !apierrors.IsNotFound(err) {
		t.Errorf("pod left behind after %d deletions: %v", deletes.Load(), err)
	}
	if n := deletes.Load(); n != 3 {
		t.Errorf("%d deletions, want 3 (two timed out)", n)
	}
	if _, err := c.cs.CoreV1().Secrets("sessions").Get(context.Background(), PodName("acme", "s-1"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Secret left behind: %v", err)
	}
}
