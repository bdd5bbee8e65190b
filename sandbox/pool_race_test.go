package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// Retire and Claim exclude each other: a claimed sandbox is not retired
// (ErrAlreadyExists), a retired one not claimed; retiring is idempotent;
// List shows a retirement with an empty session until Release.
func TestDirClaimsRetire(t *testing.T) {
	c := claims(t)
	ctx := context.Background()
	const poolB = sandbox.PoolPrefix + "0123456789abcdef-0000000b"
	if _, err := c.Claim(ctx, "acme", poolA, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Retire(ctx, "acme", poolA); !errors.Is(err, sandbox.ErrAlreadyExists) {
		t.Fatalf("Retire of a claimed sandbox: %v, want ErrAlreadyExists", err)
	}
	if err := c.Retire(ctx, "acme", poolB); err != nil {
		t.Fatal(err)
	}
	if err := c.Retire(ctx, "acme", poolB); err != nil {
		t.Fatalf("retiring twice: %v", err)
	}
	if _, err := c.Claim(ctx, "acme", poolB, "s2"); !errors.Is(err, sandbox.ErrAlreadyExists) {
		t.Fatalf("Claim of a retired sandbox: %v, want ErrAlreadyExists", err)
	}
	cs, err := c.List(ctx)
	if err != nil || len(cs) != 2 {
		t.Fatalf("List: %+v, %v", cs, err)
	}
	for _, cl := range cs {
		if (cl.Pooled == poolB) != (cl.Session == "") {
			t.Fatalf("List: %+v; want the retirement of %s with an empty session", cs, poolB)
		}
	}
	if err := c.Release(ctx, "acme", poolB); err != nil {
		t.Fatal(err)
	}
	if cs, _ := c.List(ctx); len(cs) != 1 {
		t.Fatalf("List after releasing the retirement: %+v", cs)
	}
}

// A session holds one claimed sandbox: a claim of another for it returns
// the one it holds and leaves the other unclaimed.
func TestDirClaimsOnePerSession(t *testing.T) {
	c := claims(t)
	ctx := context.Background()
	const poolB = sandbox.PoolPrefix + "0123456789abcdef-0000000b"
	if held, err := c.Claim(ctx, "acme", poolA, "s1"); err != nil || held != poolA {
		t.Fatalf("claim: %q, %v", held, err)
	}
	if held, err := c.Claim(ctx, "acme", poolB, "s1"); err != nil || held != poolA {
		t.Fatalf("a second claim for s1: %q, %v, want %s", held, err, poolA)
	}
	if held, err := c.Claim(ctx, "acme", poolB, "s2"); err != nil || held != poolB {
		t.Fatalf("the unused sandbox for s2: %q, %v", held, err)
	}
}

// barrierClaims holds its first Claim until every process's first has
// started: each has looked the session up (found nothing) before any
// claims.
type barrierClaims struct {
	sandbox.Claims
	wg   *sync.WaitGroup
	once *sync.Once
}

func (b barrierClaims) Claim(ctx context.Context, tenant, pooled, session string) (string, error) {
	b.once.Do(func() {
		b.wg.Done()
		b.wg.Wait()
	})
	return b.Claims.Claim(ctx, tenant, pooled, session)
}

// Two processes sharing the claims directory, each with a pooled sandbox
// of its own, serve a new session's first call at the same instant: both
// hand out the same sandbox, and the other stays in its pool.
func TestPoolOneSandboxPerSession(t *testing.T) {
	for range 20 {
		f := newFake()
		c := claims(t)
		var wg sync.WaitGroup
		wg.Add(2)
		var ms [2]*sandbox.Manager
		for i := range ms {
			// The second one's Fill finds the first's sandbox (the pools
			// are the runtime's) and makes one more.
			ms[i], _ = newManager(t, f, withClaims(barrierClaims{c, &wg, new(sync.Once)}))
			if rep, err := ms[i].Fill(context.Background(), []sandbox.PoolTarget{target(t, i+1)}); err != nil || rep.Created != 1 {
				t.Fatalf("fill: %+v, %v", rep, err)
			}
		}
		var got [2]sandbox.Sandbox
		var done sync.WaitGroup
		for i, m := range ms {
			done.Add(1)
			go func() {
				defer done.Done()
				sb, err := m.Ensure(context.Background(), spec(t, "s1"))
				if err != nil {
					t.Error(err)
				}
				got[i] = sb
			}()
		}
		done.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if got[0].ID != got[1].ID || got[0].PoolName == "" {
			t.Fatalf("session s1 got %s on one process and %s on the other", got[0].ID, got[1].ID)
		}
		cs, err := c.List(context.Background())
		if err != nil || len(cs) != 1 {
			t.Fatalf("claims: %+v, %v; want one", cs, err)
		}
		// The unused one is ready again wherever it was picked.
		if rep := fill(t, ms[1], target(t, 2)); rep.Created != 1 {
			t.Fatalf("refill after one claim: %+v, want one made", rep)
		}
	}
}

// A process drains a pool (its template changed) whose sandbox another
// process sharing the claims has just claimed: the claimed one is spared
// (FillReport.Claimed), the other removed.
func TestPoolDrainSparesClaimed(t *testing.T) {
	f := newFake()
	c := claims(t)
	m1, _ := newManager(t, f, withClaims(c))
	fill(t, m1, target(t, 2))
	m2, _ := newManager(t, f, withClaims(c))
	if _, err := m2.Adopt(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb, err := m2.Ensure(context.Background(), spec(t, "s1"))
	if err != nil || sb.PoolName == "" {
		t.Fatalf("claim: %+v, %v", sb, err)
	}
	// The drain learns of the claim from the claims before it retires
	// (Fill's sync) or at its Retire (ErrAlreadyExists): either way the
	// claimed one stays.
	rep := fill(t, m1, target(t, 1, sandbox.WithImage("another")))
	if rep.Removed != 1 {
		t.Fatalf("drain: %+v, want 1 removed", rep)
	}
	if _, err := f.Get(context.Background(), "acme", sb.PoolName); err != nil {
		t.Fatalf("s1's sandbox after the drain: %v", err)
	}
	if got, err := m2.Ensure(context.Background(), spec(t, "s1")); err != nil || got.ID != sb.ID {
		t.Fatalf("s1 after the drain: %+v, %v", got, err)
	}
	if cs, _ := c.List(context.Background()); len(cs) != 1 || cs[0].Session != "s1" {
		t.Fatalf("claims after the drain: %+v; want s1's only (the retirement released)", cs)
	}
}

// A crash between a retirement and the removal: the next Adopt removes
// the retired sandbox rather than pooling it, and drops the retirement.
func TestPoolRetiredAtAdopt(t *testing.T) {
	f := newFake()
	c := claims(t)
	m1, _ := newManager(t, f, withClaims(c))
	fill(t, m1, target(t, 1))
	var victim sandbox.Sandbox
	for _, sb := range pooled(t, f) {
		victim = sb
	}
	if err := c.Retire(context.Background(), "acme", victim.Session); err != nil {
		t.Fatal(err)
	}
	m2, _ := newManager(t, f, withClaims(c))
	rep, err := m2.Adopt(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Pooled) != 0 || len(rep.Removed) != 1 || rep.Removed[0].ID != victim.ID {
		t.Fatalf("adopt: pooled %+v, removed %+v; want the retired sandbox removed", rep.Pooled, rep.Removed)
	}
	if cs, _ := c.List(context.Background()); len(cs) != 0 {
		t.Fatalf("claims after adopt: %+v", cs)
	}
}

// A process that does not fill the pools (a replica that is not the
// elected one) claims from what another made after it started: a claim
// that finds its ready list empty looks at the runtime; the filler's
// next pass counts the claimed one gone and makes another.
func TestPoolFilledByAnother(t *testing.T) {
	f := newFake()
	c := claims(t)
	leader, _ := newManager(t, f, withClaims(c))
	other, _ := newManager(t, f, withClaims(c))
	if _, err := other.Adopt(context.Background()); err != nil {
		t.Fatal(err)
	}
	fill(t, leader, target(t, 2))
	sb, err := other.Ensure(context.Background(), spec(t, "s1"))
	if err != nil || sb.PoolName == "" {
		t.Fatalf("the other process's first call: %+v, %v; want a claim from the pool", sb, err)
	}
	if rep := fill(t, leader, target(t, 2)); rep.Created != 1 {
		t.Fatalf("the filler's next pass: %+v, want one made for the claimed", rep)
	}
	if got, err := leader.Ensure(context.Background(), spec(t, "s1")); err != nil || got.ID != sb.ID {
		t.Fatalf("s1 through the filler: %+v, %v; want %s", got, err, sb.ID)
	}
	ready := 0
	for _, p := range leader.Pools() {
		ready += p.Ready
	}
	if ready != 2 {
		t.Fatalf("the filler's pool: %d ready, want 2", ready)
	}
}

// Adopt leaves a sandbox that is still being created (perhaps by another
// process sharing the runtime) alone, and removes one that has been
// "created" for longer than a creation may take.
func TestAdoptSparesCreating(t *testing.T) {
	f := newFake()
	m, cfg := newManager(t, f, func(c *sandbox.Config) { c.CreateTimeout = time.Minute })
	young := f.Put(sandbox.Sandbox{Tenant: "acme", Session: "young", Owner: cfg.Owner, State: sandbox.StateCreated, Created: time.Now()})
	old := f.Put(sandbox.Sandbox{Tenant: "acme", Session: "old", Owner: cfg.Owner, State: sandbox.StateCreated, Created: time.Now().Add(-2 * time.Minute)})
	rep, err := m.Adopt(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 1 || rep.Removed[0].ID != old.ID {
		t.Fatalf("removed %+v, want only %s", rep.Removed, old.ID)
	}
	if _, err := f.Get(context.Background(), "acme", "young"); err != nil {
		t.Fatalf("the sandbox being created: %v (%s)", err, young.ID)
	}
}

// gatedClaims holds a List while armed: it tells listing, then waits for
// proceed. The runtime was listed before it (listClaimed), so the pass
// that called it works from a runtime list taken before whatever happens
// while it waits.
type gatedClaims struct {
	sandbox.Claims
	armed            *atomic.Bool
	listing, proceed chan struct{}
}

func (g gatedClaims) List(ctx context.Context) ([]sandbox.Claim, error) {
	if g.armed.CompareAndSwap(true, false) {
		g.listing <- struct{}{}
		<-g.proceed
	}
	return g.Claims.List(ctx)
}

// A pass that lists the pooled sandboxes while another pass's creation
// ends keeps the sandbox its list predates: it neither drops it from the
// ready list (the pool then counted one short, and a Fill overshot its
// size) nor forgets its name.
func TestPoolSyncKeepsSandboxMadeWhileListing(t *testing.T) {
	f := newFake()
	creating, create := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	f.CreateHook = func(sandbox.Spec) error {
		if first.CompareAndSwap(true, false) {
			creating <- struct{}{}
			<-create
		}
		return nil
	}
	g := gatedClaims{Claims: claims(t), armed: new(atomic.Bool), listing: make(chan struct{}), proceed: make(chan struct{})}
	m, _ := newManager(t, f, withClaims(g))
	ctx := context.Background()

	firstDone := make(chan sandbox.FillReport, 1)
	go func() {
		rep, err := m.Fill(ctx, []sandbox.PoolTarget{target(t, 1)})
		if err != nil {
			t.Error(err)
		}
		firstDone <- rep
	}()
	<-creating // the first pass's sandbox does not exist yet
	g.armed.Store(true)
	secondDone := make(chan sandbox.FillReport, 1)
	go func() {
		rep, err := m.Fill(ctx, []sandbox.PoolTarget{target(t, 1)})
		if err != nil {
			t.Error(err)
		}
		secondDone <- rep
	}()
	<-g.listing // the second pass has listed the runtime: without it
	close(create)
	if rep := <-firstDone; rep.Created != 1 {
		t.Fatalf("first pass: %+v, want one created", rep)
	}
	close(g.proceed)
	if rep := <-secondDone; rep.Created != 0 || rep.Missing != 0 {
		t.Errorf("second pass: %+v; want nothing created, nothing missing", rep)
	}
	if n := f.Creates.Load(); n != 1 {
		t.Errorf("%d creates for a pool of 1", n)
	}
	if ps := m.Pools(); len(ps) != 1 || ps[0].Ready != 1 {
		t.Errorf("pools %+v; want one with 1 ready", ps)
	}
	// The sandbox is still claimable: it was kept ready, by name.
	if sb, err := m.Ensure(ctx, spec(t, "s1")); err != nil || sb.PoolName == "" {
		t.Errorf("a session after both passes: %+v, %v; want the pooled sandbox", sb, err)
	}
}

// A pass that lists the pooled sandboxes while another pass drains one
// does not make the removed sandbox ready again from its older list: the
// pool would count a sandbox that is gone, and never refill it.
func TestPoolSyncForgetsSandboxRemovedWhileListing(t *testing.T) {
	f := newFake()
	g := gatedClaims{Claims: claims(t), armed: new(atomic.Bool), listing: make(chan struct{}), proceed: make(chan struct{})}
	m, _ := newManager(t, f, withClaims(g))
	fill(t, m, target(t, 1))
	g.armed.Store(true)
	done := make(chan sandbox.FillReport, 1)
	go func() {
		rep, err := m.Fill(context.Background(), []sandbox.PoolTarget{target(t, 1)})
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	<-g.listing // this pass has listed the runtime: with the sandbox
	if rep := fill(t, m); rep.Removed != 1 {
		t.Fatalf("drain: %+v, want one removed", rep)
	}
	close(g.proceed)
	if rep := <-done; rep.Created != 1 {
		t.Errorf("the pass that listed before the drain: %+v; want one created for the drained", rep)
	}
	ps := m.Pools()
	if len(ps) != 1 || ps[0].Ready != 1 {
		t.Fatalf("pools %+v; want one with 1 ready", ps)
	}
	if n := len(pooled(t, f)); n != 1 {
		t.Errorf("%d pooled sandboxes on the runtime, want 1", n)
	}
	// The ready one exists: a session gets it.
	if sb, err := m.Ensure(context.Background(), spec(t, "s1")); err != nil || sb.PoolName == "" {
		t.Errorf("a session: %+v, %v; want a pooled sandbox", sb, err)
	}
}

// A burst of new sessions on a process that does not fill the pools: the
// first claim finds its ready list empty and lists what the filler made;
// the others, finding the list empty while that look is under way, wait
// for it and claim too, rather than each start a sandbox cold.
func TestPoolBurstWaitsForSync(t *testing.T) {
	f := newFake()
	g := gatedClaims{Claims: claims(t), armed: new(atomic.Bool), listing: make(chan struct{}), proceed: make(chan struct{})}
	leader, _ := newManager(t, f, withClaims(g))
	other, _ := newManager(t, f, withClaims(g))
	const n = 5
	// A pass makes at most maxCreating (4): fill until none is missing.
	for i := 0; fill(t, leader, target(t, n)).Missing > 0; i++ {
		if i == n {
			t.Fatalf("the pool of %d is not full after %d passes", n, n)
		}
	}
	before := f.Creates.Load()
	g.armed.Store(true)
	ctx := context.Background()
	type got struct {
		sb  sandbox.Sandbox
		err error
	}
	out := make(chan got, n)
	ensure := func(i int) {
		sb, err := other.Ensure(ctx, spec(t, fmt.Sprintf("s%d", i)))
		out <- got{sb, err}
	}
	go ensure(0)
	<-g.listing // the first claim's look is held
	for i := 1; i < n; i++ {
		go ensure(i)
	}
	// Let the others reach their claim (a cold start would not wait).
	time.Sleep(200 * time.Millisecond)
	close(g.proceed)
	for range n {
		r := <-out
		if r.err != nil || r.sb.PoolName == "" {
			t.Errorf("a session of the burst: %+v, %v; want a claim from the pool", r.sb, r.err)
		}
	}
	if made := f.Creates.Load() - before; made != 0 {
		t.Errorf("%d sandboxes created cold during the burst; want every session claimed from the pool of %d", made, n)
	}
}
