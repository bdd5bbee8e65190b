package kube

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Defaults of ElectorConfig: client-go's usual ones (those of
// kube-controller-manager). A leader that cannot renew stops leading
// after RenewDeadline; another replica takes over after LeaseDuration
// without a renewal, at once after a release.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ElectorConfig configures an Elector.
type ElectorConfig struct {
	// Namespace holds the Lease: the sessions namespace, where the
	// server's Role is. Required.
	Namespace string
	// Release names the installation: the Lease is LeaseName(Release).
	// Default DefaultRelease.
	Release string
	// Identity is this process's holder identity in the Lease. Default
	// DefaultIdentity().
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// leaderelection settings (LeaseDuration is recorded in whole
	// seconds). Defaults DefaultLeaseDuration, DefaultRenewDeadline,
	// DefaultRetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Logger hears leadership changes and client-go's election log
	// (default: discard).
	Logger *slog.Logger
}

// Elector elects one leader among the server replicas of a release with a
// coordination.k8s.io/v1 Lease (client-go's leaderelection over a
// LeaseLock). It implements session.Leader. RBAC in Namespace: leases
// get, create, update.
type Elector struct {
	cs   kubernetes.Interface
	cfg  ElectorConfig
	name string
	log  *slog.Logger
}

// LeaseName is the name of the release's leader Lease:
// <release>-shellbox-leader, or, for a release that is no DNS-1123 name
// (kube.release allows capitals and ._@:), a sanitised form with a hash of
// the release, so releases never share a Lease.
func LeaseName(release string) string {
	name := release + "-shellbox-leader"
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(release))
	return part(release) + "-" + hex.EncodeToString(sum[:5]) + "-shellbox-leader"
}

// DefaultIdentity is the pod's name (POD_NAME, from the downward API),
// else the host name, with a random suffix: a restarted server is a new
// candidate, never mistaken for its predecessor.
func DefaultIdentity() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	if name == "" {
		name = "shellbox"
	}
	b := make([]byte, 4)
	rand.Read(b)
	return name + "-" + hex.EncodeToString(b)
}

// NewElector returns an Elector on cs. It does not contact the API server.
func NewElector(cs kubernetes.Interface, cfg ElectorConfig) (*Elector, error) {
	if cfg.Namespace == "" || len(validation.IsDNS1123Label(cfg.Namespace)) > 0 {
		return nil, configErrorf("kube.namespace %q: must be a DNS-1123 label", cfg.Namespace)
	}
	if cfg.Release == "" {
		cfg.Release = DefaultRelease
	}
	if cfg.Identity == "" {
		cfg.Identity = DefaultIdentity()
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	// client-go's own conditions (NewLeaderElector), named as settings.
	switch {
	case cfg.LeaseDuration < time.Second:
		return nil, configErrorf("leader election: lease duration %v: at least 1s (the Lease records whole seconds)", cfg.LeaseDuration)
	case cfg.RenewDeadline >= cfg.LeaseDuration:
		return nil, configErrorf("leader election: renew deadline %v: must be below the lease duration %v", cfg.RenewDeadline, cfg.LeaseDuration)
	case cfg.RetryPeriod <= 0 || float64(cfg.RenewDeadline) <= leaderelection.JitterFactor*float64(cfg.RetryPeriod):
		return nil, configErrorf("leader election: retry period %v: must be positive and the renew deadline %v above %v times it",
			cfg.RetryPeriod, cfg.RenewDeadline, leaderelection.JitterFactor)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Elector{cs: cs, cfg: cfg, name: LeaseName(cfg.Release)}
	e.log = cfg.Logger.With("lease", cfg.Namespace+"/"+e.name, "identity", cfg.Identity)
	return e, nil
}

// Elector is an Elector for the runtime's release, its Lease in the
// runtime's namespace, on the runtime's clientset, with the default
// timings and identity.
func (r *Runtime) Elector(log *slog.Logger) (*Elector, error) {
	return NewElector(r.cs, ElectorConfig{Namespace: r.cfg.Namespace, Release: r.cfg.Release, Logger: log})
}

// Identity is this process's holder identity.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Run competes for the Lease until ctx ends, and calls lead each time this
// process acquires it, with a context cancelled as soon as the Lease is
// lost (not renewed within RenewDeadline) or ctx ends. It waits for lead
// to return before it competes again; when ctx ends it waits for lead to
// return and then releases the Lease, so another replica takes over at
// its next retry rather than after LeaseDuration, and never while this
// one's lead runs. It returns after that (the release is bounded by
// RenewDeadline).
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context)) {
	for {
		e.term(ctx, lead)
		t := time.NewTimer(e.cfg.RetryPeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// term is one candidacy: it waits for the Lease, leads until the Lease is
// lost or ctx ends, and returns when lead has returned (and, if ctx ended,
// the Lease has been released).
func (e *Elector) term(ctx context.Context, lead func(context.Context)) {
	// The election runs under a context of its own, ended only after lead
	// has returned: the Lease is released after that (release), never
	// while lead still acts as the leader. client-go's ReleaseOnCancel is
	// not used: it releases before it cancels lead's context, also after a
	// failed renewal, so a leader cut off from the API server would lead
	// on for up to another RenewDeadline while another replica takes over.
	electCtx, stopElect := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logr.FromSlogHandler(e.log.Handler())))
	defer stopElect()
	var (
		mu   sync.Mutex
		over bool          // the term is ending: lead must not start
		led  chan struct{} // closed when lead returns; nil until it starts
		// fenced is closed when fence ended the lead: the term ends then
		// too (the Lease released if it is still this process's), so
		// that a process whose lead ended never holds the Lease idle.
		fenced    = make(chan struct{})
		fenceOnce sync.Once
	)
	lock := &renewalLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.name},
		Client:     e.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
	}}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: e.cfg.LeaseDuration,
		RenewDeadline: e.cfg.RenewDeadline,
		RetryPeriod:   e.cfg.RetryPeriod,
		Name:          e.name,
		Callbacks: leaderelection.LeaderCallbacks{
			// client-go runs it in a goroutine of its own, and cancels
			// lctx when the Lease is lost; ctx ending cancels it too.
			OnStartedLeading: func(lctx context.Context) {
				lctx, cancel := context.WithCancel(lctx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				mu.Lock()
				if over || lctx.Err() != nil {
					mu.Unlock()
					return
				}
				done := make(chan struct{})
				led = done
				mu.Unlock()
				defer close(done)
				// lead stops RenewDeadline after the last renewal that
				// succeeded, by this process's clock, whatever client-go's
				// renew loop believes (fence).
				go e.fence(lctx, lock, func() {
					cancel()
					fenceOnce.Do(func() { close(fenced) })
				})
				e.log.Info("leading: this replica holds the lease")
				lead(lctx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				if identity != "" && identity != e.cfg.Identity {
					e.log.Info("another replica leads", "leader", identity)
				}
			},
		},
	})
	if err != nil { // NewElector checked what NewLeaderElector does
		e.log.Error("leader election", "err", err)
		return
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		le.Run(electCtx)
	}()
	lost, wasFenced := false, false
	select {
	case <-ran: // Run returns only when the Lease is lost (electCtx lives on)
		lost = true
	case <-fenced: // fence logged it; the Lease is released below if still held
		wasFenced = true
	case <-ctx.Done():
	}
	mu.Lock()
	over = true
	done := led
	mu.Unlock()
	if done != nil {
		<-done
	}
	stopElect()
	<-ran
	switch {
	case lost:
		if done != nil {
			e.log.Warn("stopped leading: the lease was not renewed in time")
		}
	default:
		// Even without a lead: the Lease may have been acquired as ctx
		// ended, too late to lead.
		err := e.release()
		switch {
		case err != nil:
			e.log.Warn("releasing the lease", "err", err, "led", done != nil)
		case done != nil && !wasFenced:
			e.log.Info("stopped leading: lease released")
		}
	}
}

// release gives the Lease up if this process still holds it, as client-go's
// release does: no holder, a duration of 1s, so the next candidate
// acquires it at its next retry. Its update is conditional on the Lease's
// resourceVersion: a Lease changed meanwhile is someone else's.
func (e *Elector) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	leases := e.cs.CoordinationV1().Leases(e.cfg.Namespace)
	l, err := leases.Get(ctx, e.name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.cfg.Identity {
		return nil
	}
	now := metav1.NowMicro()
	none, one := "", int32(1)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &none, &one
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("update: %w", err)
	}
	return nil
}

// renewalLock is the Lease lock, which remembers when this process last
// wrote the Lease successfully (acquired or renewed it): when the request
// that succeeded was sent, the earliest time another replica can have seen
// it.
type renewalLock struct {
	resourcelock.Interface
	mu      sync.Mutex
	renewed time.Time // monotonic
}

func (l *renewalLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.written(r, func() error { return l.Interface.Create(ctx, r) })
}

func (l *renewalLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.written(r, func() error { return l.Interface.Update(ctx, r) })
}

func (l *renewalLock) written(r resourcelock.LeaderElectionRecord, write func() error) error {
	sent := time.Now()
	err := write()
	if err == nil && r.HolderIdentity == l.Identity() {
		l.mu.Lock()
		l.renewed = sent
		l.mu.Unlock()
	}
	return err
}

func (l *renewalLock) lastRenewal() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

// fence ends a lead (stop) once RenewDeadline has passed since the
// lock's last successful write, and returns when ctx ends. client-go's
// renew loop does not: it gives up only when a renewal attempt has failed
// for RenewDeadline, counted from the attempt's start, and an attempt blocks
// while its request does. A process stopped past the lease duration
// (SIGSTOP, a frozen cgroup, a VM paused) resumes inside an attempt begun
// before the stop, or starts one at once, and so leads on for up to
// another RenewDeadline while the replica that took the Lease meanwhile
// leads too: both reaping, both filling the pools. Another replica takes
// the Lease only LeaseDuration after it saw the last renewal, which was
// sent before it was seen: stopping at RenewDeadline after the send (below
// LeaseDuration) never overlaps, and a resumed process's timer has expired
// already, so this fires as it resumes.
func (e *Elector) fence(ctx context.Context, lock *renewalLock, stop func()) {
	t := time.NewTimer(e.cfg.RenewDeadline)
	defer t.Stop()
	for {
		left := e.cfg.RenewDeadline - time.Since(lock.lastRenewal())
		if left <= 0 {
			e.log.Warn("stopped leading: no renewal of the lease for the renew deadline", "renewDeadline", e.cfg.RenewDeadline,
				"sinceRenewal", time.Since(lock.lastRenewal()).Round(time.Millisecond))
			stop()
			return
		}
		t.Reset(left)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
