package session

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
	"github.com/shellbox/shellbox/server"
)

// leaderObserver records what the Service says of its leadership.
type leaderObserver struct {
	nopObserver
	mu   sync.Mutex
	seen []bool
}

func (o *leaderObserver) ObserveLeader(leading bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, leading)
}

func (o *leaderObserver) changes() []bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seen)
}

// term is one leadership granted by a fakeLeader.
type term struct {
	ctx context.Context
	// done is closed when the Service's lead has returned.
	done chan struct{}
}

// fakeLeader grants leadership when the test sends a term, for as long as
// the term's context and Run's live.
type fakeLeader struct {
	terms chan term
	ended chan struct{} // closed when Run returns
}

func (f *fakeLeader) Run(ctx context.Context, lead func(context.Context)) {
	defer close(f.ended)
	for {
		select {
		case <-ctx.Done():
			return
		case tm := <-f.terms:
			lctx, cancel := context.WithCancel(tm.ctx)
			stop := context.AfterFunc(ctx, cancel)
			lead(lctx)
			stop()
			cancel()
			close(tm.done)
		}
	}
}

// leaderLayer is a Service over the in-memory runtime whose tenant acme has
// a warm pool of 2 and an idle TTL of 1ms (reaped at the next reap, every
// second), started with leader (nil: none).
func leaderLayer(t *testing.T, leader Leader, obs server.Metrics) (*Service, *sandboxtest.Fake) {
	t.Helper()
	e, _ := acmePolicy(t, "sandbox:\n  pool: {size: 2}\nlimits:\n  idleTTL: 1ms\n")
	claims, err := sandbox.NewDirClaims(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := sandboxtest.NewFake()
	l, err := New(Config{Runtime: f, Owner: "srv", Defaults: DefaultsFor("img:default"), Policies: e, Claims: claims,
		PoolInterval: 10 * time.Millisecond, IdleTTL: time.Millisecond, Leader: leader, Metrics: obs,
		Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l, f
}

// eventually fails the test unless cond holds within 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
	}
}

func poolReady(l *Service, n int) func() bool {
	return func() bool {
		ps := l.manager.Pools()
		return len(ps) == 1 && ps[0].Ready == n && ps[0].Creating == 0
	}
}

func noSessions(t *testing.T, l *Service) func() bool {
	return func() bool {
		list, err := l.Sessions(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		return len(list) == 0
	}
}

// Without a Leader (one host) the Service reaps idle sandboxes and keeps the
// warm pools from Start on, as it always did.
func TestLoopsWithoutLeader(t *testing.T) {
	obs := &leaderObserver{}
	l, f := leaderLayer(t, nil, obs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.Start(ctx)
	eventually(t, "the pool filled", poolReady(l, 2))
	if _, err := l.CreateSession(ctx, "acme", "s1", server.SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool refilled after the claim", func() bool { return f.Creates.Load() == 3 && poolReady(l, 2)() })
	eventually(t, "the idle session reaped", noSessions(t, l))
	if got := obs.changes(); !slices.Equal(got, []bool{true}) {
		t.Errorf("leadership observed: %v, want [true]", got)
	}
	// Close stops both loops and waits for them.
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := l.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if got := obs.changes(); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("leadership observed after Close: %v, want [true false]", got)
	}
}

// With a Leader the loops run only while it grants leadership: revoked,
// both stop at once (lead returns) and neither fills a pool nor reaps;
// granted again, both run again.
func TestLeaderGrantsAndRevokes(t *testing.T) {
	obs := &leaderObserver{}
	leader := &fakeLeader{terms: make(chan term), ended: make(chan struct{})}
	l, f := leaderLayer(t, leader, obs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.Start(ctx)

	grant := func() (term, context.CancelFunc) {
		tctx, revoke := context.WithCancel(ctx)
		tm := term{ctx: tctx, done: make(chan struct{})}
		leader.terms <- tm // Run is waiting for it
		return tm, revoke
	}
	revoke := func(tm term, stop context.CancelFunc) {
		stop()
		select {
		case <-tm.done:
		case <-time.After(10 * time.Second):
			t.Fatal("lead did not return within 10s of losing the leadership")
		}
	}

	time.Sleep(100 * time.Millisecond) // ten pool intervals
	if n := f.Creates.Load(); n != 0 {
		t.Fatalf("%d sandboxes created before leading", n)
	}
	tm, stop := grant()
	eventually(t, "the pool filled", poolReady(l, 2))
	revoke(tm, stop)
	if got := obs.changes(); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("leadership observed: %v, want [true false]", got)
	}

	// Not leading: a claim is not refilled, an idle session not reaped.
	if _, err := l.CreateSession(ctx, "acme", "s1", server.SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // two reaps, 250 pool intervals
	if n := f.Creates.Load(); n != 2 {
		t.Errorf("%d sandboxes created, want the pool's 2: the pool was refilled while not leading", n)
	}
	if noSessions(t, l)() {
		t.Error("the idle session was reaped while not leading")
	}

	// Leading again: both loops resume.
	tm, stop = grant()
	eventually(t, "the pool refilled", poolReady(l, 2))
	eventually(t, "the idle session reaped", noSessions(t, l))
	revoke(tm, stop)
	if got := obs.changes(); !slices.Equal(got, []bool{true, false, true, false}) {
		t.Errorf("leadership observed: %v, want [true false true false]", got)
	}

	// Close ends the leadership too (a Lease is released), and waits for
	// the Leader to return.
	tm, stop = grant()
	defer stop()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := l.Close(cctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tm.done:
	default:
		t.Error("Close returned while lead ran")
	}
	select {
	case <-leader.ended:
	default:
		t.Error("Close returned while the Leader ran")
	}
}
