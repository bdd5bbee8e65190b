package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shellbox/shellbox/sandbox"
)

// The claim of a pooled pod, kept on the pod: the annotation holds the
// claiming session exactly (what every method believes), the label its
// sanitised form (labelValue), so Lookup can find the pod by a selector.
const (
	AnnotationClaimedBy = "org.shellbox.claimed-by"
	LabelClaimedBy      = "org.shellbox.claimed-by"
)

// maxClaimAttempts bounds Claim's re-reads after a conflicting patch: each
// conflict is another writer's progress on the pod, so a claim that keeps
// losing is very unlikely and then fails rather than spins.
const maxClaimAttempts = 10

// Claims is the sandbox.Claims of a release, kept on the pooled pods
// themselves: a claim is an annotation and a label on the claimed pod, so
// it lives in the cluster, is seen by every replica of the release and by
// a server that replaced another, and goes with the pod. A claim is made by
// a patch conditioned on the resourceVersion read, so of concurrent claims
// of one pod, in any processes, exactly one is written.
//
// The pod's own annotations are unchanged: it is still known by its pooled
// name (describe's Sandbox.Session), which the Manager maps to the claiming
// session through these claims (Sandbox.PoolName).
type Claims struct {
	r *Runtime
}

var _ sandbox.Claims = (*Claims)(nil)

// Claims returns the release's claims on the runtime's clientset (RBAC:
// pods get, list, patch).
func (r *Runtime) Claims() *Claims { return &Claims{r: r} }

// Claim implements sandbox.Claims: the claim annotation and label are set
// on the pod PodName(tenant, pooled) by a merge patch with the
// resourceVersion read; a conflict re-reads the pod: claimed by another
// session is ErrAlreadyExists, by this one success. A pod that is gone or
// being deleted is ErrNotFound, one that is not the pooled sandbox of
// tenant ErrConflict.
func (c *Claims) Claim(ctx context.Context, tenant, pooled, session string) error {
	if err := sandbox.CheckClaim(tenant, pooled, session); err != nil {
		return err
	}
	pods := c.r.cs.CoreV1().Pods(c.r.cfg.Namespace)
	name := PodName(tenant, pooled)
	for attempt := 1; ; attempt++ {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: kube: claim: pooled sandbox %s/%s (pod %s/%s) is gone", sandbox.ErrNotFound, tenant, pooled, c.r.cfg.Namespace, name)
		}
		if err != nil {
			return c.r.convert(err, "pods", "claim: get pod %s", name)
		}
		if err := c.pooled(p, tenant, pooled); err != nil {
			return err
		}
		if p.DeletionTimestamp != nil {
			return fmt.Errorf("%w: kube: claim: pooled sandbox %s/%s (pod %s/%s) is being deleted", sandbox.ErrNotFound, tenant, pooled, c.r.cfg.Namespace, name)
		}
		held, claimed := p.Annotations[AnnotationClaimedBy]
		if claimed && held != session {
			return fmt.Errorf("%w: pooled sandbox %s/%s is claimed already", sandbox.ErrAlreadyExists, tenant, pooled)
		}
		if claimed && p.Labels[LabelClaimedBy] == LabelValue(session) {
			return nil // this session's already
		}
		// Unclaimed, or this session's with its label lost: (re)write both,
		// by a merge patch carrying the resourceVersion read, which the API
		// server takes as a precondition (Conflict if the pod changed).
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": p.ResourceVersion,
			"annotations":     map[string]string{AnnotationClaimedBy: session},
			"labels":          map[string]string{LabelClaimedBy: LabelValue(session)},
		}})
		if err != nil {
			return fmt.Errorf("kube: claim pod %s: %w", name, err)
		}
		_, err = pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err) && attempt < maxClaimAttempts:
			// Someone wrote the pod since we read it (a claim, a use):
			// read it again and decide on what it says now.
			continue
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: kube: claim: pooled sandbox %s/%s (pod %s/%s) is gone", sandbox.ErrNotFound, tenant, pooled, c.r.cfg.Namespace, name)
		default:
			return c.r.convert(err, "pods", "claim: patch pod %s", name)
		}
	}
}

// Lookup implements sandbox.Claims: the release's pods labelled as claimed
// by session's sanitised form, believed only where the annotation names
// session exactly (sanitised forms of different sessions can be alike, and
// a label is no proof). If a session holds more than one (two replicas
// each claimed a pod for it at once), the pod whose name sorts first.
func (c *Claims) Lookup(ctx context.Context, tenant, session string) (string, error) {
	if err := sandbox.CheckID("tenant", tenant); err != nil {
		return "", err
	}
	if err := sandbox.CheckID("session", session); err != nil || sandbox.IsPooled(session) {
		return "", fmt.Errorf("%w: no claim of session %s/%s", sandbox.ErrNotFound, tenant, session)
	}
	sel := c.selector(labels.Set{
		sandbox.LabelTenant: LabelValue(tenant),
		LabelClaimedBy:      LabelValue(session),
	})
	cs, err := c.list(ctx, sel)
	if err != nil {
		return "", err
	}
	var found []string
	for _, cl := range cs {
		if cl.Tenant == tenant && cl.Session == session {
			found = append(found, cl.Pooled)
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("%w: no claim of session %s/%s", sandbox.ErrNotFound, tenant, session)
	}
	sort.Strings(found)
	return found[0], nil
}

// List implements sandbox.Claims: every claim on the release's pods.
func (c *Claims) List(ctx context.Context) ([]sandbox.Claim, error) {
	return c.list(ctx, c.selector(nil))
}

// Release implements sandbox.Claims. The claim lives and dies with its
// pod, so once the sandbox is gone there is nothing left to forget, and
// Release makes no call. A claim on a pod that still exists is kept: a
// claimed pod holds a session's workspace and must never look unclaimed,
// which would hand it to another session (Adopt releases claims whose
// sandbox its list missed, and a pod created and claimed by another
// replica after that list is such a claim).
func (c *Claims) Release(_ context.Context, tenant, pooled string) error {
	if err := sandbox.CheckID("tenant", tenant); err != nil {
		return err
	}
	if err := sandbox.CheckID("session", pooled); err != nil || !sandbox.IsPooled(pooled) {
		return fmt.Errorf("%w: %q is not a pooled sandbox's name", sandbox.ErrInvalid, pooled)
	}
	return nil
}

// selector selects the release's shellbox pods that carry a claim label,
// and the labels of extra.
func (c *Claims) selector(extra labels.Set) labels.Selector {
	set := labels.Set{sandbox.LabelManaged: "true", LabelRelease: LabelValue(c.r.cfg.Release)}
	for k, v := range extra {
		set[k] = v
	}
	sel := labels.SelectorFromSet(set)
	if extra[LabelClaimedBy] == "" {
		req, err := labels.NewRequirement(LabelClaimedBy, selection.Exists, nil)
		if err == nil {
			sel = sel.Add(*req)
		}
	}
	return sel
}

// list returns the claims on the pods sel selects, read from their
// annotations; pods whose annotations do not make a claim of a pooled
// sandbox are skipped.
func (c *Claims) list(ctx context.Context, sel labels.Selector) ([]sandbox.Claim, error) {
	pl, err := c.r.cs.CoreV1().Pods(c.r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, c.r.convert(err, "pods", "claims: list pods")
	}
	var out []sandbox.Claim
	for i := range pl.Items {
		p := &pl.Items[i]
		// The selector again, on the exact values: fakes ignore it.
		if !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		a := p.Annotations
		cl := sandbox.Claim{Tenant: a[AnnotationTenant], Pooled: a[AnnotationSession], Session: a[AnnotationClaimedBy]}
		if sandbox.CheckClaim(cl.Tenant, cl.Pooled, cl.Session) != nil || p.Name != PodName(cl.Tenant, cl.Pooled) {
			continue
		}
		out = append(out, cl)
	}
	return out, nil
}

// pooled returns ErrConflict unless p is the release's pod of the pooled
// sandbox tenant/pooled.
func (c *Claims) pooled(p *corev1.Pod, tenant, pooled string) error {
	if err := c.r.ours(p, tenant, pooled); err != nil {
		return err
	}
	if p.Labels[LabelRelease] != LabelValue(c.r.cfg.Release) {
		return fmt.Errorf("%w: kube: pod %s/%s is of release %q, not %q", sandbox.ErrConflict, p.Namespace, p.Name, p.Labels[LabelRelease], c.r.cfg.Release)
	}
	return nil
}
