package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

func newFake() *sandboxtest.Fake { return sandboxtest.NewFake() }

func newManager(t *testing.T, rt sandbox.Runtime, tweak ...func(*sandbox.Config)) (*sandbox.Manager, sandbox.Config) {
	t.Helper()
	cfg := sandbox.Config{Runtime: rt, Owner: "srv"}
	for _, f := range tweak {
		f(&cfg)
	}
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, cfg
}

func spec(t *testing.T, session string) sandbox.Spec {
	t.Helper()
	s, err := sandbox.NewSpec("acme", session, sandbox.WithImage("img"), sandbox.WithAgentArgs("--x"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestManagerEnsureCreatesOnceAndReuses(t *testing.T) {
	f := newFake()
	release := make(chan struct{})
	f.CreateHook = func(sandbox.Spec) error { <-release; return nil }
	m, _ := newManager(t, f)

	var wg sync.WaitGroup
	ids := make([]string, 10)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := m.Ensure(context.Background(), spec(t, "s1"))
			if err != nil {
				t.Error(err)
			}
			ids[i] = sb.ID
		}()
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := f.Creates.Load(); n != 1 {
		t.Fatalf("%d creates for 10 concurrent Ensures, want 1", n)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("ids differ: %v", ids)
		}
	}
	sb, err := m.Ensure(context.Background(), spec(t, "s1"))
	if err != nil || sb.ID != ids[0] || f.Creates.Load() != 1 {
		t.Fatalf("reuse: %+v, %v, %d creates", sb, err, f.Creates.Load())
	}
	if sb.Owner != "srv" {
		t.Errorf("sandbox: %+v", sb)
	}
}

func TestManagerCreateFailureReachesEveryWaiterAndIsRetried(t *testing.T) {
	f := newFake()
	fail := atomic.Bool{}
	fail.Store(true)
	release := make(chan struct{})
	f.CreateHook = func(sandbox.Spec) error {
		<-release
		if fail.Load() {
			return fmt.Errorf("%w: engine down", sandbox.ErrUnavailable)
		}
		return nil
	}
	m, _ := newManager(t, f)
	errs := make(chan error, 3)
	for range 3 {
		go func() { _, err := m.Ensure(context.Background(), spec(t, "s1")); errs <- err }()
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	for range 3 {
		if err := <-errs; !errors.Is(err, sandbox.ErrUnavailable) {
			t.Fatalf("waiter got %v", err)
		}
	}
	if f.HasState("acme", "s1") {
		t.Errorf("runtime state left after a failed create")
	}
	fail.Store(false)
	if _, err := m.Ensure(context.Background(), spec(t, "s1")); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

func TestManagerReadyFailureRemoves(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f, func(c *sandbox.Config) {
		c.Ready = func(ctx context.Context, sb sandbox.Sandbox) error { return errors.New("no agent") }
	})
	_, err := m.Ensure(context.Background(), spec(t, "s1"))
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "no agent") {
		t.Fatalf("Ensure: %v", err)
	}
	if f.Removes.Load() != 1 || len(m.Sandboxes()) != 0 {
		t.Errorf("removes %d, managed %v", f.Removes.Load(), m.Sandboxes())
	}
}

func TestManagerEnsureTakesOverOrReplaces(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f)
	ctx := context.Background()

	// Running, ours, host dir in place: taken over as is.
	live := spec(t, "live")
	f.Put(sandbox.Sandbox{Tenant: "acme", Session: "live", Owner: "srv", State: sandbox.StateRunning})
	sb, err := m.Ensure(ctx, live)
	if err != nil || f.Creates.Load() != 0 || sb.ID != "c1" {
		t.Fatalf("take over: %+v, %v, %d creates", sb, err, f.Creates.Load())
	}

	// Exited: replaced.
	f.Put(sandbox.Sandbox{Tenant: "acme", Session: "dead", Owner: "srv", State: sandbox.StateExited})
	sb, err = m.Ensure(ctx, spec(t, "dead"))
	if err != nil || sb.ID == "c2" || f.Creates.Load() != 1 || f.Removes.Load() != 1 {
		t.Fatalf("replace: %+v, %v", sb, err)
	}

	// Another owner's: refused.
	f.Put(sandbox.Sandbox{Tenant: "acme", Session: "theirs", Owner: "other", State: sandbox.StateRunning})
	if _, err := m.Ensure(ctx, spec(t, "theirs")); !errors.Is(err, sandbox.ErrConflict) {
		t.Fatalf("foreign: %v", err)
	}
	if err := m.Remove(ctx, "acme", "theirs"); !errors.Is(err, sandbox.ErrConflict) {
		t.Fatalf("Remove of a foreign sandbox: %v", err)
	}
}

func TestManagerEnsureRefusesBadSpecs(t *testing.T) {
	m, _ := newManager(t, newFake())
	s := spec(t, "s1")
	s.MemoryBytes = 1
	if _, err := m.Ensure(context.Background(), s); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("1 byte of memory: %v", err)
	}
	s = spec(t, "s1")
	s.Session = "../x"
	if _, err := m.Ensure(context.Background(), s); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("session ../x: %v", err)
	}
}

func TestManagerRemove(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f)
	ctx := context.Background()
	if err := m.Remove(ctx, "acme", "none"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Remove of nothing: %v", err)
	}
	sb, err := m.Ensure(ctx, spec(t, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if f.HasState("acme", sb.Session) {
		t.Errorf("runtime state of %s kept", sb.Session)
	}
	if _, err := f.Get(ctx, "acme", "s1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("runtime still has it: %v", err)
	}
}

// Remove waits for a creation in flight, then removes what it made.
func TestManagerRemoveWaitsForCreate(t *testing.T) {
	f := newFake()
	release, entered := make(chan struct{}), make(chan struct{})
	f.CreateHook = func(sandbox.Spec) error { close(entered); <-release; return nil }
	m, _ := newManager(t, f)
	ctx := context.Background()
	created := make(chan error, 1)
	go func() { _, err := m.Ensure(ctx, spec(t, "s1")); created <- err }()
	<-entered
	removed := make(chan error, 1)
	go func() { removed <- m.Remove(ctx, "acme", "s1") }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-removed:
		t.Fatalf("Remove returned during the creation: %v", err)
	default:
	}
	close(release)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	if list, _ := f.List(ctx, ""); len(list) != 0 {
		t.Errorf("left: %+v", list)
	}
}

func TestManagerReap(t *testing.T) {
	f := newFake()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	m, _ := newManager(t, f, func(c *sandbox.Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	ctx := context.Background()
	for _, s := range []string{"idle", "busy"} {
		if _, err := m.Ensure(ctx, spec(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	m.Touch("acme", "busy")
	reaped, err := m.Reap(ctx, 30*time.Minute)
	if err != nil || len(reaped) != 1 || reaped[0].Session != "idle" {
		t.Fatalf("reaped %+v, %v", reaped, err)
	}
	got := m.Sandboxes()
	if len(got) != 1 || got[0].Session != "busy" {
		t.Errorf("left %+v", got)
	}
	if m.Touch("acme", "idle") {
		t.Errorf("Touch of a reaped sandbox succeeded")
	}
}

// TestManagerReapBy: each tenant's own idle TTL; zero keeps a tenant's
// sandboxes.
func TestManagerReapBy(t *testing.T) {
	f := newFake()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	m, _ := newManager(t, f, func(c *sandbox.Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	ctx := context.Background()
	for _, tenant := range []string{"short", "long", "never"} {
		s, err := sandbox.NewSpec(tenant, "s1", sandbox.WithImage("img"), sandbox.WithAgentArgs("--x"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Ensure(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	ttl := map[string]time.Duration{"short": 30 * time.Minute, "long": 2 * time.Hour}
	reaped, err := m.ReapBy(ctx, func(tenant string) time.Duration { return ttl[tenant] })
	if err != nil || len(reaped) != 1 || reaped[0].Tenant != "short" {
		t.Fatalf("reaped %+v, %v", reaped, err)
	}
	if got := m.Sandboxes(); len(got) != 2 {
		t.Errorf("left %+v", got)
	}
}

// A reaper whose context has ended (its process stopped leading) reaps
// nothing: the sessions stay, and are reaped by a later pass.
func TestManagerReapByCancelled(t *testing.T) {
	f := newFake()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	m, _ := newManager(t, f, func(c *sandbox.Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	if _, err := m.Ensure(context.Background(), spec(t, "s1")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	ttl := func(string) time.Duration { return time.Minute }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if reaped, err := m.ReapBy(ctx, ttl); len(reaped) != 0 || err != nil {
		t.Fatalf("reaped %+v, %v with its context ended", reaped, err)
	}
	if got := m.Sandboxes(); len(got) != 1 || f.Removes.Load() != 0 {
		t.Fatalf("left %+v, %d removals; want s1 untouched", got, f.Removes.Load())
	}
	if reaped, err := m.ReapBy(context.Background(), ttl); len(reaped) != 1 || err != nil {
		t.Fatalf("the next pass reaped %+v, %v; want s1", reaped, err)
	}
}

func TestManagerAdopt(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f)
	ctx := context.Background()
	mk := func(session string, state sandbox.State, owner string) {
		f.Put(sandbox.Sandbox{Tenant: "acme", Session: session, Owner: owner, State: state})
	}
	mk("live", sandbox.StateRunning, "srv")
	mk("exited", sandbox.StateExited, "srv")
	mk("created", sandbox.StateCreated, "srv")
	mk("theirs", sandbox.StateExited, "other")
	f.Orphan("other-tenant", "orphan")

	rep, err := m.Adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Kept) != 1 || rep.Kept[0].Session != "live" {
		t.Errorf("kept %+v", rep.Kept)
	}
	if len(rep.Removed) != 2 {
		t.Errorf("removed %+v, want exited, created", rep.Removed)
	}
	if len(rep.Swept) != 1 || rep.Swept[0] != "other-tenant/orphan" {
		t.Errorf("swept %v, want the orphan", rep.Swept)
	}
	if f.HasState("acme", "exited") || f.HasState("other-tenant", "orphan") || !f.HasState("acme", "live") || !f.HasState("acme", "theirs") {
		t.Errorf("state after Adopt: exited %v orphan %v live %v theirs %v", f.HasState("acme", "exited"),
			f.HasState("other-tenant", "orphan"), f.HasState("acme", "live"), f.HasState("acme", "theirs"))
	}
	if _, err := f.Get(ctx, "acme", "theirs"); err != nil {
		t.Errorf("another owner's sandbox was removed")
	}
	sb, err := m.Ensure(ctx, spec(t, "live"))
	if err != nil || sb.ID != "c1" || f.Creates.Load() != 0 {
		t.Errorf("Ensure after Adopt: %+v, %v", sb, err)
	}
}

// With a runtime that records uses (Kubernetes), processes sharing the
// sandboxes (a release's replicas) judge idleness together: the reaping
// process keeps a session only another process serves, and reaps one only
// another process made, once idle.
func TestManagerReapRecordedUses(t *testing.T) {
	f := sandboxtest.NewRecording()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f.Now = clock
	withClock := func(c *sandbox.Config) { c.Now = clock }
	leader, _ := newManager(t, f, withClock)
	// The other process's runtime is wrapped (as the server's observers
	// wrap it): the Manager finds the recorder behind it.
	other, _ := newManager(t, wrapped{f}, withClock)
	ctx := context.Background()
	recorded := func(session string, want time.Time) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			sb, err := f.Get(ctx, "acme", session)
			if err == nil && !sb.LastUsed.Before(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: recorded use %v, %v; want %v", session, sb.LastUsed, err, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// "shared": made by the leader, then served by the other only;
	// "theirs": made and served by the other only.
	if _, err := leader.Ensure(ctx, spec(t, "shared")); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"shared", "theirs"} {
		if _, err := other.Ensure(ctx, spec(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	advance(20 * time.Minute)
	for _, s := range []string{"shared", "theirs"} {
		if _, err := other.Ensure(ctx, spec(t, s)); err != nil {
			t.Fatal(err)
		}
		recorded(s, now)
	}
	// Within UseRecordEvery of the last record, a use is not written
	// again: no API call per warm call. (Such a use spawns no record, so
	// the count cannot change behind the check.)
	n := f.Records.Load()
	advance(sandbox.DefaultUseRecordEvery / 2)
	other.Touch("acme", "theirs")
	if _, err := other.Ensure(ctx, spec(t, "shared")); err != nil {
		t.Fatal(err)
	}
	if f.Records.Load() != n {
		t.Errorf("a use within UseRecordEvery of the last record was recorded again (%d records, had %d)", f.Records.Load(), n)
	}
	advance(20*time.Minute - sandbox.DefaultUseRecordEvery/2) // 40 min after the leader's use, 20 after the other's record
	reaped, err := leader.Reap(ctx, 30*time.Minute)
	if err != nil || len(reaped) != 0 {
		t.Fatalf("reaped %+v, %v: the other process used them 20 minutes ago", reaped, err)
	}
	advance(11 * time.Minute)
	reaped, err = leader.Reap(ctx, 30*time.Minute)
	if err != nil || len(reaped) != 2 {
		t.Fatalf("reaped %+v, %v; want shared and theirs, recorded 31 minutes ago", reaped, err)
	}
	for _, s := range []string{"shared", "theirs"} {
		if _, err := f.Get(ctx, "acme", s); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("%s still on the runtime: %v", s, err)
		}
	}
	// A sandbox another process has just made is not idle, whatever this
	// process last saw of its session.
	again, err := leader.Ensure(ctx, spec(t, "again"))
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.RemoveSandbox(ctx, again); err != nil {
		t.Fatal(err)
	}
	advance(time.Hour)
	if _, err := other.Ensure(ctx, spec(t, "again")); err != nil {
		t.Fatal(err)
	}
	if reaped, err := leader.Reap(ctx, 30*time.Minute); err != nil || len(reaped) != 0 {
		t.Errorf("reaped %+v, %v: made a moment ago by the other process", reaped, err)
	}
}

// wrapped is a runtime wrapper that passes nothing but Unwrap through.
type wrapped struct{ sandbox.Runtime }

func (w wrapped) Unwrap() sandbox.Runtime { return w.Runtime }

// A call whose own deadline ends while its session's sandbox is still
// being created gets an error that says so (not a bare "context deadline
// exceeded"); the creation goes on, and the next call gets the sandbox.
func TestManagerEnsureDeadlineWhileCreating(t *testing.T) {
	f := newFake()
	release := make(chan struct{})
	f.CreateHook = func(sandbox.Spec) error { <-release; return nil }
	m, _ := newManager(t, f)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := m.Ensure(ctx, spec(t, "s1"))
	if !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "the sandbox of acme/s1 is still being created after ") ||
		!strings.Contains(err.Error(), "a later call finds it once it is ready") {
		t.Fatalf("Ensure past its deadline: %v", err)
	}
	close(release)
	sb, err := m.Ensure(context.Background(), spec(t, "s1"))
	if err != nil || sb.ID == "" {
		t.Fatalf("the next call: %+v, %v", sb, err)
	}
	if n := f.Creates.Load(); n != 1 {
		t.Fatalf("%d creates, want the one that went on", n)
	}
}

// On one host another process of the same owner (`shellbox cp` beside
// `serve`) may create a session's sandbox between this Manager's Inspect,
// which found none, and its Ensure: Ensure looks again and takes that
// sandbox, rather than failing on its name or making a second one.
func TestEnsureAfterInspectOneHost(t *testing.T) {
	f := newFake()
	for _, pooled := range []bool{false, true} {
		var tweak []func(*sandbox.Config)
		if pooled {
			tweak = append(tweak, withClaims(claims(t)))
		}
		a, _ := newManager(t, f, tweak...)
		b, _ := newManager(t, f, tweak...)
		if pooled {
			fill(t, a, target(t, 1))
		}
		ctx := context.Background()
		s := fmt.Sprintf("s-%v", pooled)
		if _, err := a.Inspect(ctx, "acme", s); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("Inspect: %v, want ErrNotFound", err)
		}
		other, err := b.Ensure(ctx, spec(t, s))
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Ensure(ctx, spec(t, s))
		if err != nil || got.ID != other.ID {
			t.Fatalf("pool %v: Ensure after Inspect: %+v, %v; want the other process's sandbox %s", pooled, got, err, other.ID)
		}
	}
}

// TestManagerReapSparesBusy: a session idle for its TTL whose sandbox says
// it is busy (Config.Busy: a background task, a long call) is kept, with
// its sandbox as it was, and its idle time starts again when it stops
// being busy; a Busy that fails reaps it as idle. The same holds for a
// sandbox only another process serves (recorded uses).
func TestManagerReapSparesBusy(t *testing.T) {
	f := sandboxtest.NewRecording()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f.Now = clock
	busy := map[string]string{}
	asked := map[string]int{}
	withBusy := func(c *sandbox.Config) {
		c.Now = clock
		c.Busy = func(ctx context.Context, sb sandbox.Sandbox) (string, error) {
			if _, ok := ctx.Deadline(); !ok {
				t.Errorf("Busy of %s asked without a deadline", sb.Session)
			}
			mu.Lock()
			defer mu.Unlock()
			asked[sb.Session]++
			if busy[sb.Session] == "fails" {
				return "", errors.New("the agent does not answer")
			}
			return busy[sb.Session], nil
		}
	}
	m, _ := newManager(t, f, withBusy)
	other, _ := newManager(t, wrapped{f}, withBusy)
	ctx := context.Background()
	var ids = map[string]string{}
	for _, s := range []string{"task", "idle", "dead"} {
		sb, err := m.Ensure(ctx, spec(t, s))
		if err != nil {
			t.Fatal(err)
		}
		ids[s] = sb.ID
	}
	if _, err := other.Ensure(ctx, spec(t, "theirs")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	busy["task"], busy["theirs"], busy["dead"] = "1 command(s) running", "1 egress connection(s) open", "fails"
	mu.Unlock()

	advance(10 * time.Minute)
	if reaped, err := m.Reap(ctx, 30*time.Minute); err != nil || len(reaped) != 0 || len(asked) != 0 {
		t.Fatalf("before the TTL: reaped %+v, %v; asked %v (Busy is for idle sessions only)", reaped, err, asked)
	}
	advance(30 * time.Minute)
	reaped, err := m.Reap(ctx, 30*time.Minute)
	var names []string
	for _, sb := range reaped {
		names = append(names, sb.Session)
	}
	slices.Sort(names)
	if err != nil || !slices.Equal(names, []string{"dead", "idle"}) {
		t.Fatalf("reaped %v, %v; want dead and idle", names, err)
	}
	// The busy sandbox is kept as it was: the same sandbox, used now, and
	// Touch (a sandbox the Manager knows ready) still works.
	if sb, err := m.Ensure(ctx, spec(t, "task")); err != nil || sb.ID != ids["task"] {
		t.Fatalf("after the reap: %+v, %v; want the same sandbox %s", sb, err, ids["task"])
	}
	// The other process's sandbox stays, its use recorded (in the
	// background) as of this reap.
	keptAt := clock()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sb, err := f.Get(ctx, "acme", "theirs")
		if err != nil {
			t.Fatalf("the other process's busy sandbox: %v", err)
		}
		if !sb.LastUsed.Before(keptAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other process's busy sandbox: use recorded %v, want %v", sb.LastUsed, keptAt)
		}
	}

	// Its work ends: the idle time counts from the last time it was found
	// busy, not from its last call.
	mu.Lock()
	busy["task"], busy["theirs"] = "", ""
	mu.Unlock()
	advance(20 * time.Minute)
	if reaped, err := m.Reap(ctx, 30*time.Minute); err != nil || len(reaped) != 0 {
		t.Fatalf("20 minutes after the work ended: reaped %+v, %v", reaped, err)
	}
	advance(11 * time.Minute)
	reaped, err = m.Reap(ctx, 30*time.Minute)
	names = names[:0]
	for _, sb := range reaped {
		names = append(names, sb.Session)
	}
	slices.Sort(names)
	if err != nil || !slices.Equal(names, []string{"task", "theirs"}) {
		t.Fatalf("31 minutes after: reaped %v, %v; want task and theirs", names, err)
	}
}

// The reaper leaves a sandbox another process is still creating (not
// started, younger than a creation may take) even when its age passes the
// idle TTL (a replica's cold start under load outlasting a short TTL), and
// reaps one left "created" for longer than a creation may take.
func TestManagerReapSparesCreating(t *testing.T) {
	f := sandboxtest.NewRecording()
	now := time.Unix(10000, 0)
	clock := func() time.Time { return now }
	f.Now = clock
	m, cfg := newManager(t, f, func(c *sandbox.Config) { c.Now = clock; c.CreateTimeout = 2 * time.Minute })
	young := f.Put(sandbox.Sandbox{Tenant: "acme", Session: "young", Owner: cfg.Owner, State: sandbox.StateCreated, Created: now.Add(-30 * time.Second)})
	old := f.Put(sandbox.Sandbox{Tenant: "acme", Session: "old", Owner: cfg.Owner, State: sandbox.StateCreated, Created: now.Add(-3 * time.Minute)})
	reaped, err := m.Reap(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(reaped) != 1 || reaped[0].ID != old.ID {
		t.Fatalf("reaped %+v, want only %s (created 3 min ago, never started)", reaped, old.ID)
	}
	if _, err := f.Get(context.Background(), "acme", "young"); err != nil {
		t.Fatalf("the sandbox being created (%s) was reaped: %v", young.ID, err)
	}
	// Once it runs, it is judged by its uses like any other.
	young.State = sandbox.StateRunning
	young = f.Put(young)
	reaped, err = m.Reap(context.Background(), 10*time.Second)
	if err != nil || len(reaped) != 1 || reaped[0].Session != "young" {
		t.Fatalf("reaped %+v, %v; want young's sandbox, running and idle", reaped, err)
	}
}
