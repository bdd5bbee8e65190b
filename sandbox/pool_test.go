package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

func claims(t *testing.T) *sandbox.DirClaims {
	t.Helper()
	c, err := sandbox.NewDirClaims(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func withClaims(c sandbox.Claims) func(*sandbox.Config) {
	return func(cfg *sandbox.Config) { cfg.Claims = c }
}

func target(t *testing.T, size int, opts ...sandbox.Opt) sandbox.PoolTarget {
	t.Helper()
	s := spec(t, "ignored")
	if err := sandbox.Compose(opts...)(&s); err != nil {
		t.Fatal(err)
	}
	return sandbox.PoolTarget{Template: s, Size: size}
}

func fill(t *testing.T, m *sandbox.Manager, targets ...sandbox.PoolTarget) sandbox.FillReport {
	t.Helper()
	rep, err := m.Fill(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// pooled lists the fake's unclaimed-or-claimed pooled sandboxes by name.
func pooled(t *testing.T, f *sandboxtest.Fake) map[string]sandbox.Sandbox {
	t.Helper()
	list, err := f.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sandbox.Sandbox{}
	for _, sb := range list {
		if sandbox.IsPooled(sb.Session) {
			out[sb.Session] = sb
		}
	}
	return out
}

// A Fill whose context has ended (its process stopped leading) creates
// nothing; the next one does.
func TestFillCancelled(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f, withClaims(claims(t)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rep, _ := m.Fill(ctx, []sandbox.PoolTarget{target(t, 2)}); rep.Created != 0 || f.Creates.Load() != 0 {
		t.Fatalf("a cancelled Fill: %+v, %d creations", rep, f.Creates.Load())
	}
	if rep := fill(t, m, target(t, 2)); rep.Created != 2 || rep.Missing != 0 {
		t.Fatalf("the next fill: %+v", rep)
	}
}

func TestPoolClaimAndRefill(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f, withClaims(claims(t)))
	if rep := fill(t, m, target(t, 2)); rep.Created != 2 || rep.Missing != 0 {
		t.Fatalf("first fill: %+v", rep)
	}
	before := pooled(t, f)
	if len(before) != 2 {
		t.Fatalf("pooled sandboxes: %v", before)
	}

	sb, err := m.Ensure(context.Background(), spec(t, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	if sb.Session != "s1" || sb.PoolName == "" || before[sb.PoolName].ID != sb.ID {
		t.Fatalf("claimed %+v, want one of %v", sb, before)
	}
	if n := f.Creates.Load(); n != 2 {
		t.Fatalf("%d creates, want the 2 of the pool only (a claim creates nothing)", n)
	}
	again, err := m.Ensure(context.Background(), spec(t, "s1"))
	if err != nil || again.ID != sb.ID {
		t.Fatalf("second Ensure: %+v, %v; want %s", again, err, sb.ID)
	}

	if rep := fill(t, m, target(t, 2)); rep.Created != 1 {
		t.Fatalf("refill: %+v, want 1 created", rep)
	}
	got, err := m.Inspect(context.Background(), "acme", "s1")
	if err != nil || got.ID != sb.ID || got.Session != "s1" {
		t.Fatalf("Inspect: %+v, %v", got, err)
	}
	list, err := m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Session != "s1" || list[0].ID != sb.ID {
		t.Fatalf("List shows %+v, want only s1's (pooled ones are nobody's session)", list)
	}

	if err := m.Remove(context.Background(), "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Inspect(context.Background(), "acme", "s1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after Remove: %v, want ErrNotFound", err)
	}
	if cs, _ := m.List(context.Background()); len(cs) != 0 {
		t.Fatalf("after Remove: %+v", cs)
	}
	if p := pooled(t, f); len(p) != 2 {
		t.Fatalf("after Remove: %d pooled, want the 2 ready", len(p))
	}
}

func TestPoolTemplateChangeRolls(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f, withClaims(claims(t)))
	a := target(t, 2)
	fill(t, m, a)
	old := pooled(t, f)

	b := target(t, 2, sandbox.WithMemory(2*sandbox.GiB))
	rep := fill(t, m, b)
	if rep.Removed != 2 || rep.Created != 2 {
		t.Fatalf("roll: %+v, want 2 removed, 2 created", rep)
	}
	now := pooled(t, f)
	for name := range old {
		if _, ok := now[name]; ok {
			t.Fatalf("old template's %s survived the roll", name)
		}
	}
	// A session of the old template gets a cold start, not a drained
	// sandbox.
	sb, err := m.Ensure(context.Background(), spec(t, "s-old"))
	if err != nil {
		t.Fatal(err)
	}
	if sb.PoolName != "" {
		t.Fatalf("a session of the old template claimed %s", sb.PoolName)
	}
	// One of the new template claims.
	nb := spec(t, "s-new")
	nb.MemoryBytes = 2 * sandbox.GiB
	sb, err = m.Ensure(context.Background(), nb)
	if err != nil || now[sb.PoolName].ID != sb.ID {
		t.Fatalf("new template: %+v, %v", sb, err)
	}
	// A pool no target names any more is drained.
	if rep := fill(t, m); rep.Removed != 1 {
		t.Fatalf("drain: %+v, want the 1 left removed", rep)
	}
	if p := pooled(t, f); len(p) != 1 || p[sb.PoolName].ID != sb.ID {
		t.Fatalf("after drain: %v, want only the claimed one", p)
	}
}

func TestPoolMismatchIsAColdStart(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f, withClaims(claims(t)))
	fill(t, m, target(t, 1))
	s := spec(t, "mounting")
	s.Mounts = []sandbox.Mount{{Source: t.TempDir(), Target: "/data", ReadOnly: true}}
	sb, err := m.Ensure(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if sb.PoolName != "" || f.Creates.Load() != 2 {
		t.Fatalf("a session with mounts the template lacks: %+v, %d creates; want a cold start", sb, f.Creates.Load())
	}
}

func TestPoolCrashMidClaim(t *testing.T) {
	f := newFake()
	c := claims(t)
	m1, _ := newManager(t, f, withClaims(c))
	fill(t, m1, target(t, 2))
	var victim sandbox.Sandbox
	for _, sb := range pooled(t, f) {
		victim = sb
		break
	}
	// The first process recorded a claim and died before serving it.
	if _, err := c.Claim(context.Background(), "acme", victim.Session, "s1"); err != nil {
		t.Fatal(err)
	}

	m2, _ := newManager(t, f, withClaims(c))
	rep, err := m2.Adopt(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Kept) != 1 || rep.Kept[0].Session != "s1" || rep.Kept[0].ID != victim.ID {
		t.Fatalf("kept %+v, want %s as s1's", rep.Kept, victim.ID)
	}
	if len(rep.Pooled) != 1 || rep.Pooled[0].ID == victim.ID {
		t.Fatalf("pooled %+v, want the other one", rep.Pooled)
	}
	// The claimed sandbox is never handed to another session.
	sb, err := m2.Ensure(context.Background(), spec(t, "s2"))
	if err != nil || sb.ID == victim.ID || sb.PoolName == "" {
		t.Fatalf("s2: %+v, %v; want the other pooled sandbox", sb, err)
	}
	sb, err = m2.Ensure(context.Background(), spec(t, "s3"))
	if err != nil || sb.ID == victim.ID || sb.PoolName != "" {
		t.Fatalf("s3: %+v, %v; want a cold start (the pool is empty)", sb, err)
	}
	sb, err = m2.Ensure(context.Background(), spec(t, "s1"))
	if err != nil || sb.ID != victim.ID {
		t.Fatalf("s1: %+v, %v; want %s", sb, err, victim.ID)
	}
	// The pool's state (host directory) of claimed and pooled sandboxes
	// survived the sweep.
	if !f.HasState("acme", victim.Session) {
		t.Fatal("Adopt swept the claimed sandbox's state")
	}
}

func TestPoolStaleClaimsAndDeadPooledAtAdopt(t *testing.T) {
	f := newFake()
	c := claims(t)
	dead := f.Put(sandbox.Sandbox{Tenant: "acme", Session: sandbox.PoolPrefix + "0123456789abcdef-00000001", Owner: "srv", State: sandbox.StateExited})
	if _, err := c.Claim(context.Background(), "acme", sandbox.PoolPrefix+"0123456789abcdef-00000002", "gone"); err != nil {
		t.Fatal(err)
	}
	m, _ := newManager(t, f, withClaims(c))
	rep, err := m.Adopt(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 1 || rep.Removed[0].ID != dead.ID {
		t.Fatalf("removed %+v, want the dead pooled sandbox", rep.Removed)
	}
	if len(rep.Released) != 1 || rep.Released[0].Session != "gone" {
		t.Fatalf("released %+v, want the claim of the missing sandbox", rep.Released)
	}
	if cs, _ := c.List(context.Background()); len(cs) != 0 {
		t.Fatalf("claims left: %+v", cs)
	}
}

// Two processes race for one pooled sandbox: the claim record decides.
func TestPoolClaimRace(t *testing.T) {
	for range 20 {
		f := newFake()
		c := claims(t)
		m0, _ := newManager(t, f, withClaims(c))
		fill(t, m0, target(t, 1))
		var ms [2]*sandbox.Manager
		for i := range ms {
			ms[i], _ = newManager(t, f, withClaims(c))
			if _, err := ms[i].Adopt(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var got [2]sandbox.Sandbox
		for i := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := ms[i].Ensure(context.Background(), spec(t, []string{"a", "b"}[i]))
				if err != nil {
					t.Error(err)
				}
				got[i] = sb
			}()
		}
		wg.Wait()
		if got[0].ID == got[1].ID {
			t.Fatalf("one sandbox handed to two sessions: %+v, %+v", got[0], got[1])
		}
		if (got[0].PoolName == "") == (got[1].PoolName == "") {
			t.Fatalf("want exactly one claim: %+v, %+v", got[0], got[1])
		}
	}
}

func TestPoolNamesAreReserved(t *testing.T) {
	m, _ := newManager(t, newFake(), withClaims(claims(t)))
	s := spec(t, "x")
	s.Session = sandbox.PoolPrefix + "0123456789abcdef-00000001"
	if _, err := m.Ensure(context.Background(), s); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "reserved for warm pools") {
		t.Fatalf("Ensure of a pooled name: %v", err)
	}
	if err := m.Remove(context.Background(), "acme", s.Session); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("Remove of a pooled name: %v", err)
	}
	if _, err := m.Inspect(context.Background(), "acme", s.Session); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("Inspect of a pooled name: %v", err)
	}
}

func TestPoolNeedsClaims(t *testing.T) {
	m, _ := newManager(t, newFake())
	if _, err := m.Fill(context.Background(), []sandbox.PoolTarget{target(t, 1)}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("Fill without claims: %v", err)
	}
}

// blockingFake holds every Create until release is closed, and says when
// each starts.
func blockingFake() (*sandboxtest.Fake, chan struct{}, chan string) {
	f := newFake()
	release, started := make(chan struct{}), make(chan string, 100)
	f.CreateHook = func(s sandbox.Spec) error { started <- s.Session; <-release; return nil }
	return f, release, started
}

func waitQueued(t *testing.T, m *sandbox.Manager, want int) {
	t.Helper()
	for {
		if _, q := m.Admission(); q == want {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAdmissionQueueDeadline(t *testing.T) {
	f, release, started := blockingFake()
	defer close(release)
	m, _ := newManager(t, f, func(c *sandbox.Config) { c.MaxCreating, c.CreateQueue, c.CreateQueueWait = 1, 5, 50*time.Millisecond })
	go m.Ensure(context.Background(), spec(t, "s1"))
	<-started
	_, err := m.Ensure(context.Background(), spec(t, "s2"))
	want := "too many sandboxes being created: 1 in progress, 0 queued; waited 50ms"
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("queued past its wait: %v; want %q", err, want)
	}
	if n := f.Creates.Load(); n != 0 {
		t.Fatalf("%d creates finished, want 0", n)
	}
}

func TestAdmissionQueueFull(t *testing.T) {
	f, release, started := blockingFake()
	m, _ := newManager(t, f, func(c *sandbox.Config) { c.MaxCreating, c.CreateQueue, c.CreateQueueWait = 1, 1, time.Minute })
	errs := make(chan error, 2)
	for _, s := range []string{"s1", "s2"} {
		go func() { _, err := m.Ensure(context.Background(), spec(t, s)); errs <- err }()
		if s == "s1" {
			<-started
		}
	}
	waitQueued(t, m, 1)
	_, err := m.Ensure(context.Background(), spec(t, "s3"))
	want := "too many sandboxes being created: 1 in progress, 1 queued (the queue is full)"
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("past a full queue: %v; want %q", err, want)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := f.Creates.Load(); n != 2 {
		t.Fatalf("%d creates, want s1 and s2", n)
	}
}

func TestFillGivesWayToSessions(t *testing.T) {
	f, release, started := blockingFake()
	m, _ := newManager(t, f, withClaims(claims(t)), func(c *sandbox.Config) { c.MaxCreating, c.CreateQueue = 1, 5 })
	errs := make(chan error, 2)
	for _, s := range []string{"s1", "s2"} {
		go func() { _, err := m.Ensure(context.Background(), spec(t, s)); errs <- err }()
		if s == "s1" {
			<-started
		}
	}
	waitQueued(t, m, 1)
	rep := fill(t, m, target(t, 3))
	if rep.Created != 0 || rep.Missing != 3 {
		t.Fatalf("fill while a session queues: %+v, want nothing created, 3 missing", rep)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Slots free: one pass creates what the slots allow (one at a time
	// here), FillEvery runs passes until the pool is full.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.FillEvery(ctx, func() []sandbox.PoolTarget { return []sandbox.PoolTarget{target(t, 3)} }, time.Hour)
	}()
	for {
		if ps := m.Pools(); len(ps) == 1 && ps[0].Ready == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
}

// Prepare runs on every pooled sandbox before it joins the pool; one it
// fails for is removed, never claimed.
func TestPoolPrepare(t *testing.T) {
	f := newFake()
	var prepared []string
	var mu sync.Mutex
	m, _ := newManager(t, f, withClaims(claims(t)), func(c *sandbox.Config) {
		c.MaxCreating = 1
		c.Prepare = func(_ context.Context, sb sandbox.Sandbox) error {
			mu.Lock()
			defer mu.Unlock()
			prepared = append(prepared, sb.Session)
			if len(prepared) == 1 {
				return errors.New("first one is bad")
			}
			return nil
		}
	})
	if rep, err := m.Fill(context.Background(), []sandbox.PoolTarget{target(t, 1)}); err == nil || rep.Created != 0 || rep.Missing != 1 {
		t.Fatalf("fill with a failing Prepare: %+v, %v", rep, err)
	}
	if n := len(pooled(t, f)); n != 0 {
		t.Fatalf("%d pooled sandboxes left, want the failed one removed", n)
	}
	if rep := fill(t, m, target(t, 1)); rep.Created != 1 {
		t.Fatalf("second fill: %+v", rep)
	}
	sb, err := m.Ensure(context.Background(), spec(t, "s1"))
	if err != nil || sb.PoolName != prepared[1] {
		t.Fatalf("claimed %+v, %v; want the prepared %s", sb, err, prepared[1])
	}
}

// Concurrent passes plan each missing sandbox once.
func TestPoolConcurrentFills(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f, withClaims(claims(t)), func(c *sandbox.Config) { c.MaxCreating = 8 })
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.Fill(context.Background(), []sandbox.PoolTarget{target(t, 3)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := f.Creates.Load(); n != 3 {
		t.Fatalf("%d creates for a pool of 3 filled by 4 concurrent passes", n)
	}
}

// heldClaims holds every Claim until release is closed, and says when one
// has begun.
type heldClaims struct {
	sandbox.Claims
	claiming chan struct{}
	release  chan struct{}
}

func (h heldClaims) Claim(ctx context.Context, tenant, pooled, session string) (string, error) {
	h.claiming <- struct{}{}
	<-h.release
	return h.Claims.Claim(ctx, tenant, pooled, session)
}

// The pool is refilled once a claim has ended, not while it is recorded:
// the refill's creation competes for the API server and the node with the
// claim's own requests (on Kubernetes it doubled a claim's slowest
// writes). The refill still comes.
func TestPoolRefillsAfterTheClaim(t *testing.T) {
	f := newFake()
	h := heldClaims{Claims: claims(t), claiming: make(chan struct{}), release: make(chan struct{})}
	m, _ := newManager(t, f, withClaims(h))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tgt := target(t, 1)
	filling := make(chan struct{})
	go func() {
		defer close(filling)
		m.FillEvery(ctx, func() []sandbox.PoolTarget { return []sandbox.PoolTarget{tgt} }, time.Hour)
	}()
	for deadline := time.Now().Add(10 * time.Second); len(pooled(t, f)) < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool was not filled")
		}
	}
	ensured := make(chan error, 1)
	go func() {
		_, err := m.Ensure(ctx, spec(t, "s1"))
		ensured <- err
	}()
	<-h.claiming
	time.Sleep(200 * time.Millisecond) // a refill kicked now would have created by then
	if n := f.Creates.Load(); n != 1 {
		t.Fatalf("%d creates while the claim is being recorded, want 1 (the pool's): the refill ran beside the claim", n)
	}
	close(h.release)
	if err := <-ensured; err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); f.Creates.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool was not refilled after the claim")
		}
	}
	cancel()
	<-filling
}

// A pooled sandbox's runtime state (SessionState: on docker and containerd
// the host tmpfs of its workspace) goes with it whenever the pool removes
// it: one that failed before joining its pool, the ready ones a template
// change rolls, the last ones a drain takes, and a claimed one its
// session removes. No sandbox takes a pooled name again, so state left
// behind stayed until the next server start's sweep.
func TestPoolRemovalTakesItsState(t *testing.T) {
	f := newFake()
	var mu sync.Mutex
	var names []string
	f.CreateHook = func(s sandbox.Spec) error {
		mu.Lock()
		defer mu.Unlock()
		names = append(names, s.Session)
		return nil
	}
	prepared := 0
	m, _ := newManager(t, f, withClaims(claims(t)), func(c *sandbox.Config) {
		c.Prepare = func(context.Context, sandbox.Sandbox) error {
			mu.Lock()
			defer mu.Unlock()
			if prepared++; prepared == 1 {
				return errors.New("first one is bad")
			}
			return nil
		}
	})
	gone := func(step string) {
		t.Helper()
		live := pooled(t, f)
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			if _, ok := live[n]; !ok && f.HasWorkspace("acme", n) {
				t.Errorf("%s: removed pooled sandbox %s left its workspace", step, n)
			}
		}
	}
	if _, err := m.Fill(context.Background(), []sandbox.PoolTarget{target(t, 1)}); err == nil {
		t.Fatal("fill with a failing Prepare: no error")
	}
	gone("failed Prepare")
	fill(t, m, target(t, 2))
	if rep := fill(t, m, target(t, 2, sandbox.WithMemory(2*sandbox.GiB))); rep.Removed != 2 {
		t.Fatalf("roll: %+v, want 2 removed", rep)
	}
	gone("template roll")
	nb := spec(t, "s1")
	nb.MemoryBytes = 2 * sandbox.GiB
	if sb, err := m.Ensure(context.Background(), nb); err != nil || sb.PoolName == "" {
		t.Fatalf("claim: %+v, %v", sb, err)
	}
	if rep := fill(t, m); rep.Removed != 1 {
		t.Fatalf("drain: %+v, want 1 removed", rep)
	}
	gone("drain")
	if err := m.Remove(context.Background(), "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	gone("session removed")
	if len(names) != 5 {
		t.Fatalf("%d pooled sandboxes made, want 5: %v", len(names), names)
	}
}

// TestCreateTimeoutFromTheSlot: a creation's CreateTimeout runs from its
// creation slot, not from its place in the queue. With one slot and a
// CreateTimeout of 2 s, s1 holds the slot 1.2 s and s2, queued behind it,
// takes 1.2 s more: 2.4 s after s2 asked, each creation within its own 2
// s. Before, s2's queue wait counted against it and its creation ran out
// ("context deadline exceeded") 0.8 s after it had its slot.
func TestCreateTimeoutFromTheSlot(t *testing.T) {
	f := newFake()
	const hold = 1200 * time.Millisecond
	f.CreateHook = func(sandbox.Spec) error { time.Sleep(hold); return nil }
	m, _ := newManager(t, f, func(c *sandbox.Config) {
		c.MaxCreating, c.CreateQueue, c.CreateQueueWait, c.CreateTimeout = 1, 5, time.Minute, 2*time.Second
		// The fake's Create does not look at its context: Ready, right
		// after it, says whether the creation's time had run out.
		c.Ready = func(ctx context.Context, _ sandbox.Sandbox) error { return ctx.Err() }
	})
	errs := make(chan error, 2)
	go func() { _, err := m.Ensure(context.Background(), spec(t, "s1")); errs <- err }()
	waitCreating := func() {
		for {
			if n, _ := m.Admission(); n == 1 {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitCreating()
	go func() { _, err := m.Ensure(context.Background(), spec(t, "s2")); errs <- err }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("a creation admitted after a queue's wait: %v", err)
		}
	}
	if n := f.Creates.Load(); n != 2 {
		t.Errorf("%d creates, want 2", n)
	}
}
