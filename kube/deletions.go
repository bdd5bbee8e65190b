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
// It watches the release's session pods (an informer: a list, then a
// watch; RBAC pods list and watch) until ctx ends, and returns an error
// only if the first list fails.
func (r *Runtime) WatchDeletions(ctx context.Context, owner string, doomed func(sb sandbox.Sandbox, until time.Time)) error {
	sel := labels.Set{sandbox.LabelManaged: "true", LabelRelease: LabelValue(r.cfg.Release)}.AsSelector().String()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := r.cs.CoreV1().Pods(r.cfg.Namespace).List(lctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
	cancel()
	if err != nil {
		return fmt.Errorf("watching session pods' deletions: %w", r.convert(err, "pods", "list pods"))
	}
	f := informers.NewSharedInformerFactoryWithOptions(r.cs, 0, informers.WithNamespace(r.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	inf := f.Core().V1().Pods().Informer()
	// The cache keeps what the watch looks at, not whole pods.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
			p.Spec = corev1.PodSpec{}
			p.Status = corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, ContainerStatuses: p.Status.ContainerStatuses}
		}
		return obj, nil
	})
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
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    look,
		UpdateFunc: func(_, obj any) { look(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				mu.Lock()
				delete(told, p.UID)
				mu.Unlock()
			}
		},
	}); err != nil {
		return fmt.Errorf("watching session pods' deletions: %w", err)
	}
	inf.RunWithContext(ctx)
	wg.Wait()
	return nil
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
