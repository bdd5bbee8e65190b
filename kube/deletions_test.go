package kube

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellbox/shellbox/sandbox"
)

// TestRemoveMarksItsOwn: Remove marks the pod as shellbox's own deletion
// before it deletes it, with a grace of at most RemoveGraceSeconds, and
// asks its agent to end; a pod someone else is deleting is only waited
// for: no mark, no shorter grace, no end of its agent, its Secret kept.
func TestRemoveMarksItsOwn(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	r := c.runtime(t, func(cfg *Config) { cfg.SaveOnDelete = true })
	if r.cfg.GracePeriodSeconds != DefaultSaveGraceSeconds {
		t.Fatalf("grace with SaveOnDelete: %d, want %d", r.cfg.GracePeriodSeconds, DefaultSaveGraceSeconds)
	}
	sb, err := r.Create(ctx, testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.pod(t, sb.ID)
	if got := p.Spec.Containers[0].Args; !contains(got, "--serve-through-grace") || *p.Spec.TerminationGracePeriodSeconds != DefaultSaveGraceSeconds {
		t.Errorf("pod args %q, grace %d: want --serve-through-grace and %d s", got, *p.Spec.TerminationGracePeriodSeconds, DefaultSaveGraceSeconds)
	}
	var marked bool
	var grace *int64
	c.cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), AnnotationRemoving) {
			marked = true
		}
		return false, nil, nil
	})
	c.cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		grace = a.(k8stesting.DeleteAction).GetDeleteOptions().GracePeriodSeconds
		if !marked {
			t.Error("deleted before it was marked")
		}
		return false, nil, nil
	})
	if err := r.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if grace == nil || *grace != RemoveGraceSeconds || c.exits.Load() != 1 {
		t.Errorf("own deletion: grace %v, agent asked to end %d times; want %d s and once", grace, c.exits.Load(), RemoveGraceSeconds)
	}

	// A pod someone else deletes: Remove waits for it, and changes nothing.
	sb, err = r.Create(ctx, testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	p, _ = c.pod(t, sb.ID)
	now := metav1.Now()
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, ptr(int64(60))
	if _, err := c.cs.CoreV1().Pods("sessions").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	marked, grace = false, nil
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := r.Remove(rctx, sb.ID); err == nil {
		t.Error("Remove of a pod being deleted by someone else returned before it was gone")
	}
	if marked || grace != nil || c.exits.Load() != 1 {
		t.Errorf("someone else's deletion: marked %v, deleted with grace %v, agent asked to end %d times; want none of it", marked, grace, c.exits.Load()-1)
	}
	if _, err := c.secret(t, sb.ID); err != nil {
		t.Errorf("its Secret (the token the server saves the workspace with): %v", err)
	}
}

// TestWatchDeletions: the watch tells of a session pod someone else
// deletes (with its token, until the end of its grace), once, pods being
// deleted at its start included; not of shellbox's own deletions, of
// other owners' pods, nor of unclaimed pooled pods; a claimed pooled pod
// is its session's.
func TestWatchDeletions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCluster(t)
	r := c.runtime(t, func(cfg *Config) { cfg.SaveOnDelete = true })
	mk := func(session, owner string) *corev1.Pod {
		t.Helper()
		spec, err := sandbox.NewSpec("acme", session, sandbox.WithImage("img"))
		if err != nil {
			t.Fatal(err)
		}
		spec.Owner = owner
		sb, err := r.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := c.pod(t, sb.ID)
		return p
	}
	doom := func(p *corev1.Pod, annotations map[string]string) time.Time {
		t.Helper()
		p, _ = c.pod(t, p.Name)
		until := metav1.NewTime(time.Now().Add(time.Minute).Truncate(time.Second))
		p.DeletionTimestamp = &until
		for k, v := range annotations {
			p.Annotations[k] = v
		}
		if _, err := c.cs.CoreV1().Pods("sessions").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return until.Time
	}
	early := mk("early", "o")
	earlyUntil := doom(early, nil)
	type told struct {
		sb    sandbox.Sandbox
		until time.Time
	}
	got := make(chan told, 10)
	errc := make(chan error, 1)
	go func() {
		errc <- r.WatchDeletions(ctx, "o", func(sb sandbox.Sandbox, until time.Time) { got <- told{sb, until} })
	}()
	next := func(what string) told {
		t.Helper()
		select {
		case tl := <-got:
			return tl
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not told", what)
		}
		return told{}
	}
	if tl := next("a pod being deleted at the start"); tl.sb.Session != "early" || !tl.until.Equal(earlyUntil) || tl.sb.Agent.Token == "" {
		t.Errorf("told %+v", tl)
	}
	own := mk("own", "o")
	other := mk("theirs", "someone-else")
	pooled := mk(sandbox.PoolPrefix+"x", "o")
	claimed := mk(sandbox.PoolPrefix+"y", "o")
	gone := mk("gone", "o")
	doom(own, map[string]string{AnnotationRemoving: "now"})
	doom(other, nil)
	doom(pooled, nil)
	until := doom(claimed, map[string]string{AnnotationClaimedBy: "claimer"})
	if tl := next("a claimed pooled pod"); tl.sb.Session != "claimer" || tl.sb.PoolName != sandbox.PoolPrefix+"y" || !tl.until.Equal(until) {
		t.Errorf("told %+v", tl)
	}
	doom(gone, nil)
	if tl := next("a session pod"); tl.sb.Session != "gone" || tl.sb.ID != gone.Name || tl.sb.State != sandbox.StateRunning {
		t.Errorf("told %+v", tl)
	}
	doom(gone, map[string]string{"touched": "again"}) // an update of the same pod: told once
	select {
	case tl := <-got:
		t.Errorf("told of %s/%s too", tl.sb.Session, tl.sb.ID)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("WatchDeletions: %v", err)
	}
}

// TestWatchGone: every replica is told of each session pod of its owner
// that goes, whoever deletes it, once: when its agent is gone with it
// (being deleted, its sandbox container no longer runs), pods in that
// state at the start included, or when the pod is gone, whichever comes
// first; not while its agent serves its grace (the leader snapshots
// through it); a claimed pooled pod as its session's; not of other owners'
// pods nor of unclaimed pooled ones. The sandbox told is the pod as the
// Manager knows it (ID, Created), read with no token.
func TestWatchGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCluster(t)
	r := c.runtime(t, func(cfg *Config) { cfg.SaveOnDelete = true })
	var reads atomic.Int32
	c.cs.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		reads.Add(1)
		return false, nil, nil
	})
	mk := func(session, owner string) sandbox.Sandbox {
		t.Helper()
		spec, err := sandbox.NewSpec("acme", session, sandbox.WithImage("img"))
		if err != nil {
			t.Fatal(err)
		}
		spec.Owner = owner
		sb, err := r.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	update := func(sb sandbox.Sandbox, change func(p *corev1.Pod)) {
		t.Helper()
		p, err := c.pod(t, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		change(p)
		if _, err := c.cs.CoreV1().Pods("sessions").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// doom deletes the pod with a grace, as kubectl delete does: its
	// agent serves on.
	doom := func(sb sandbox.Sandbox, annotations map[string]string) {
		t.Helper()
		update(sb, func(p *corev1.Pod) {
			now := metav1.Now()
			p.DeletionTimestamp = &now
			for k, v := range annotations {
				p.Annotations[k] = v
			}
		})
	}
	// end ends the pod's agent (the leader's snapshot is stored, or the
	// grace ran out): its sandbox container terminated.
	end := func(sb sandbox.Sandbox) {
		t.Helper()
		update(sb, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].Ready = false
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
		})
	}
	early := mk("early", "o")
	doom(early, nil)
	end(early)
	serving := mk("serving", "o")
	doom(serving, nil)
	reads.Store(0)
	got := make(chan sandbox.Sandbox, 10)
	errc := make(chan error, 1)
	go func() { errc <- r.WatchGone(ctx, "o", func(sb sandbox.Sandbox) { got <- sb }) }()
	next := func(what string, want sandbox.Sandbox, pooled string) {
		t.Helper()
		select {
		case sb := <-got:
			if sb.Tenant != "acme" || sb.Session != want.Session || sb.ID != want.ID || !sb.Created.Equal(want.Created) || sb.PoolName != pooled {
				t.Errorf("%s: told of %s/%s %s (created %s, pool %q), want %s/%s %s (created %s, pool %q)", what,
					sb.Tenant, sb.Session, sb.ID, sb.Created, sb.PoolName, want.Tenant, want.Session, want.ID, want.Created, pooled)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not told", what)
		}
	}
	none := func(what string) {
		t.Helper()
		select {
		case sb := <-got:
			t.Errorf("%s: told of %s/%s %s", what, sb.Tenant, sb.Session, sb.ID)
		case <-time.After(200 * time.Millisecond):
		}
	}
	next("a pod whose agent was gone at the start", early, "")
	none("a pod whose agent serves its grace")
	end(serving)
	next("the same pod once its agent ended", serving, "")
	own := mk("own", "o")
	other := mk("theirs", "someone-else")
	pooled := mk(sandbox.PoolPrefix+"x", "o")
	claimed := mk(sandbox.PoolPrefix+"y", "o")
	vanished := mk("vanished", "o")
	doom(own, map[string]string{AnnotationRemoving: "now"})
	end(own)
	next("shellbox's own deletion (another replica's suspend)", own, "")
	for _, sb := range []sandbox.Sandbox{other, pooled} {
		doom(sb, nil)
		end(sb)
	}
	doom(claimed, map[string]string{AnnotationClaimedBy: "claimer"})
	end(claimed)
	claimed.Session = "claimer"
	next("a claimed pooled pod", claimed, sandbox.PoolPrefix+"y")
	// Gone with its agent never seen gone (a deletion without grace).
	if err := c.cs.CoreV1().Pods("sessions").Delete(ctx, vanished.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next("a pod gone at once", vanished, "")
	// Gone after it was told: not again.
	if err := c.cs.CoreV1().Pods("sessions").Delete(ctx, own.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	none("a pod told already, gone")
	if n := reads.Load(); n != 0 {
		t.Errorf("%d reads of Secrets: the watch needs no token", n)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("WatchGone: %v", err)
	}
}

// TestWatchDeletionsForbidden: without RBAC to list pods the watch fails
// at once, saying so.
func TestWatchDeletionsForbidden(t *testing.T) {
	c := newCluster(t)
	c.cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", nil)
	})
	err := c.runtime(t, nil).WatchDeletions(context.Background(), "", func(sandbox.Sandbox, time.Time) {})
	if err == nil || !strings.Contains(err.Error(), "watching session pods' deletions") {
		t.Errorf("WatchDeletions: %v", err)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestWatchesShareOneInformer: the leader's two watches (WatchDeletions
// and WatchGone) share one informer of the session pods: one watch of
// pods between them, each told as if alone; after both ended the informer
// is stopped, and a watch started later runs a new one.
func TestWatchesShareOneInformer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCluster(t)
	r := c.runtime(t, func(cfg *Config) { cfg.SaveOnDelete = true })
	var watches atomic.Int32
	c.cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		watches.Add(1)
		return false, nil, nil
	})
	mk := func(session string) sandbox.Sandbox {
		t.Helper()
		spec, err := sandbox.NewSpec("acme", session, sandbox.WithImage("img"))
		if err != nil {
			t.Fatal(err)
		}
		spec.Owner = "o"
		sb, err := r.Create(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	update := func(sb sandbox.Sandbox, change func(p *corev1.Pod)) {
		t.Helper()
		p, err := c.pod(t, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		change(p)
		if _, err := c.cs.CoreV1().Pods("sessions").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	doom := func(sb sandbox.Sandbox) {
		update(sb, func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now })
	}
	end := func(sb sandbox.Sandbox) {
		update(sb, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
		})
	}
	wait := func(what string, ch <-chan string, want string) {
		t.Helper()
		select {
		case got := <-ch:
			if got != want {
				t.Errorf("%s: told of %s, want %s", what, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not told of %s", what, want)
		}
	}
	doomed := make(chan string, 10)
	gone := make(chan string, 10)
	errc := make(chan error, 2)
	go func() {
		errc <- r.WatchDeletions(ctx, "", func(sb sandbox.Sandbox, _ time.Time) { doomed <- sb.Session })
	}()
	go func() { errc <- r.WatchGone(ctx, "", func(sb sandbox.Sandbox) { gone <- sb.Session }) }()
	a := mk("a")
	doom(a)
	wait("WatchDeletions", doomed, "a")
	end(a)
	wait("WatchGone", gone, "a")
	if n := watches.Load(); n != 1 {
		t.Errorf("%d watches of pods for the two, want 1", n)
	}
	cancel()
	for range 2 {
		if err := <-errc; err != nil {
			t.Errorf("watch: %v", err)
		}
	}
	if r.pods.users != 0 || r.pods.inf != nil {
		t.Errorf("the informer outlived its watches: %d users", r.pods.users)
	}

	if err := c.cs.CoreV1().Pods("sessions").Delete(context.Background(), a.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { errc <- r.WatchGone(ctx2, "", func(sb sandbox.Sandbox) { gone <- sb.Session }) }()
	b := mk("b")
	doom(b)
	end(b)
	wait("a watch after the informer stopped", gone, "b")
	for deadline := time.Now().Add(5 * time.Second); watches.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := watches.Load(); n != 2 {
		t.Errorf("%d watches of pods, want 2 (a new informer)", n)
	}
	cancel2()
	if err := <-errc; err != nil {
		t.Errorf("WatchGone: %v", err)
	}
}
