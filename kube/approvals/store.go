package approvals

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
)

// GVR is the Approval resource; Kind its kind.
var GVR = schema.GroupVersionResource{Group: "shellbox.dev", Version: "v1alpha1", Resource: "approvals"}

const (
	Kind = "Approval"
	// CRDName is the CustomResourceDefinition's name.
	CRDName = "approvals.shellbox.dev"
)

// Defaults of Config.
const (
	DefaultMaxPending     = 64
	DefaultMaxHistory     = 256
	DefaultPoll           = 5 * time.Second
	DefaultSweepInterval  = time.Minute
	DefaultOrphanGrace    = time.Minute
	DefaultRequestTimeout = 10 * time.Second
)

// Config configures a Store.
type Config struct {
	// Namespace holds the Approvals: the sessions namespace, where the
	// server's Role is. Required.
	Namespace string
	// Release names the installation: its replicas share its Approvals
	// (label org.shellbox.release). Default kube.DefaultRelease.
	Release string
	// MaxPending bounds a tenant's pending approvals, MaxHistory the
	// decided ones kept. Defaults DefaultMaxPending, DefaultMaxHistory.
	MaxPending, MaxHistory int
	// Poll is how often a waiting holder rereads its approval from the
	// API server besides the watch. Default DefaultPoll.
	Poll time.Duration
	// SweepInterval is how often the store trims every tenant's history
	// and expires orphans: pending approvals whose deadline passed more
	// than OrphanGrace ago (their holder is gone). Defaults
	// DefaultSweepInterval, DefaultOrphanGrace.
	SweepInterval, OrphanGrace time.Duration
	// RequestTimeout bounds each request to the API server. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger hears failed sweeps and watches (default: discard).
	Logger *slog.Logger
}

// Store is the ApprovalStore of a release's replicas. New, then Start;
// Close stops its watch and sweeps.
type Store struct {
	cfg      Config
	res      dynamic.ResourceInterface
	release  string // the release's label value
	informer cache.SharedIndexInformer
	log      *slog.Logger

	subs policies.Subscribers

	mu      sync.Mutex
	waiters map[string]chan struct{} // by object name; closed at its next change
	// decided are the objects this replica decided whose decision the
	// watch has not shown yet: when it does, their tenant's history is
	// trimmed (from the cache, which then holds it).
	decided map[string]bool

	trim   chan string // tenants whose history a decision may have overgrown
	stop   context.CancelFunc
	done   chan struct{}
	closed sync.Once
}

var _ policies.ApprovalStore = (*Store)(nil)

const tenantIndex = "tenant"

// New returns a Store on dc. It does not contact the API server.
func New(dc dynamic.Interface, cfg Config) (*Store, error) {
	if cfg.Namespace == "" || len(validation.IsDNS1123Label(cfg.Namespace)) > 0 {
		return nil, fmt.Errorf("approvals: namespace %q: must be a DNS-1123 label", cfg.Namespace)
	}
	cfg.Release = cmp.Or(cfg.Release, kube.DefaultRelease)
	cfg.MaxPending = cmp.Or(max(cfg.MaxPending, 0), DefaultMaxPending)
	cfg.MaxHistory = cmp.Or(max(cfg.MaxHistory, 0), DefaultMaxHistory)
	cfg.Poll = cmp.Or(max(cfg.Poll, 0), DefaultPoll)
	cfg.SweepInterval = cmp.Or(max(cfg.SweepInterval, 0), DefaultSweepInterval)
	cfg.OrphanGrace = cmp.Or(max(cfg.OrphanGrace, 0), DefaultOrphanGrace)
	cfg.RequestTimeout = cmp.Or(max(cfg.RequestTimeout, 0), DefaultRequestTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{cfg: cfg, res: dc.Resource(GVR).Namespace(cfg.Namespace), release: kube.LabelValue(cfg.Release),
		log:     cfg.Logger.With("approvals", cfg.Namespace+"/"+GVR.Resource),
		waiters: map[string]chan struct{}{}, decided: map[string]bool{}, trim: make(chan string, 64), done: make(chan struct{})}
	selector := kube.LabelRelease + "=" + s.release
	s.informer = dynamicinformer.NewFilteredDynamicInformer(dc, GVR, cfg.Namespace, 0,
		cache.Indexers{tenantIndex: func(obj any) ([]string, error) {
			if a, ok := s.decode(obj); ok {
				return []string{a.Tenant}, nil
			}
			return nil, nil
		}},
		func(o *metav1.ListOptions) { o.LabelSelector = selector }).Informer()
	return s, nil
}

// Start checks that the Approvals can be listed (the CRD is installed, the
// RBAC granted) and that the CRD stores one as written (checkSchema), starts the watch and the sweeps, and returns when the
// cache holds the release's Approvals, or ctx ends. They run until Close.
func (s *Store) Start(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	_, err := s.res.List(rctx, metav1.ListOptions{Limit: 1, LabelSelector: kube.LabelRelease + "=" + s.release})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("approvals: the CustomResourceDefinition %s is not installed (the chart's crds/): %w", CRDName, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("approvals: no RBAC for %s in namespace %s (get, list, watch, create, update, delete): %w", CRDName, s.cfg.Namespace, err)
	case err != nil:
		return fmt.Errorf("approvals: list: %w", err)
	}
	if err := s.checkSchema(ctx); err != nil {
		return err
	}
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			a, ok := s.decode(obj)
			if !ok {
				return
			}
			s.wake(objectName(a.ID))
			if !initial {
				s.subs.Notify(a)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			a, ok := s.decode(newObj)
			if !ok {
				return
			}
			s.wake(objectName(a.ID))
			if old, ok := s.decode(oldObj); !ok || old.State != a.State {
				s.subs.Notify(a)
			}
			if a.State != policies.Pending && s.shown(objectName(a.ID)) {
				select {
				case s.trim <- a.Tenant:
				default: // trims are due anyway; the sweep catches up
				}
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if a, ok := s.decode(obj); ok {
				s.wake(objectName(a.ID))
				s.shown(objectName(a.ID))
			}
		},
	}); err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	_ = s.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		s.log.Warn("approvals: watch failed; relisting", "err", err)
	})
	run, stop := context.WithCancel(context.Background())
	s.stop = stop
	go func() {
		defer close(s.done)
		var wg sync.WaitGroup
		wg.Go(func() { s.informer.RunWithContext(run) })
		wg.Go(func() { s.sweep(run) })
		wg.Wait()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return fmt.Errorf("approvals: the cache did not fill: %w", ctx.Err())
	}
	return nil
}

// Close stops the watch and the sweeps and waits for them. Waits in
// progress still end by their context or their poll.
func (s *Store) Close() {
	s.closed.Do(func() {
		if s.stop != nil {
			s.stop()
			<-s.done
		}
	})
}

// Add creates a pending Approval.
func (s *Store) Add(ctx context.Context, a approval.Approval) (approval.Approval, error) {
	n := 0
	for _, c := range s.tenantCache(a.Tenant) {
		if c.State == policies.Pending {
			n++
		}
	}
	if n >= s.cfg.MaxPending {
		return approval.Approval{}, policies.TooManyPending(a.Tenant, s.cfg.MaxPending)
	}
	a.ID, a.State = policies.NewApprovalID(), policies.Pending
	u, err := s.encode(a)
	if err != nil {
		return approval.Approval{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	created, err := s.res.Create(rctx, u, metav1.CreateOptions{})
	if err != nil {
		return approval.Approval{}, fmt.Errorf("approvals: create: %w", err)
	}
	// Start checked the CRD, but it can be replaced while the server
	// runs: an ask the cluster does not store as written is not held.
	if err := s.storedAsWritten(a, created); err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
		defer cancel()
		_ = s.res.Delete(dctx, u.GetName(), metav1.DeleteOptions{})
		return approval.Approval{}, err
	}
	return a, nil
}

// storedAsWritten says whether the API server kept what an approver is
// shown of a as written in obj. A server prunes the fields its CRD does
// not know (Helm never upgrades crds/), and an approver must not see a
// background call as a foreground one, nor a command without its
// permissions.
func (s *Store) storedAsWritten(a approval.Approval, obj *unstructured.Unstructured) error {
	got, ok := s.decode(obj)
	var lost []string
	switch {
	case !ok:
		lost = append(lost, "spec")
	default:
		for _, f := range []struct {
			name string
			same bool
		}{
			{"command", got.Command == a.Command}, {"workdir", got.Workdir == a.Workdir},
			{"justification", got.Justification == a.Justification},
			{"permissions", slices.Equal(got.Permissions, a.Permissions)},
			{"background", got.Background == a.Background}, {"timeoutMs", got.TimeoutMs == a.TimeoutMs},
		} {
			if !f.same {
				lost = append(lost, "spec."+f.name)
			}
		}
	}
	if len(lost) == 0 {
		return nil
	}
	return fmt.Errorf("approvals: the cluster does not store an Approval as written (it drops %s): "+
		"the CustomResourceDefinition %s predates this server; kubectl apply -f the chart's crds/approvals.yaml "+
		"(Helm installs crds/ once and never upgrades them)", strings.Join(lost, ", "), CRDName)
}

// checkSchema creates, as a dry run, an Approval with every field set and
// checks that the API server would store it as written: a server started
// against a CRD older than itself fails to start, saying what to apply,
// instead of refusing each ask.
func (s *Store) checkSchema(ctx context.Context) error {
	now := time.Now().UTC().Truncate(time.Second)
	a := approval.Approval{ID: policies.NewApprovalID(), State: policies.Pending, Tenant: "schema-check",
		Session: "schema-check", Tool: "bash", Command: "true", Workdir: "/", Rule: "schema-check",
		Reason: "schema-check", Justification: "schema-check", Permissions: []string{"network"},
		Background: true, TimeoutMs: 1, Created: now, Deadline: now.Add(time.Minute)}
	u, err := s.encode(a)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	created, err := s.res.Create(rctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("approvals: a dry-run create (the CRD's schema check): %w", err)
	}
	return s.storedAsWritten(a, created)
}

// Wait waits for the watch (or, every Poll, the API server) to show the
// approval decided.
func (s *Store) Wait(ctx context.Context, tenant, id string) (approval.Approval, error) {
	if !validID(id) {
		return approval.Approval{}, noSuch(id)
	}
	name := objectName(id)
	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()
	var last approval.Approval
	for {
		// Registered before the cache is read: a change after the read
		// closes it.
		changed := s.waiter(name)
		if a, ok := s.cached(name); ok && a.Tenant == tenant {
			last = a
			if a.State != policies.Pending {
				return a, nil
			}
		}
		select {
		case <-changed:
		case <-poll.C:
			a, err := s.get(ctx, tenant, name)
			switch {
			case errors.Is(err, policies.ErrNoSuchApproval):
				return approval.Approval{}, err
			case err != nil:
				s.log.Warn("approvals: rereading a pending approval", "approval", id, "err", err)
			case a.State != policies.Pending:
				return a, nil
			}
		case <-ctx.Done():
			return last, ctx.Err()
		}
	}
}

// maxConflicts bounds Finish's rereads after conflicting writes.
const maxConflicts = 8

// Finish decides the approval with an update conditioned on the
// resourceVersion it read.
func (s *Store) Finish(ctx context.Context, tenant, id, state, approver, reason string, at time.Time) (approval.Approval, error) {
	switch state {
	case policies.Approved, policies.Denied, policies.Expired:
	default:
		return approval.Approval{}, fmt.Errorf("approvals: finish as %q: not a decision", state)
	}
	if !validID(id) {
		return approval.Approval{}, noSuch(id)
	}
	name := objectName(id)
	for range maxConflicts {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		u, err := s.res.Get(rctx, name, metav1.GetOptions{})
		if err != nil {
			cancel()
			if apierrors.IsNotFound(err) {
				return approval.Approval{}, noSuch(id)
			}
			return approval.Approval{}, fmt.Errorf("approvals: get %s: %w", name, err)
		}
		a, ok := s.decode(u)
		if !ok || a.Tenant != tenant {
			cancel()
			return approval.Approval{}, noSuch(id)
		}
		if a.State != policies.Pending {
			cancel()
			return a, fmt.Errorf("%w: %s is %s", policies.ErrAlreadyDecided, id, a.State)
		}
		a.State, a.Approver, a.DecisionReason, a.Decided = state, clip(approver, 256), clip(reason, 8192), at
		st, err := toMap(status{State: a.State, Approver: a.Approver, DecisionReason: a.DecisionReason, Decided: a.Decided})
		if err != nil {
			cancel()
			return approval.Approval{}, err
		}
		u.Object["status"] = st
		// Marked before the write: the watch may show it before Update
		// returns.
		s.mu.Lock()
		s.decided[name] = true
		s.mu.Unlock()
		_, err = s.res.Update(rctx, u, metav1.UpdateOptions{}) // carries u's resourceVersion
		cancel()
		if err != nil {
			s.shown(name)
		}
		switch {
		case apierrors.IsConflict(err):
			continue // changed since the read: reread
		case apierrors.IsNotFound(err):
			return approval.Approval{}, noSuch(id)
		case err != nil:
			return approval.Approval{}, fmt.Errorf("approvals: update %s: %w", name, err)
		}
		return a, nil
	}
	return approval.Approval{}, fmt.Errorf("approvals: %s: still changing after %d conflicting writes", name, maxConflicts)
}

// List is tenant's Approvals in this replica's cache.
func (s *Store) List(tenant string) []approval.Approval {
	all := s.tenantCache(tenant)
	var pending, decided []approval.Approval
	for _, a := range all {
		if a.State == policies.Pending {
			pending = append(pending, a)
		} else {
			decided = append(decided, a)
		}
	}
	slices.SortFunc(pending, func(a, b approval.Approval) int { return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID)) })
	slices.SortFunc(decided, func(a, b approval.Approval) int { return cmp.Or(b.Decided.Compare(a.Decided), cmp.Compare(b.ID, a.ID)) })
	if len(decided) > s.cfg.MaxHistory { // not trimmed yet
		decided = decided[:s.cfg.MaxHistory]
	}
	return append(append(make([]approval.Approval, 0, len(pending)+len(decided)), pending...), decided...)
}

// Subscribe calls fn from the watch.
func (s *Store) Subscribe(fn func(approval.Approval)) (cancel func()) { return s.subs.Subscribe(fn) }

// shown forgets that this replica decided name, and says whether it had.
func (s *Store) shown(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	mine := s.decided[name]
	delete(s.decided, name)
	return mine
}

func (s *Store) waiter(name string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.waiters[name]
	if ch == nil {
		ch = make(chan struct{})
		s.waiters[name] = ch
	}
	return ch
}

// wake tells the waiters of name that it changed. Every object's change
// clears its entry, its deletion last of all: the map holds only names
// that exist or were waited on since their last change.
func (s *Store) wake(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.waiters[name]; ch != nil {
		close(ch)
		delete(s.waiters, name)
	}
}

func (s *Store) cached(name string) (approval.Approval, bool) {
	obj, ok, err := s.informer.GetIndexer().GetByKey(s.cfg.Namespace + "/" + name)
	if err != nil || !ok {
		return approval.Approval{}, false
	}
	return s.decode(obj)
}

func (s *Store) tenantCache(tenant string) []approval.Approval {
	objs, err := s.informer.GetIndexer().ByIndex(tenantIndex, tenant)
	if err != nil {
		return nil
	}
	out := make([]approval.Approval, 0, len(objs))
	for _, obj := range objs {
		if a, ok := s.decode(obj); ok && a.Tenant == tenant {
			out = append(out, a)
		}
	}
	return out
}

// get reads tenant's approval from the API server.
func (s *Store) get(ctx context.Context, tenant, name string) (approval.Approval, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	u, err := s.res.Get(rctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return approval.Approval{}, noSuch(idOf(name))
	}
	if err != nil {
		return approval.Approval{}, fmt.Errorf("approvals: get %s: %w", name, err)
	}
	a, ok := s.decode(u)
	if !ok || a.Tenant != tenant {
		return approval.Approval{}, noSuch(idOf(name))
	}
	return a, nil
}

// sweep trims histories (at once after a decision, and every
// SweepInterval) and expires orphans, until ctx ends.
func (s *Store) sweep(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case tenant := <-s.trim:
			s.trimHistory(ctx, tenant)
		case <-t.C:
			s.sweepAll(ctx)
		}
	}
}

func (s *Store) sweepAll(ctx context.Context) {
	now := time.Now()
	for _, tenant := range s.informer.GetIndexer().ListIndexFuncValues(tenantIndex) {
		for _, a := range s.tenantCache(tenant) {
			if a.State == policies.Pending && now.Sub(a.Deadline) > s.cfg.OrphanGrace {
				_, err := s.Finish(ctx, tenant, a.ID, policies.Expired, "",
					"nobody answered before the deadline, and the server replica holding the call is gone", now)
				if err != nil && !errors.Is(err, policies.ErrAlreadyDecided) && !errors.Is(err, policies.ErrNoSuchApproval) {
					s.log.Warn("approvals: expiring an orphan", "approval", a.ID, "err", err)
				}
			}
		}
		s.trimHistory(ctx, tenant)
	}
}

// trimHistory deletes tenant's oldest decided Approvals beyond MaxHistory.
func (s *Store) trimHistory(ctx context.Context, tenant string) {
	var decided []approval.Approval
	uids := map[string]string{}
	objs, _ := s.informer.GetIndexer().ByIndex(tenantIndex, tenant)
	for _, obj := range objs {
		if a, ok := s.decode(obj); ok && a.Tenant == tenant && a.State != policies.Pending {
			decided = append(decided, a)
			uids[a.ID] = string(obj.(*unstructured.Unstructured).GetUID())
		}
	}
	if len(decided) <= s.cfg.MaxHistory {
		return
	}
	slices.SortFunc(decided, func(a, b approval.Approval) int { return cmp.Or(a.Decided.Compare(b.Decided), cmp.Compare(a.ID, b.ID)) })
	for _, a := range decided[:len(decided)-s.cfg.MaxHistory] {
		uid := types.UID(uids[a.ID])
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		err := s.res.Delete(rctx, objectName(a.ID), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			s.log.Warn("approvals: trimming the history", "tenant", tenant, "approval", a.ID, "err", err)
			return
		}
	}
}

// Labels of an Approval besides kube.LabelRelease.
const (
	LabelTenant    = sandbox.LabelTenant
	LabelManagedBy = kube.LabelManagedBy
)

var idPattern = regexp.MustCompile(`^ap_[0-9a-f]{16}$`)

func validID(id string) bool { return idPattern.MatchString(id) }

// objectName is the object of approval id: ap_<hex> is ap-<hex>.
func objectName(id string) string { return "ap-" + id[len("ap_"):] }

func idOf(name string) string { return "ap_" + name[len("ap-"):] }

func noSuch(id string) error {
	if len(id) > 64 {
		id = id[:64]
	}
	return fmt.Errorf("%w: %s", policies.ErrNoSuchApproval, id)
}

// clip cuts s to at most n characters (the CRD's maxLength counts
// characters).
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// spec and status are an Approval object's fields: the CRD's schema, kept
// apart from approval.Approval because the stored form is the cluster's
// (optional fields omitted, the decision under status).
type spec struct {
	Tenant        string    `json:"tenant"`
	Session       string    `json:"session"`
	Tool          string    `json:"tool"`
	Command       string    `json:"command"`
	Workdir       string    `json:"workdir,omitempty"`
	Rule          string    `json:"rule"`
	Reason        string    `json:"reason"`
	Justification string    `json:"justification,omitempty"`
	Permissions   []string  `json:"permissions,omitempty"`
	Background    bool      `json:"background,omitempty"`
	TimeoutMs     int64     `json:"timeoutMs,omitempty"`
	Created       time.Time `json:"created"`
	Deadline      time.Time `json:"deadline"`
}

type status struct {
	State          string    `json:"state"`
	Approver       string    `json:"approver,omitempty"`
	DecisionReason string    `json:"decisionReason,omitempty"`
	Decided        time.Time `json:"decided,omitzero"`
}

func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("approvals: encode: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("approvals: encode: %w", err)
	}
	return m, nil
}

func (s *Store) encode(a approval.Approval) (*unstructured.Unstructured, error) {
	// The call is held whole (approval.Whole's bounds are within the
	// CRD's): an approver on any replica sees what runs, or nothing is
	// held. Only the policy's own texts are clipped, to the CRD's bounds.
	if err := a.Whole(); err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	sp, err := toMap(spec{Tenant: a.Tenant, Session: a.Session, Tool: a.Tool, Command: a.Command,
		Workdir: a.Workdir, Rule: clip(a.Rule, 4096), Reason: clip(a.Reason, 8192),
		Justification: a.Justification, Permissions: a.Permissions, Background: a.Background, TimeoutMs: a.TimeoutMs,
		Created: a.Created.UTC(), Deadline: a.Deadline.UTC()})
	if err != nil {
		return nil, err
	}
	st, err := toMap(status{State: a.State})
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": sp, "status": st}}
	u.SetAPIVersion(GVR.GroupVersion().String())
	u.SetKind(Kind)
	u.SetNamespace(s.cfg.Namespace)
	u.SetName(objectName(a.ID))
	u.SetLabels(map[string]string{kube.LabelRelease: s.release, LabelTenant: kube.LabelValue(a.Tenant), LabelManagedBy: "shellbox"})
	return u, nil
}

// decode is the Approval an object of this release holds; false for
// anything else (another release's, a malformed one).
func (s *Store) decode(obj any) (approval.Approval, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetLabels()[kube.LabelRelease] != s.release || len(u.GetName()) != len("ap-")+16 {
		return approval.Approval{}, false
	}
	id := idOf(u.GetName())
	if !validID(id) {
		return approval.Approval{}, false
	}
	var o struct {
		Spec   spec   `json:"spec"`
		Status status `json:"status"`
	}
	b, err := json.Marshal(map[string]any{"spec": u.Object["spec"], "status": u.Object["status"]})
	if err != nil || json.Unmarshal(b, &o) != nil || o.Spec.Tenant == "" {
		return approval.Approval{}, false
	}
	if o.Status.State == "" {
		o.Status.State = policies.Pending
	}
	sp, st := o.Spec, o.Status
	return approval.Approval{ID: id, Tenant: sp.Tenant, Session: sp.Session, Tool: sp.Tool, Command: sp.Command,
		Workdir: sp.Workdir, Rule: sp.Rule, Reason: sp.Reason, Justification: sp.Justification,
		Permissions: sp.Permissions, Background: sp.Background, TimeoutMs: sp.TimeoutMs, State: st.State, Approver: st.Approver, DecisionReason: st.DecisionReason,
		Created: sp.Created, Deadline: sp.Deadline, Decided: st.Decided}, true
}
