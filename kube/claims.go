package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

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

// The session's claim lock: a Secret named ClaimLockName(tenant, session),
// labelled LabelClaimLock, whose annotation AnnotationClaimPooled names the
// pooled sandbox the session holds or is claiming (and AnnotationTenant,
// AnnotationSession the session exactly). It holds no data.
const (
	LabelClaimLock        = "org.shellbox.claim-lock"
	AnnotationClaimPooled = "org.shellbox.claim-pooled"
	// AnnotationColdUntil, on a cold start's lock, is when its creator's
	// time runs out (RFC 3339): coldLive believes the lock without a pod
	// until then and coldMargin after.
	AnnotationColdUntil = "org.shellbox.cold-until"
)

// coldMargin is how long after its creator's deadline a cold start's lock
// without a pod is still believed: time for the creator's settling.
const coldMargin = 10 * time.Second

// ClaimLockName is the name of the claim lock Secret of tenant's session:
// PodName's, with a suffix no PodName has (PodName ends in a hash), so
// neither a session pod's token Secret nor a pod ever takes it.
func ClaimLockName(tenant, session string) string { return PodName(tenant, session) + "-claim" }

// maxClaimAttempts bounds Claim's and Retire's re-reads after a
// conflicting write: each conflict is another writer's progress on the pod
// or the lock, so a claim that keeps losing is very unlikely and then
// fails rather than spins.
const maxClaimAttempts = 10

// Claims is the sandbox.Claims of a release, kept on the pooled pods
// themselves: a claim is an annotation and a label on the claimed pod, so
// it lives in the cluster, is seen by every replica of the release and by
// a server that replaced another, and goes with the pod. A claim is made by
// a patch conditioned on the resourceVersion read, so of concurrent claims
// of one pod, in any processes, exactly one is written.
//
// A session's claims go through its claim lock (ClaimLockName), a Secret
// created before the pod is patched and owned by the pod (the garbage
// collector deletes it with the pod): creating it is atomic, so of
// replicas serving a new session's first calls at once, each with a
// different pooled pod, one lock names the pod and every one of them
// claims that pod. Retire deletes an unclaimed pooled pod with the
// resourceVersion it read as a precondition, so a claim that lands in
// between wins.
//
// The pod's own annotations are unchanged: it is still known by its pooled
// name (describe's Sandbox.Session), which the Manager maps to the claiming
// session through these claims (Sandbox.PoolName).
type Claims struct {
	r *Runtime
}

var (
	_ sandbox.Claims     = (*Claims)(nil)
	_ sandbox.ColdStarts = (*Claims)(nil)
)

// Claims returns the release's claims on the runtime's clientset (RBAC:
// pods get, list, patch, delete; secrets get, create, delete).
func (r *Runtime) Claims() *Claims { return &Claims{r: r} }

// Claim implements sandbox.Claims. It reads the pod PodName(tenant,
// pooled), then creates the session's claim lock (owned by the pod), or
// reads the one there is, and claims the pod the lock names: pooled, or the pod
// another replica is claiming for the session at the same moment, which it
// returns. A lock whose pod is gone, being deleted or another session's
// is stale (the session never had that pod: a claim is never undone while
// its pod exists): it is deleted, conditioned on its uid, and the claim
// starts again. The pod's claim annotation and label are set by a merge
// patch with the resourceVersion read; a conflict re-reads the pod:
// claimed by another session is ErrAlreadyExists, by this one success. A
// pod that is gone or being deleted is ErrNotFound, one that is not the
// pooled sandbox of tenant ErrConflict. A lock this call created for a pod
// it then fails to claim is deleted.
func (c *Claims) Claim(ctx context.Context, tenant, pooled, session string) (string, error) {
	if err := sandbox.CheckClaim(tenant, pooled, session); err != nil {
		return "", err
	}
	for attempt := 1; attempt <= maxClaimAttempts; attempt++ {
		p, err := c.claimable(ctx, tenant, pooled, session)
		if err != nil {
			return "", err
		}
		held, lock, created, err := c.lock(ctx, tenant, session, pooled, p)
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			return "", err
		}
		if held == session {
			return session, nil // started cold (Cold): that pod is the session's
		}
		if held != pooled {
			p = nil // not the pod read
		}
		err = c.claimPod(ctx, tenant, held, session, p)
		switch {
		case err == nil:
			return held, nil
		case held == pooled && created:
			// Ours, for a pod we could not claim: nobody holds it.
			c.unlock(ctx, lock)
			return "", err
		case held != pooled && (errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrAlreadyExists)):
			// Stale: the pod another claim named went, or went to another
			// session, so this session never had it.
			c.unlock(ctx, lock)
			continue
		default:
			return "", err
		}
	}
	return "", fmt.Errorf("%w: kube: claim: pooled sandbox %s/%s for session %s: gave up after %d conflicting writes", sandbox.ErrUnavailable, tenant, pooled, session, maxClaimAttempts)
}

// errRetry says that the lock changed under lock's feet: read again.
var errRetry = errors.New("kube: claim lock changed")

// claimable reads the pod of tenant's pooled sandbox and returns it if
// session may claim it (unclaimed or session's).
func (c *Claims) claimable(ctx context.Context, tenant, pooled, session string) (*corev1.Pod, error) {
	name := PodName(tenant, pooled)
	p, err := c.r.cs.CoreV1().Pods(c.r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: kube: claim: pooled sandbox %s/%s (pod %s/%s) is gone", sandbox.ErrNotFound, tenant, pooled, c.r.cfg.Namespace, name)
	}
	if err != nil {
		return nil, c.r.convert(err, "pods", "claim: get pod %s", name)
	}
	if err := c.pooled(p, tenant, pooled); err != nil {
		return nil, err
	}
	if p.DeletionTimestamp != nil {
		return nil, fmt.Errorf("%w: kube: claim: pooled sandbox %s/%s (pod %s/%s) is being deleted", sandbox.ErrNotFound, tenant, pooled, c.r.cfg.Namespace, name)
	}
	if held, claimed := p.Annotations[AnnotationClaimedBy]; claimed && held != session {
		return nil, fmt.Errorf("%w: pooled sandbox %s/%s is claimed already", sandbox.ErrAlreadyExists, tenant, pooled)
	}
	return p, nil
}

// lock returns the pooled sandbox session's claim lock names (or session
// itself: a cold start, see Cold), creating the lock for pod p (of pooled)
// if there is none, the lock itself, and whether this call created it.
// It creates first and reads only if there is a lock already: a new
// session, the usual claim, has none, and each request is a round trip.
// errRetry: the one read was stale, or went between the create and the
// read.
func (c *Claims) lock(ctx context.Context, tenant, session, pooled string, p *corev1.Pod) (string, *corev1.Secret, bool, error) {
	// Owned by the pod it names: it goes with the pod.
	made, err := c.createLock(ctx, tenant, session, pooled, &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}, time.Time{})
	if err == nil {
		return pooled, made, true, nil
	}
	if !errors.Is(err, errRetry) {
		return "", nil, false, err
	}
	held, s, err := c.readLock(ctx, tenant, session)
	if err == nil && s == nil {
		err = errRetry // gone since the create found it
	}
	return held, s, false, err
}

// readLock reads session's claim lock: the name it holds and the lock, or
// no lock (nil) if there is none. A stale cold start's lock (coldLive) or
// a malformed one is deleted: errRetry.
func (c *Claims) readLock(ctx context.Context, tenant, session string) (string, *corev1.Secret, error) {
	name := ClaimLockName(tenant, session)
	s, err := c.r.cs.CoreV1().Secrets(c.r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, c.r.convert(err, "secrets", "claim: get lock %s", name)
	}
	a := s.Annotations
	if s.Labels[LabelClaimLock] != "true" || a[AnnotationTenant] != tenant || a[AnnotationSession] != session {
		return "", nil, fmt.Errorf("%w: kube: secret %s/%s is not the claim lock of session %s/%s", sandbox.ErrConflict, c.r.cfg.Namespace, name, tenant, session)
	}
	held := a[AnnotationClaimPooled]
	if held == session {
		live, err := c.coldLive(ctx, s, tenant, session)
		if err != nil {
			return "", nil, err
		}
		if !live {
			c.unlock(ctx, s)
			return "", nil, errRetry
		}
		return held, s, nil
	}
	if sandbox.CheckClaim(tenant, held, session) != nil {
		c.unlock(ctx, s) // malformed: never a lock Claim wrote
		return "", nil, errRetry
	}
	return held, s, nil
}

// createLock creates session's claim lock holding held, owned by owner if
// it is not nil, a cold start's until its creator's deadline until if it
// is not zero. errRetry: there is one already.
func (c *Claims) createLock(ctx context.Context, tenant, session, held string, owner *metav1.OwnerReference, until time.Time) (*corev1.Secret, error) {
	name := ClaimLockName(tenant, session)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: c.r.cfg.Namespace,
			Labels: map[string]string{
				sandbox.LabelManaged: "true",
				LabelRelease:         LabelValue(c.r.cfg.Release),
				sandbox.LabelTenant:  LabelValue(tenant),
				LabelClaimLock:       "true",
			},
			Annotations: map[string]string{AnnotationTenant: tenant, AnnotationSession: session, AnnotationClaimPooled: held},
		},
		Type: corev1.SecretTypeOpaque,
	}
	if owner != nil {
		s.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if !until.IsZero() {
		s.Annotations[AnnotationColdUntil] = until.UTC().Format(time.RFC3339Nano)
	}
	made, err := c.r.cs.CoreV1().Secrets(c.r.cfg.Namespace).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, errRetry
	}
	if err != nil {
		return nil, c.r.convert(err, "secrets", "claim: create lock %s", name)
	}
	return made, nil
}

// Cold implements sandbox.ColdStarts with the session's claim lock: it
// creates the lock holding the session's own name (no pooled name is
// one), with no owner and due at ctx's deadline (the creation's own), so
// a Claim of any replica finds the session started cold, and another Cold
// finds it taken. done settles it: owned by the session's pod once that
// exists (the garbage collector deletes it with the pod), deleted
// otherwise; if it was taken over meanwhile (judged dead: another
// replica's clock ahead by more than coldMargin), see settleCold. A lock
// found holding a pooled sandbox
// is claimed for the session if the claim is not written yet (the claimer
// may have died in between; the claim is idempotent) and that sandbox is
// returned; a stale one is deleted and the reservation tried again.
func (c *Claims) Cold(ctx context.Context, tenant, session string) (string, func() error, error) {
	if err := sandbox.CheckID("tenant", tenant); err != nil {
		return "", nil, err
	}
	if err := sandbox.CheckID("session", session); err != nil || sandbox.IsPooled(session) {
		return "", nil, fmt.Errorf("%w: %q is not a session's name", sandbox.ErrInvalid, session)
	}
	for attempt := 1; attempt <= maxClaimAttempts; attempt++ {
		until := time.Now().Add(c.coldGrace())
		if d, ok := ctx.Deadline(); ok && d.Before(until) {
			until = d
		}
		made, err := c.createLock(ctx, tenant, session, session, nil, until)
		if err == nil {
			return "", func() error { return c.settleCold(ctx, made, tenant, session) }, nil
		}
		if !errors.Is(err, errRetry) {
			return "", nil, err
		}
		held, lock, err := c.readLock(ctx, tenant, session)
		switch {
		case errors.Is(err, errRetry), err == nil && lock == nil:
			continue // stale and deleted, or gone since
		case err != nil:
			return "", nil, err
		case held == session:
			return session, nil, nil
		}
		err = c.claimPod(ctx, tenant, held, session, nil)
		switch {
		case err == nil:
			return held, nil, nil
		case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrAlreadyExists):
			// The pod the lock named went, or went to another session:
			// stale.
			c.unlock(ctx, lock)
		default:
			return "", nil, err
		}
	}
	return "", nil, fmt.Errorf("%w: kube: cold start of session %s/%s: gave up after %d conflicting writes", sandbox.ErrUnavailable, tenant, session, maxClaimAttempts)
}

// coldGrace bounds how long a cold start's lock without its pod is
// believed when its creator's context has no deadline (or the lock has no
// AnnotationColdUntil): Create's wait for the pod (ReadyTimeout) and a
// margin for the API calls around it.
//
// A lock is believed as long as its creator may still be creating, not
// less: a creator that died between the lock and its pod (one request
// apart) blocks the session that long, but a shorter belief would let a
// replica take the session over from a creator that is only slow (API
// requests wait seconds under load), giving it a second sandbox or
// removing one in use.
func (c *Claims) coldGrace() time.Duration { return c.r.cfg.ReadyTimeout + time.Minute }

// coldLive reports whether the cold start's lock s of tenant's session
// still stands: its pod exists, or it has none yet, was never settled
// with a pod (an owner: a settled lock whose pod is gone is the garbage
// collector's, not yet collected), and its creator's time
// (AnnotationColdUntil, and coldMargin) has not run out.
func (c *Claims) coldLive(ctx context.Context, s *corev1.Secret, tenant, session string) (bool, error) {
	p, err := c.sessionPod(ctx, tenant, session)
	if err != nil || p != nil {
		return p != nil, err
	}
	if len(s.OwnerReferences) > 0 {
		return false, nil
	}
	if until, err := time.Parse(time.RFC3339Nano, s.Annotations[AnnotationColdUntil]); err == nil {
		return time.Now().Before(until.Add(coldMargin)), nil
	}
	return time.Since(s.CreationTimestamp.Time) < c.coldGrace(), nil
}

// settleCold ends the cold start whose lock is s, even if ctx ended: the
// session's pod exists, and owns the lock from now on (a merge patch
// carrying the lock's resourceVersion); or it does not (the creation
// failed), and the lock is deleted.
//
// A patch that finds the lock changed or gone means it was judged dead
// (by a replica whose clock is ahead by more than coldMargin) and taken
// over. The lock there is then the judge: one holding a pooled sandbox
// whose claim for the session is written (claimPod: written now if its
// claimer died before) is the session's, and settleCold returns
// ErrAlreadyExists (the pod made is not the session's sandbox); one whose
// pooled pod went or went to another session is stale and is deleted;
// one holding the session (another's cold start, whose Create finds this
// pod) or none (made again, owned by this pod) leaves the pod the
// session's. Other failures leave the lock unowned, which coldLive
// believes while the pod exists, and are returned.
func (c *Claims) settleCold(ctx context.Context, s *corev1.Secret, tenant, session string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	p, err := c.sessionPod(ctx, tenant, session)
	if err != nil {
		return err
	}
	if p == nil {
		c.unlock(ctx, s)
		return nil
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": s.ResourceVersion,
		"ownerReferences": []metav1.OwnerReference{owner},
	}})
	if err != nil {
		return fmt.Errorf("kube: settle cold start of %s/%s: %w", tenant, session, err)
	}
	secrets := c.r.cs.CoreV1().Secrets(c.r.cfg.Namespace)
	_, err = secrets.Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return c.r.convert(err, "secrets", "settle cold start: patch lock %s", s.Name)
	}
	for attempt := 1; attempt <= maxClaimAttempts; attempt++ {
		now, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.createLock(ctx, tenant, session, session, &owner, time.Time{})
			if errors.Is(err, errRetry) {
				continue // made meanwhile: read it
			}
			return err
		}
		if err != nil {
			return c.r.convert(err, "secrets", "settle cold start: get lock %s", s.Name)
		}
		held := now.Annotations[AnnotationClaimPooled]
		if held == session || sandbox.CheckClaim(tenant, held, session) != nil {
			return nil // another's cold start, or not a lock Claim wrote
		}
		err = c.claimPod(ctx, tenant, held, session, nil)
		switch {
		case err == nil:
			return fmt.Errorf("%w: kube: cold start of session %s/%s: its lock was judged dead before pod %s existed, and the session claimed pooled sandbox %s meanwhile", sandbox.ErrAlreadyExists, tenant, session, p.Name, held)
		case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrAlreadyExists):
			c.unlock(ctx, now) // stale: the session never had that pod
		default:
			return err
		}
	}
	return fmt.Errorf("%w: kube: settle cold start of %s/%s: gave up after %d conflicting writes", sandbox.ErrUnavailable, tenant, session, maxClaimAttempts)
}

// sessionPod returns the pod of tenant's session (started cold), or nil if
// there is none, or it is being deleted or is not the session's.
func (c *Claims) sessionPod(ctx context.Context, tenant, session string) (*corev1.Pod, error) {
	name := PodName(tenant, session)
	p, err := c.r.cs.CoreV1().Pods(c.r.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, c.r.convert(err, "pods", "claim: get pod %s", name)
	case p.DeletionTimestamp != nil || c.r.ours(p, tenant, session) != nil:
		return nil, nil
	}
	return p, nil
}

// unlock deletes the claim lock s if it is still that one (its uid), even
// if ctx ended; a failure leaves a stale lock, which the next claim of the
// session deletes.
func (c *Claims) unlock(ctx context.Context, s *corev1.Secret) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	uid := s.UID
	_ = c.r.cs.CoreV1().Secrets(c.r.cfg.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}

// claimPod writes session's claim on the pod of tenant's pooled sandbox
// (p, if it was read already, else read): a merge patch with the
// resourceVersion read; a conflict re-reads.
func (c *Claims) claimPod(ctx context.Context, tenant, pooled, session string, p *corev1.Pod) error {
	pods := c.r.cs.CoreV1().Pods(c.r.cfg.Namespace)
	name := PodName(tenant, pooled)
	for attempt := 1; ; attempt++ {
		if p == nil {
			var err error
			if p, err = c.claimable(ctx, tenant, pooled, session); err != nil {
				return err
			}
		}
		if p.Annotations[AnnotationClaimedBy] == session && p.Labels[LabelClaimedBy] == LabelValue(session) {
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
			p = nil
			continue
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: kube: claim: pooled sandbox %s/%s (pod %s/%s) is gone", sandbox.ErrNotFound, tenant, pooled, c.r.cfg.Namespace, name)
		default:
			return c.r.convert(err, "pods", "claim: patch pod %s", name)
		}
	}
}

// Retire implements sandbox.Claims: it deletes the pod of the unclaimed
// pooled sandbox with the uid and resourceVersion it read as
// preconditions, so a claim patched in between (which changes the
// resourceVersion) makes the delete conflict, and the pod read again is
// claimed: ErrAlreadyExists, and the pod stays. A pod being deleted (its
// claims refused since: Claim reads deletionTimestamp, and the deletion
// changed the resourceVersion a claim in flight carries) or gone is
// retired. The Manager's Runtime.Remove after it waits for the pod to go
// and deletes its Secret.
func (c *Claims) Retire(ctx context.Context, tenant, pooled string) error {
	if err := sandbox.CheckID("tenant", tenant); err != nil {
		return err
	}
	if err := sandbox.CheckID("session", pooled); err != nil || !sandbox.IsPooled(pooled) {
		return fmt.Errorf("%w: %q is not a pooled sandbox's name", sandbox.ErrInvalid, pooled)
	}
	pods := c.r.cs.CoreV1().Pods(c.r.cfg.Namespace)
	name := PodName(tenant, pooled)
	for attempt := 1; attempt <= maxClaimAttempts; attempt++ {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return c.r.convert(err, "pods", "retire: get pod %s", name)
		}
		if err := c.pooled(p, tenant, pooled); err != nil {
			return err
		}
		if p.DeletionTimestamp != nil {
			return nil
		}
		if held, ok := p.Annotations[AnnotationClaimedBy]; ok {
			return fmt.Errorf("%w: pooled sandbox %s/%s is claimed by session %s: not retiring it", sandbox.ErrAlreadyExists, tenant, pooled, held)
		}
		uid, rv := p.UID, p.ResourceVersion
		err = pods.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			continue // written since (a claim?): read it again
		default:
			return c.r.convert(err, "pods", "retire: delete pod %s", name)
		}
	}
	return fmt.Errorf("%w: kube: retire: pooled sandbox %s/%s: gave up after %d conflicting writes", sandbox.ErrUnavailable, tenant, pooled, maxClaimAttempts)
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
