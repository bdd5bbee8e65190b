package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/shellbox/shellbox/sandbox"
)

// Pods deleted behind shellbox's back.
//
// A session pod's workspace is an emptyDir: it goes with the pod. When
// someone else deletes the pod (kubectl delete, the Eviction API, which
// kubectl drain uses, a controller), the pod gets a deletionTimestamp and
// its containers SIGTERM, and the kubelet kills them at the end of the
// termination grace (Config.GracePeriodSeconds). WatchDeletions tells the
// server of such a pod while its agent still answers (with SaveOnDelete
// the agent serves through the grace, fenced: no new call starts), so the
// server can stream the workspace out through it and record the session
// suspended.
//
// shellbox's own deletions (Remove: a suspend, a session's end, the idle
// reaper) are marked first with AnnotationRemoving, which the watch skips,
// and take RemoveGraceSeconds at most, their agent told to end at once.
//
// Only the leader saves a pod (one snapshot per deletion), but every
// replica may hold the pod as its session's sandbox (the Manager's entry,
// a cached connection to its agent), and a replica that does dials the
// pod's IP at its next call: once the agent is gone with its pod, a
// blackhole, which costs the call agentapi's connect bound (5 s) before
// the pod is found gone. WatchGone tells every replica, leader or not, of
// each session pod that goes, whoever deletes it (its own mark or not: a
// pod another replica suspends goes too), as soon as its agent is gone:
// the pod is being deleted and its sandbox container no longer runs, or
// the pod is gone, whichever is seen first. Not at its deletionTimestamp:
// through the grace the agent serves (fenced: a call there is refused at
// once and made again in the next pod) and the leader snapshots through
// it, and a replica that let go then would wait for the pod to go by
// polling it (Remove), ten requests a second per pod against its QPS
// budget, through a drain's graces. The replica drops what it holds of
// that pod and no more (session/rescue.go). WatchGone reads no token
// (nothing talks to the agent): it costs each replica one informer of the
// release's session pods (a list, then a watch), nothing per pod.

// AnnotationRemoving marks a pod shellbox deletes itself (Remove), with
// the time it did: the deletion watch leaves it alone.
const AnnotationRemoving = "org.shellbox.removing"

// RemoveGraceSeconds is the grace period of shellbox's own deletions
// (Remove), at most: their workspace is saved or ended already, and their
// agent is told to end at once.
const RemoveGraceSeconds int64 = 2

// WatchDeletions calls doomed with the sandbox of every session pod of
// owner ("" any) that is being deleted by someone other than shellbox
// (a deletionTimestamp and no AnnotationRemoving) while its agent may still
// answer, and with the end of its grace (the pod's deletionTimestamp,
// when the kubelet kills what is left). A claimed pooled pod is its
// claiming session's (Sandbox.PoolName its pooled name); unclaimed pooled
// pods, and pods that do not run, are left out. Each pod is told once per
// process, pods already being deleted when the watch starts included (a
// replica that becomes the leader mid-grace); doomed runs on a goroutine
// of its own per pod, after the pod's token was read.
//
// It watches the release's session pods (the Runtime's one informer, which
// WatchGone shares: watchPods; RBAC pods list and watch) until ctx ends,
// and returns an error only if the first list fails.
func (r *Runtime) WatchDeletions(ctx context.Context, owner string, doomed func(sb sandbox.Sandbox, until time.Time)) error {
	var (
		mu   sync.Mutex
		told = map[types.UID]bool{}
		wg   sync.WaitGroup
	)
	look := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.DeletionTimestamp == nil || p.Annotations[AnnotationRemoving] != "" {
			return
		}
		if owner != "" && p.Annotations[AnnotationOwner] != owner {
			return
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return
		}
		mu.Lock()
		if told[p.UID] {
			mu.Unlock()
			return
		}
		told[p.UID] = true
		mu.Unlock()
		p = p.DeepCopy()
		wg.Go(func() {
			sb, ok := r.doomedSandbox(ctx, p)
			if ok {
				doomed(sb, p.DeletionTimestamp.Time)
			}
		})
	}
	err := r.watchPods(ctx, cache.ResourceEventHandlerFuncs{
		AddFunc:    look,
		UpdateFunc: func(_, obj any) { look(obj) },
		DeleteFunc: func(obj any) {
			if p, ok := deletedPod(obj); ok {
				mu.Lock()
				delete(told, p.UID)
				mu.Unlock()
			}
		},
	})
	wg.Wait()
	if err != nil {
		return fmt.Errorf("watching session pods' deletions: %w", err)
	}
	return nil
}

// WatchGone calls gone with the sandbox of every session pod of owner (""
// any) that goes, whoever deletes it, once per pod, as soon as its agent
// is gone: the pod is being deleted (a deletionTimestamp, with shellbox's
// mark or without) and its sandbox container no longer runs (agentGone),
// or the pod is gone, whichever is seen first. Pods in that state when the
// watch starts are told too. A claimed pooled pod is its claiming
// session's (Sandbox.PoolName its pooled name); unclaimed pooled pods are
// left out. The sandbox is the pod as Get describes it (ID, Created),
// without its token: nothing talks to its agent. gone runs on the watch's
// goroutine and must not block.
//
// Every replica runs it (session/rescue.go); it shares the Runtime's one
// informer of the release's session pods with WatchDeletions (watchPods),
// until ctx ends, and returns an error only if the first list fails.
func (r *Runtime) WatchGone(ctx context.Context, owner string, gone func(sb sandbox.Sandbox)) error {
	// told holds the pods told before they were gone, until they are:
	// one entry per session pod at most.
	var (
		mu   sync.Mutex
		told = map[types.UID]bool{}
	)
	tell := func(p *corev1.Pod) {
		if owner != "" && p.Annotations[AnnotationOwner] != owner {
			return
		}
		sb := describe(p, "", r.cfg.AgentPort)
		if sandbox.IsPooled(sb.Session) {
			claimed := p.Annotations[AnnotationClaimedBy]
			if claimed == "" {
				return
			}
			sb.Session, sb.PoolName = claimed, sb.Session
		}
		gone(sb)
	}
	look := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || !agentGone(p) {
			return
		}
		mu.Lock()
		first := !told[p.UID]
		told[p.UID] = true
		mu.Unlock()
		if first {
			tell(p)
		}
	}
	err := r.watchPods(ctx, cache.ResourceEventHandlerFuncs{
		AddFunc:    look,
		UpdateFunc: func(_, obj any) { look(obj) },
		DeleteFunc: func(obj any) {
			p, ok := deletedPod(obj)
			if !ok {
				return
			}
			mu.Lock()
			was := told[p.UID]
			delete(told, p.UID)
			mu.Unlock()
			if !was {
				tell(p)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching session pods that go: %w", err)
	}
	return nil
}

// agentGone says whether p, a pod being deleted, has no agent any more:
// its sandbox container no longer runs (the agent ended, the grace ran
// out), or the pod no longer runs or has no address.
func agentGone(p *corev1.Pod) bool {
	if p.DeletionTimestamp == nil {
		return false
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerSandbox {
			return cs.State.Running == nil
		}
	}
	return true
}

// deletedPod is the pod of an informer's deletion, tombstone or not.
func deletedPod(obj any) (*corev1.Pod, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	return p, ok
}

// podInformer is the one informer of the release's session pods a
// Runtime's watches share (the leader runs WatchDeletions and WatchGone:
// one list and one watch between them, not two of each). It runs while a
// watch does: the first watch starts it, the last one to end stops it, and
// a watch after that starts a new one. Its lifetime is the watches', not
// any one caller's context.
type podInformer struct {
	mu    sync.Mutex
	inf   cache.SharedIndexInformer
	stop  context.CancelFunc
	done  chan struct{}
	users int
}

// watchPods runs h on the Runtime's informer of the release's session pods
// until ctx ends: h is told of the pods the informer holds when it is
// added (the informer replays its cache to a late handler), then of every
// change. It fails only if it had to start the informer and the first
// list failed. Each handler runs on a goroutine of its own (the
// informer's listener), so one watch's slow handler does not hold up
// another's.
func (r *Runtime) watchPods(ctx context.Context, h cache.ResourceEventHandler) error {
	inf, release, err := r.pods.acquire(ctx, r)
	if err != nil {
		return err
	}
	defer release()
	g := &closingHandler{h: h}
	reg, err := inf.AddEventHandler(g)
	if err != nil {
		return err
	}
	<-ctx.Done()
	g.close()
	return inf.RemoveEventHandler(reg)
}

// closingHandler passes an informer's news to h until it is closed, and
// none after: once close returns, no call of h runs or will (the
// informer's listener may deliver one more before its removal).
type closingHandler struct {
	mu     sync.RWMutex
	closed bool
	h      cache.ResourceEventHandler
}

func (c *closingHandler) OnAdd(obj any, initial bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.closed {
		c.h.OnAdd(obj, initial)
	}
}

func (c *closingHandler) OnUpdate(old, obj any) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.closed {
		c.h.OnUpdate(old, obj)
	}
}

func (c *closingHandler) OnDelete(obj any) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.closed {
		c.h.OnDelete(obj)
	}
}

func (c *closingHandler) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// acquire returns the running informer, starting it if no watch holds it,
// and the release that stops it once the last watch lets go (waiting for
// it to end, so no handler runs after its watch returned).
func (pi *podInformer) acquire(ctx context.Context, r *Runtime) (cache.SharedIndexInformer, func(), error) {
	pi.mu.Lock()
	defer pi.mu.Unlock()
	if pi.users == 0 {
		inf, err := r.sessionPods(ctx)
		if err != nil {
			return nil, nil, err
		}
		ictx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			inf.RunWithContext(ictx)
		}()
		pi.inf, pi.stop, pi.done = inf, stop, done
	}
	pi.users++
	inf := pi.inf
	return inf, func() {
		pi.mu.Lock()
		pi.users--
		var done chan struct{}
		if pi.users == 0 {
			pi.stop()
			done = pi.done
			pi.inf, pi.stop, pi.done = nil, nil, nil
		}
		pi.mu.Unlock()
		if done != nil {
			<-done
		}
	}, nil
}

// sessionPods is an informer of the release's session pods (a list, then
// a watch; RBAC pods list and watch), not started, whose cache keeps
// their metadata and status, not their specs. It fails if a first list
// does (RBAC, the API server unreachable).
func (r *Runtime) sessionPods(ctx context.Context) (cache.SharedIndexInformer, error) {
	sel := labels.Set{sandbox.LabelManaged: "true", LabelRelease: LabelValue(r.cfg.Release)}.AsSelector().String()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := r.cs.CoreV1().Pods(r.cfg.Namespace).List(lctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
	cancel()
	if err != nil {
		return nil, r.convert(err, "pods", "list pods")
	}
	f := informers.NewSharedInformerFactoryWithOptions(r.cs, 0, informers.WithNamespace(r.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	inf := f.Core().V1().Pods().Informer()
	// The cache keeps what the watches look at, not whole pods: a new
	// object, never a write to the one given, which may be shared (a fake
	// clientset's watch hands out its tracker's own).
	_ = inf.SetTransform(func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		kept := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta,
			Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, ContainerStatuses: p.Status.ContainerStatuses}}
		kept.ManagedFields = nil
		return kept, nil
	})
	return inf, nil
}

// doomedSandbox is the sandbox of p, a pod being deleted, with its token
// (its Secret lives until the pod is gone); ok false for a pod that is no
// session's (an unclaimed pooled pod) or whose token is gone.
func (r *Runtime) doomedSandbox(ctx context.Context, p *corev1.Pod) (sandbox.Sandbox, bool) {
	session := p.Annotations[AnnotationSession]
	pooled := ""
	if sandbox.IsPooled(session) {
		claimed, ok := p.Annotations[AnnotationClaimedBy]
		if !ok || claimed == "" {
			return sandbox.Sandbox{}, false
		}
		session, pooled = claimed, session
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	token, err := r.token(tctx, p)
	cancel()
	if err != nil || token == "" {
		return sandbox.Sandbox{}, false
	}
	sb := describe(p, token, r.cfg.AgentPort)
	sb.Session, sb.PoolName = session, pooled
	sb.State = sandbox.StateRunning // until the grace ends
	return sb, true
}
