package kube

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
)

// election is the replicas of one release competing on one fake API
// server; it records who leads and fails the test if two ever do at once.
type election struct {
	t       *testing.T
	cs      *fake.Clientset
	leading atomic.Int32
	overlap atomic.Bool
	leaders chan string // identities, as each starts leading
}

func newElection(t *testing.T) *election {
	return &election{t: t, cs: fake.NewClientset(), leaders: make(chan string, 16)}
}

// replica is one candidate's Run.
type replica struct {
	id   string
	stop context.CancelFunc
	// ended is closed when Run returned; lost counts the leads whose
	// context was cancelled.
	ended chan struct{}
	lost  atomic.Int32
}

// start runs a candidate with a lease of leaseDuration (renew deadline
// 500ms, retry 100ms).
func (el *election) start(id string, leaseDuration time.Duration) *replica {
	el.t.Helper()
	return el.startOn(el.cs, id, leaseDuration)
}

// startOn is start with the candidate's own view of the API server.
func (el *election) startOn(cs kubernetes.Interface, id string, leaseDuration time.Duration) *replica {
	el.t.Helper()
	e, err := NewElector(cs, ElectorConfig{Namespace: "sessions", Release: "prod", Identity: id,
		LeaseDuration: leaseDuration, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond})
	if err != nil {
		el.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, stop: cancel, ended: make(chan struct{})}
	go func() {
		defer close(r.ended)
		e.Run(ctx, func(ctx context.Context) {
			if el.leading.Add(1) > 1 {
				el.overlap.Store(true)
			}
			el.leaders <- id
			<-ctx.Done()
			el.leading.Add(-1)
			r.lost.Add(1)
		})
	}()
	el.t.Cleanup(func() {
		cancel()
		<-r.ended
	})
	return r
}

// next is the next replica to start leading (within 10s).
func (el *election) next() string {
	el.t.Helper()
	select {
	case id := <-el.leaders:
		return id
	case <-time.After(10 * time.Second):
		el.t.Fatal("no replica leads within 10s")
		return ""
	}
}

func (el *election) holder() string {
	el.t.Helper()
	l, err := el.cs.CoordinationV1().Leases("sessions").Get(context.Background(), "prod-shellbox-leader", metav1.GetOptions{})
	if err != nil {
		el.t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// One of two replicas leads; when its context ends it stops leading, then
// releases the Lease, and the other takes over at its next retry, long
// before the lease duration (30s) would have run out.
func TestElectorHandover(t *testing.T) {
	el := newElection(t)
	rs := map[string]*replica{}
	for _, id := range []string{"a", "b"} {
		rs[id] = el.start(id, 30*time.Second)
	}
	first := el.next()
	if h := el.holder(); h != first {
		t.Fatalf("lease holder %q, leader %q", h, first)
	}
	time.Sleep(300 * time.Millisecond) // three retries of the other
	if el.leading.Load() != 1 {
		t.Fatalf("%d leaders", el.leading.Load())
	}
	start := time.Now()
	rs[first].stop()
	select {
	case <-rs[first].ended:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end")
	}
	if rs[first].lost.Load() != 1 {
		t.Errorf("the first leader's lead context was cancelled %d times, want 1", rs[first].lost.Load())
	}
	second := el.next()
	if second == first {
		t.Fatalf("%s leads again after its Run returned", second)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("handover took %v: the lease was not released", took)
	}
	if h := el.holder(); h != second {
		t.Errorf("lease holder %q, leader %q", h, second)
	}
	rs[second].stop()
	<-rs[second].ended
	if h := el.holder(); h != "" {
		t.Errorf("lease holder %q after the last leader ended: not released", h)
	}
	if el.overlap.Load() {
		t.Error("two replicas led at once")
	}
}

// A leader that cannot renew its Lease (cut off from the API server) stops
// leading after the renew deadline; the other replica takes over once the
// lease duration has passed without a renewal, never while the first
// still leads.
func TestElectorLosesLease(t *testing.T) {
	el := newElection(t)
	var cutOff atomic.Bool
	el.cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if cutOff.Load() && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "a" {
			return true, nil, apierrors.NewServerTimeout(coordinationv1.Resource("leases"), "update", 1)
		}
		return false, nil, nil
	})
	a := el.start("a", 2*time.Second)
	if id := el.next(); id != "a" {
		t.Fatalf("%s leads, want a (alone)", id)
	}
	b := el.start("b", 2*time.Second)
	time.Sleep(300 * time.Millisecond) // b sees a renew
	cutOff.Store(true)
	if id := el.next(); id != "b" {
		t.Fatalf("%s leads, want b", id)
	}
	if a.lost.Load() != 1 {
		t.Errorf("a's lead context was cancelled %d times, want 1", a.lost.Load())
	}
	if el.overlap.Load() {
		t.Error("two replicas led at once")
	}
	select {
	case <-a.ended:
		t.Error("a's Run returned: it must compete again")
	default:
	}
	if h := el.holder(); h != "b" {
		t.Errorf("lease holder %q, want b", h)
	}
	b.stop()
	<-b.ended
}

// A leader whose renewal hangs (as a process stopped past the lease
// duration resumes inside one: SIGSTOP, a frozen cgroup) stops leading at
// the renew deadline after its last renewal, before the other replica
// takes the Lease. client-go's renew loop alone gives up only when the
// hung attempt returns: the two led at once until then (seen on the
// cluster: deploy/helm/e2e TestReplicaFaults/lease-holder-stopped).
func TestElectorRenewalHangs(t *testing.T) {
	el := newElection(t)
	var hang atomic.Bool
	resume := make(chan struct{})
	a := el.startOn(hangingLeases{Interface: el.cs, hang: func() error {
		if !hang.Load() {
			return nil
		}
		<-resume
		// Resumed after the other took the Lease: its resourceVersion
		// moved on.
		return apierrors.NewConflict(coordinationv1.Resource("leases"), "prod-shellbox-leader", nil)
	}}, "a", 2*time.Second)
	if id := el.next(); id != "a" {
		t.Fatalf("%s leads, want a (alone)", id)
	}
	b := el.start("b", 2*time.Second)
	time.Sleep(300 * time.Millisecond) // b sees a renew
	hang.Store(true)
	if id := el.next(); id != "b" {
		t.Fatalf("%s leads, want b", id)
	}
	if el.overlap.Load() {
		t.Error("two replicas led at once: a led on while its renewal hung")
	}
	if a.lost.Load() != 1 {
		t.Errorf("a's lead context was cancelled %d times before b led, want 1", a.lost.Load())
	}
	close(resume)
	time.Sleep(300 * time.Millisecond) // a's renewal returns, a competes again
	if h := el.holder(); h != "b" {
		t.Errorf("lease holder %q after a resumed, want b", h)
	}
	if el.leading.Load() != 1 || el.overlap.Load() {
		t.Errorf("%d leaders after a resumed (overlap %v), want b alone", el.leading.Load(), el.overlap.Load())
	}
	b.stop()
	<-b.ended
}

// hangingLeases is a clientset whose Lease updates first call hang, which
// may block, and fail with its error.
type hangingLeases struct {
	kubernetes.Interface
	hang func() error
}

func (h hangingLeases) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return hangingCoordination{h.Interface.CoordinationV1(), h.hang}
}

type hangingCoordination struct {
	coordinationv1client.CoordinationV1Interface
	hang func() error
}

func (h hangingCoordination) Leases(ns string) coordinationv1client.LeaseInterface {
	return hangingLeaseClient{h.CoordinationV1Interface.Leases(ns), h.hang}
}

type hangingLeaseClient struct {
	coordinationv1client.LeaseInterface
	hang func() error
}

func (h hangingLeaseClient) Update(ctx context.Context, l *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if err := h.hang(); err != nil {
		return nil, err
	}
	return h.LeaseInterface.Update(ctx, l, o)
}

func TestLeaseName(t *testing.T) {
	if got := LeaseName("prod"); got != "prod-shellbox-leader" {
		t.Errorf("LeaseName(prod) = %q", got)
	}
	a, b := LeaseName("Prod_1"), LeaseName("prod-1")
	if a == b || len(validation.IsDNS1123Subdomain(a)) > 0 {
		t.Errorf("LeaseName(Prod_1) = %q, LeaseName(prod-1) = %q: want distinct DNS-1123 names", a, b)
	}
}

func TestDefaultIdentity(t *testing.T) {
	t.Setenv("POD_NAME", "prod-7d9f-x2")
	a, b := DefaultIdentity(), DefaultIdentity()
	if !strings.HasPrefix(a, "prod-7d9f-x2-") || a == b {
		t.Errorf("identities %q, %q: want the pod's name with a random suffix", a, b)
	}
	t.Setenv("POD_NAME", "")
	if id := DefaultIdentity(); strings.HasPrefix(id, "-") || len(id) < 10 {
		t.Errorf("identity without POD_NAME: %q, want the host name with a suffix", id)
	}
}

func TestNewElectorChecks(t *testing.T) {
	cs := fake.NewClientset()
	for _, tc := range []struct {
		cfg  ElectorConfig
		want string
	}{
		{ElectorConfig{}, "kube.namespace"},
		{ElectorConfig{Namespace: "s", LeaseDuration: 500 * time.Millisecond}, "lease duration"},
		{ElectorConfig{Namespace: "s", LeaseDuration: 5 * time.Second, RenewDeadline: 5 * time.Second}, "renew deadline"},
		{ElectorConfig{Namespace: "s", RetryPeriod: 9 * time.Second}, "retry period"},
	} {
		if _, err := NewElector(cs, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	e, err := NewElector(cs, ElectorConfig{Namespace: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if e.cfg.LeaseDuration != DefaultLeaseDuration || e.cfg.RenewDeadline != DefaultRenewDeadline ||
		e.cfg.RetryPeriod != DefaultRetryPeriod || e.name != "shellbox-shellbox-leader" || e.Identity() == "" {
		t.Errorf("defaults: %+v, lease %s", e.cfg, e.name)
	}
}
