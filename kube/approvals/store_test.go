package approvals

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/tools"
)

const ns = "sessions"

// apiServer is a fake dynamic client with what the tests rely on of a real
// API server that the fake's tracker lacks: resourceVersions in the
// objects (the tracker's own numbering, so a watch resumes where it
// should) and updates conditioned on them (a stale one is a Conflict).
// watches counts the watches opened; stopWatches ends them (the informer
// must resume).
type apiServer struct {
	*dynamicfake.FakeDynamicClient
	mu      sync.Mutex
	open    []watch.Interface
	watches atomic.Int32
}

func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GVR: "ApprovalList"})
	s := &apiServer{FakeDynamicClient: dc}
	tracker := dc.Tracker()
	// The reactors run under the fake's lock: check and write are one step.
	nextRV := func() string {
		l, err := tracker.List(GVR, GVR.GroupVersion().WithKind(Kind), "")
		if err != nil {
			t.Errorf("tracker list: %v", err)
			return ""
		}
		lm, _ := meta.ListAccessor(l)
		rv, _ := strconv.ParseInt(lm.GetResourceVersion(), 10, 64)
		return strconv.FormatInt(rv+1, 10)
	}
	dc.PrependReactor("create", "approvals", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		if slices.Contains(a.(k8stesting.CreateActionImpl).CreateOptions.DryRun, metav1.DryRunAll) {
			return true, u.DeepCopy(), nil // answered as stored, never stored
		}
		u.SetResourceVersion(nextRV())
		return false, nil, nil
	})
	dc.PrependReactor("update", "approvals", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured)
		cur, err := tracker.Get(GVR, a.GetNamespace(), u.GetName())
		if err != nil {
			return false, nil, nil // the tracker answers NotFound
		}
		if cm, _ := meta.Accessor(cur); cm.GetResourceVersion() != u.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(GVR.GroupResource(), u.GetName(), errors.New("the object has been modified"))
		}
		u.SetResourceVersion(nextRV())
		return false, nil, nil
	})
	dc.PrependWatchReactor("approvals", func(a k8stesting.Action) (bool, watch.Interface, error) {
		opts := a.(k8stesting.WatchActionImpl).ListOptions
		w, err := tracker.Watch(GVR, a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		s.watches.Add(1)
		s.mu.Lock()
		s.open = append(s.open, w)
		s.mu.Unlock()
		return true, w, nil
	})
	return s
}

// stopWatches ends every open watch, as an API server restart would.
func (s *apiServer) stopWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.open {
		w.Stop()
	}
	s.open = nil
}

// objects are the Approval objects in the fake.
func (s *apiServer) objects(t *testing.T) []unstructured.Unstructured {
	t.Helper()
	l, err := s.Resource(GVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// replica is one server replica's store; Poll is an hour unless the test
// sets it, so only the watch can wake a waiter.
func (s *apiServer) replica(t *testing.T, cfg Config) *Store {
	t.Helper()
	cfg.Namespace = ns
	if cfg.Release == "" {
		cfg.Release = "prod"
	}
	if cfg.Poll == 0 {
		cfg.Poll = time.Hour
	}
	st, err := New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

func ask(tenant string) policies.Approval {
	now := time.Now()
	return policies.Approval{Tenant: tenant, Session: "s1", Tool: "bash", Command: "git push origin main",
		Rule: "push", Reason: "pushing needs approval", Permissions: []string{"network"},
		Created: now, Deadline: now.Add(time.Minute)}
}

// eventually fails the test if cond is not true within 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// events records what a replica's subscribers hear.
type events struct {
	mu   sync.Mutex
	seen []string // id:state
}

func (e *events) record(st *Store) {
	st.Subscribe(func(a policies.Approval) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.seen = append(e.seen, a.ID+":"+a.State)
	})
}

func (e *events) has(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.seen {
		if x == s {
			return true
		}
	}
	return false
}

// An ask held by replica A is listed by B and approved through B; A's
// waiting call returns the decision from the watch (A's poll is an hour).
// Both replicas' subscribers hear it created and decided.
func TestHolderSeesDecisionOfAnotherReplica(t *testing.T) {
	api := newAPIServer(t)
	a, b := api.replica(t, Config{}), api.replica(t, Config{})
	var evA, evB events
	evA.record(a)
	evB.record(b)
	ap, err := a.Add(context.Background(), ask("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if !validID(ap.ID) || ap.State != policies.Pending {
		t.Fatalf("added %+v", ap)
	}
	got := make(chan policies.Approval, 1)
	go func() {
		d, err := a.Wait(context.Background(), "acme", ap.ID)
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	eventually(t, "B lists A's ask", func() bool { l := b.List("acme"); return len(l) == 1 && l[0].ID == ap.ID })
	l := b.List("acme")[0]
	if l.Command != "git push origin main" || l.Rule != "push" || l.State != policies.Pending || l.Permissions[0] != "network" ||
		!l.Created.Equal(ap.Created) || !l.Deadline.Equal(ap.Deadline) {
		t.Errorf("B lists %+v", l)
	}
	d, err := b.Finish(context.Background(), "acme", ap.ID, policies.Approved, "alice", "looks fine", time.Now())
	if err != nil || d.State != policies.Approved {
		t.Fatalf("B decides: %+v, %v", d, err)
	}
	select {
	case d := <-got:
		if d.State != policies.Approved || d.Approver != "alice" || d.DecisionReason != "looks fine" {
			t.Errorf("A's wait returned %+v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("A's wait did not return within 10s of B's decision")
	}
	for name, ev := range map[string]*events{"A": &evA, "B": &evB} {
		eventually(t, name+" hears pending and approved", func() bool {
			return ev.has(ap.ID+":pending") && ev.has(ap.ID+":approved")
		})
	}
	for _, o := range api.objects(t) {
		if o.GetName() != objectName(ap.ID) || o.GetLabels()[kube.LabelRelease] != "prod" || o.GetLabels()[LabelTenant] != "acme" {
			t.Errorf("object %s labels %v", o.GetName(), o.GetLabels())
		}
	}
}

// Of concurrent decisions by several replicas exactly one is written; the
// others get ErrAlreadyDecided with the winning decision.
func TestOneDecisionWins(t *testing.T) {
	api := newAPIServer(t)
	holder := api.replica(t, Config{})
	ap, err := holder.Add(context.Background(), ask("acme"))
	if err != nil {
		t.Fatal(err)
	}
	var replicas []*Store
	for range 6 {
		replicas = append(replicas, api.replica(t, Config{}))
	}
	type result struct {
		a   policies.Approval
		err error
		who string
	}
	results := make(chan result, len(replicas))
	start := make(chan struct{})
	for i, r := range replicas {
		go func() {
			<-start
			who := "approver" + strconv.Itoa(i)
			a, err := r.Finish(context.Background(), "acme", ap.ID, []string{policies.Approved, policies.Denied}[i%2], who, "", time.Now())
			results <- result{a, err, who}
		}()
	}
	close(start)
	var winner string
	var decided []policies.Approval
	for range replicas {
		r := <-results
		switch {
		case r.err == nil:
			if winner != "" {
				t.Errorf("two decisions won: %s and %s", winner, r.who)
			}
			winner = r.a.Approver
		case errors.Is(r.err, policies.ErrAlreadyDecided):
			decided = append(decided, r.a)
		default:
			t.Errorf("%s: %v", r.who, r.err)
		}
	}
	if winner == "" {
		t.Fatal("no decision won")
	}
	for _, d := range decided {
		if d.Approver != winner {
			t.Errorf("a loser was told the approval is %s by %s, the winner is %s", d.State, d.Approver, winner)
		}
	}
	d, err := holder.Wait(context.Background(), "acme", ap.ID)
	if err != nil || d.Approver != winner {
		t.Errorf("the holder sees %+v, %v; winner %s", d, err, winner)
	}
}

// A tenant neither lists, decides nor waits on another's approvals, nor
// those of another release; malformed ids make no request.
func TestTenantIsolation(t *testing.T) {
	api := newAPIServer(t)
	a := api.replica(t, Config{})
	other := api.replica(t, Config{Release: "staging"})
	ap, err := a.Add(context.Background(), ask("acme"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "A lists its ask", func() bool { return len(a.List("acme")) == 1 })
	if l := a.List("beta"); len(l) != 0 {
		t.Errorf("beta lists %+v", l)
	}
	if _, err := a.Finish(context.Background(), "beta", ap.ID, policies.Approved, "mallory", "", time.Now()); !errors.Is(err, policies.ErrNoSuchApproval) ||
		err.Error() != "no such approval: "+ap.ID {
		t.Errorf("beta decides acme's: %v", err)
	}
	if _, err := other.Finish(context.Background(), "acme", ap.ID, policies.Approved, "mallory", "", time.Now()); !errors.Is(err, policies.ErrNoSuchApproval) {
		t.Errorf("another release decides: %v", err)
	}
	if l := other.List("acme"); len(l) != 0 {
		t.Errorf("another release lists %+v", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if d, err := a.Wait(ctx, "beta", ap.ID); d.ID != "" || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("beta waits on acme's: %+v, %v", d, err)
	}
	before := len(api.Actions())
	for _, id := range []string{"ap-0123456789abcdef", "ap_../../x", "", "ap_0123456789ABCDEF"} {
		if _, err := a.Finish(context.Background(), "acme", id, policies.Approved, "x", "", time.Now()); !errors.Is(err, policies.ErrNoSuchApproval) {
			t.Errorf("id %q: %v", id, err)
		}
	}
	if n := len(api.Actions()) - before; n != 0 {
		t.Errorf("malformed ids made %d requests", n)
	}
	if l := a.List("acme"); len(l) != 1 || l[0].State != policies.Pending {
		t.Errorf("acme's ask after the attempts: %+v", l)
	}
}

// A tenant keeps its newest MaxHistory decisions; older objects are
// deleted from the cluster.
func TestBoundedHistory(t *testing.T) {
	api := newAPIServer(t)
	a := api.replica(t, Config{MaxHistory: 3})
	var ids []string
	for i := range 5 {
		ap, err := a.Add(context.Background(), ask("acme"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Finish(context.Background(), "acme", ap.ID, policies.Denied, "bob", strconv.Itoa(i), time.Now()); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ap.ID)
		time.Sleep(2 * time.Millisecond) // distinct decision times
	}
	eventually(t, "the cluster keeps 3 decisions", func() bool { return len(api.objects(t)) == 3 })
	eventually(t, "the cache keeps 3 decisions", func() bool { return len(a.List("acme")) == 3 })
	l := a.List("acme")
	for i, want := range []string{ids[4], ids[3], ids[2]} {
		if l[i].ID != want {
			t.Errorf("history[%d] = %s (%s), want %s", i, l[i].ID, l[i].DecisionReason, want)
		}
	}
}

// The bound of pending approvals per tenant holds.
func TestPendingBound(t *testing.T) {
	api := newAPIServer(t)
	a := api.replica(t, Config{MaxPending: 1})
	if _, err := a.Add(context.Background(), ask("acme")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cache holds the ask", func() bool { return len(a.List("acme")) == 1 })
	if _, err := a.Add(context.Background(), ask("acme")); err == nil || err.Error() != "too many pending approvals for tenant acme (limit 1)" {
		t.Errorf("second ask: %v", err)
	}
	if _, err := a.Add(context.Background(), ask("beta")); err != nil {
		t.Errorf("another tenant's ask: %v", err)
	}
}

// TestCallHeldWhole: an approver on another replica sees the whole
// command that runs (the store once clipped it); a call over
// approval.MaxCommand is not stored at all.
func TestCallHeldWhole(t *testing.T) {
	api := newAPIServer(t)
	a, b := api.replica(t, Config{}), api.replica(t, Config{})
	fits := ask("acme")
	fits.Command = "git push #" + strings.Repeat("<", approval.MaxCommand-len("git push #"))
	fits.Workdir = strings.Repeat("d", approval.MaxWorkdir)
	held, err := a.Add(context.Background(), fits)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other replica lists the ask", func() bool { return len(b.List("acme")) == 1 })
	if got := b.List("acme")[0]; got.ID != held.ID || got.Command != fits.Command || got.Workdir != fits.Workdir {
		t.Errorf("the other replica's approver sees %d bytes of command, %d of workdir; %d and %d run",
			len(got.Command), len(got.Workdir), len(fits.Command), len(fits.Workdir))
	}
	long := ask("acme")
	long.Command += strings.Repeat(" ", approval.MaxCommand)
	if _, err := a.Add(context.Background(), long); err == nil || !strings.Contains(err.Error(), "over the 16384 an approval shows in full") {
		t.Errorf("an over-long command: err = %v", err)
	}
	if n := len(api.objects(t)); n != 1 {
		t.Errorf("%d Approval objects, want 1", n)
	}
}

// TestHowItRunsStored: background and timeout reach an approver on
// another replica; a cluster whose older CRD prunes them (a structural
// schema drops unknown fields) holds nothing rather than show a
// background call as a foreground one.
func TestHowItRunsStored(t *testing.T) {
	api := newAPIServer(t)
	a, b := api.replica(t, Config{}), api.replica(t, Config{})
	bg := ask("acme")
	bg.Background = true
	if _, err := a.Add(context.Background(), bg); err != nil {
		t.Fatal(err)
	}
	fg := ask("acme")
	fg.TimeoutMs = 20000
	if _, err := a.Add(context.Background(), fg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other replica lists both", func() bool { return len(b.List("acme")) == 2 })
	for _, got := range b.List("acme") {
		if got.Background == (got.TimeoutMs != 0) || (!got.Background && got.TimeoutMs != 20000) {
			t.Errorf("the other replica sees background %v, timeout %dms", got.Background, got.TimeoutMs)
		}
	}
	api.PrependReactor("create", "approvals", func(act k8stesting.Action) (bool, runtime.Object, error) {
		u := act.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		unstructured.RemoveNestedField(u.Object, "spec", "background")
		return false, nil, nil
	})
	if _, err := a.Add(context.Background(), bg); err == nil || !strings.Contains(err.Error(), "predates this server") {
		t.Errorf("a pruned background: err = %v", err)
	}
	if n := len(api.objects(t)); n != 2 {
		t.Errorf("%d Approval objects, want the 2 stored whole", n)
	}
}

// A server started against a CRD older than itself (one that prunes a
// field the server writes) fails to start, naming the field and what to
// apply; its check stores nothing.
func TestOldCRDRefusedAtStart(t *testing.T) {
	api := newAPIServer(t)
	api.replica(t, Config{})
	if n := len(api.objects(t)); n != 0 {
		t.Fatalf("the schema check left %d Approval objects", n)
	}
	api.PrependReactor("create", "approvals", func(act k8stesting.Action) (bool, runtime.Object, error) {
		u := act.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		unstructured.RemoveNestedField(u.Object, "spec", "timeoutMs")
		return false, nil, nil
	})
	st, err := New(api, Config{Namespace: ns, Release: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "drops spec.timeoutMs") || !strings.Contains(err.Error(), "kubectl apply -f") {
		t.Errorf("Start against an old CRD: err = %v", err)
	}
}

// A pending approval whose holder is gone (deadline long past) is
// expired by a sweep; one within its deadline is not.
func TestOrphanExpired(t *testing.T) {
	api := newAPIServer(t)
	gone := api.replica(t, Config{})
	orphan := ask("acme")
	orphan.Deadline = time.Now().Add(-time.Hour)
	o, err := gone.Add(context.Background(), orphan)
	if err != nil {
		t.Fatal(err)
	}
	live, err := gone.Add(context.Background(), ask("acme"))
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	sweeper := api.replica(t, Config{SweepInterval: 20 * time.Millisecond, OrphanGrace: time.Minute})
	eventually(t, "the orphan expires", func() bool {
		for _, a := range sweeper.List("acme") {
			if a.ID == o.ID {
				return a.State == policies.Expired
			}
		}
		return false
	})
	time.Sleep(100 * time.Millisecond) // five sweeps
	for _, a := range sweeper.List("acme") {
		if a.ID == live.ID && a.State != policies.Pending {
			t.Errorf("an ask within its deadline was swept: %+v", a)
		}
	}
}

// When the watch ends (an API server restart), the informer watches again
// and a waiting holder still hears the decision.
func TestWatchRestart(t *testing.T) {
	api := newAPIServer(t)
	a, b := api.replica(t, Config{}), api.replica(t, Config{})
	ap, err := a.Add(context.Background(), ask("acme"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan policies.Approval, 1)
	go func() {
		d, _ := a.Wait(context.Background(), "acme", ap.ID)
		got <- d
	}()
	eventually(t, "B lists the ask", func() bool { return len(b.List("acme")) == 1 })
	opened := api.watches.Load()
	api.stopWatches()
	eventually(t, "both replicas watch again", func() bool { return api.watches.Load() >= opened+2 })
	if _, err := b.Finish(context.Background(), "acme", ap.ID, policies.Approved, "alice", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d.State != policies.Approved {
			t.Errorf("A's wait returned %+v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("A's wait did not return within 10s of the decision after the watch restarted")
	}
}

// Without the watch, the holder's poll finds the decision.
func TestPollFindsDecision(t *testing.T) {
	api := newAPIServer(t)
	a := api.replica(t, Config{Poll: 20 * time.Millisecond})
	ap, err := a.Add(context.Background(), ask("acme"))
	if err != nil {
		t.Fatal(err)
	}
	// Decided behind the store's back, and its watch does not say so.
	u, err := api.Resource(GVR).Namespace(ns).Get(context.Background(), objectName(ap.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// From now on watches stay silent: the cache keeps it pending.
	api.PrependWatchReactor("approvals", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	api.stopWatches()
	u.Object["status"] = map[string]any{"state": "denied", "approver": "bob"}
	if _, err := api.Resource(GVR).Namespace(ns).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := a.Wait(ctx, "acme", ap.ID)
	if err != nil || d.State != policies.Denied || d.Approver != "bob" {
		t.Errorf("wait: %+v, %v", d, err)
	}
}

// policy asks for git push, and gives up after 300ms.
const policy = `default: allow
askTimeout: 300ms
rules:
  - name: push
    decision: ask
    reason: pushing needs approval
    match: {prefix: ["git push"]}
`

func engine(t *testing.T, st policies.ApprovalStore, policy string) *policies.Engine {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := policies.Open(dir, policies.Options{NoWatch: true, Approvals: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func call(cmd string) tools.Call {
	return tools.Call{Tenant: "acme", Session: "s1", Tool: "bash",
		Request: executor.Request{Session: "s1", Shell: executor.Bash, Command: cmd}}
}

// Two engines (two replicas) over one cluster: a call held on A is
// approved through B's Engine and runs; one nobody answers expires (the
// holder writes it), and B lists it expired; one whose caller goes away
// is expired as aborted.
func TestEnginesAcrossReplicas(t *testing.T) {
	api := newAPIServer(t)
	sa, sb := api.replica(t, Config{}), api.replica(t, Config{})
	ea, eb := engine(t, sa, policy), engine(t, sb, policy)
	pending := make(chan policies.Approval, 4)
	eb.Subscribe(func(a policies.Approval) {
		if a.State == policies.Pending {
			pending <- a
		}
	})

	done := make(chan error, 1)
	go func() { _, err := ea.Check(context.Background(), call("git push origin main")); done <- err }()
	ap := <-pending
	if _, err := eb.Decide("acme", ap.ID, true, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("approved on B, A's call: %v", err)
	}

	_, err := ea.Check(context.Background(), call("git push"))
	if err == nil || err.Error() != "denied by policy acme/push: approval required: no approver answered within 300ms (askTimeout)" {
		t.Errorf("unanswered: %v", err)
	}
	expired := (<-pending).ID
	eventually(t, "B lists it expired", func() bool {
		for _, a := range eb.Approvals("acme") {
			if a.ID == expired {
				return a.State == policies.Expired
			}
		}
		return false
	})
	if _, err := eb.Decide("acme", expired, true, "late", ""); !errors.Is(err, policies.ErrAlreadyDecided) {
		t.Errorf("deciding an expired ask: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-pending; cancel() }()
	if _, err := ea.Check(ctx, call("git push")); !errors.Is(err, executor.ErrAborted) {
		t.Errorf("aborted: %v", err)
	}
	l := eb.Approvals("acme")
	eventually(t, "B lists it aborted", func() bool {
		l = eb.Approvals("acme")
		return len(l) == 3 && l[0].State == policies.Expired && l[0].DecisionReason == "the call was aborted"
	})
}
