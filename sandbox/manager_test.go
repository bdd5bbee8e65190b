package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// fakeRuntime is an in-memory sandbox.Runtime, for the Manager's logic; the
// Docker backend's tests run the same lifecycle against a real engine.
type fakeRuntime struct {
	mu      sync.Mutex
	byKey   map[string]sandbox.Sandbox
	creates atomic.Int32
	removes atomic.Int32
	// createHook, if set, runs inside Create before the sandbox exists.
	createHook func(spec sandbox.Spec) error
	n          int
}

func newFake() *fakeRuntime { return &fakeRuntime{byKey: map[string]sandbox.Sandbox{}} }

func (f *fakeRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return sandbox.Sandbox{}, err
	}
	if _, err := os.Stat(spec.HostDir); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("host dir not prepared: %w", err)
	}
	f.creates.Add(1)
	if f.createHook != nil {
		if err := f.createHook(spec); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := spec.Tenant + "/" + spec.Session
	if _, ok := f.byKey[k]; ok {
		return sandbox.Sandbox{}, sandbox.ErrAlreadyExists
	}
	f.n++
	sb := sandbox.Sandbox{
		ID: fmt.Sprintf("c%d", f.n), Tenant: spec.Tenant, Session: spec.Session, Owner: spec.Owner,
		Runtime: spec.Runtime, Image: spec.Image, HostDir: spec.HostDir, SocketPath: sandbox.SocketPath(spec.HostDir),
		State: sandbox.StateRunning, Created: time.Now(),
	}
	f.byKey[k] = sb
	return sb, nil
}

func (f *fakeRuntime) Get(ctx context.Context, tenant, session string) (sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.byKey[tenant+"/"+session]
	if !ok {
		return sandbox.Sandbox{}, sandbox.ErrNotFound
	}
	return sb, nil
}

func (f *fakeRuntime) List(ctx context.Context, owner string) ([]sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Sandbox
	for _, sb := range f.byKey {
		if owner == "" || sb.Owner == owner {
			out = append(out, sb)
		}
	}
	return out, nil
}

func (f *fakeRuntime) Remove(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, sb := range f.byKey {
		if sb.ID == id {
			delete(f.byKey, k)
			f.removes.Add(1)
		}
	}
	return nil
}

// put plants a sandbox as if an earlier server had created it.
func (f *fakeRuntime) put(sb sandbox.Sandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	sb.ID = fmt.Sprintf("c%d", f.n)
	sb.SocketPath = sandbox.SocketPath(sb.HostDir)
	f.byKey[sb.Tenant+"/"+sb.Session] = sb
}

var _ sandbox.Runtime = (*fakeRuntime)(nil)

func newManager(t *testing.T, rt sandbox.Runtime, tweak ...func(*sandbox.Config)) (*sandbox.Manager, sandbox.Config) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := sandbox.Config{Runtime: rt, StateDir: dir, Owner: "srv", SpillQuota: sandbox.SpillQuotaAgent}
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
	s, err := sandbox.NewSpec("acme", session, sandbox.WithImage("img"), sandbox.WithAgent("/bin/true"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestManagerEnsureCreatesOnceAndReuses(t *testing.T) {
	f := newFake()
	release := make(chan struct{})
	f.createHook = func(sandbox.Spec) error { <-release; return nil }
	m, cfg := newManager(t, f)

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
	if n := f.creates.Load(); n != 1 {
		t.Fatalf("%d creates for 10 concurrent Ensures, want 1", n)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("ids differ: %v", ids)
		}
	}
	sb, err := m.Ensure(context.Background(), spec(t, "s1"))
	if err != nil || sb.ID != ids[0] || f.creates.Load() != 1 {
		t.Fatalf("reuse: %+v, %v, %d creates", sb, err, f.creates.Load())
	}
	if sb.HostDir != filepath.Join(cfg.StateDir, "sessions", "acme", "s1") || sb.Owner != "srv" {
		t.Errorf("sandbox: %+v", sb)
	}
	for _, d := range []string{sb.HostDir, filepath.Join(sb.HostDir, "spill")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v", d, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(cfg.StateDir, "sessions")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("sessions dir: %v %v, want 0700", fi.Mode(), err)
	}
}

func TestManagerCreateFailureReachesEveryWaiterAndIsRetried(t *testing.T) {
	f := newFake()
	fail := atomic.Bool{}
	fail.Store(true)
	release := make(chan struct{})
	f.createHook = func(sandbox.Spec) error {
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
	if _, err := os.Stat(m.HostDir("acme", "s1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host dir left after a failed create: %v", err)
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
	if f.removes.Load() != 1 || len(m.Sandboxes()) != 0 {
		t.Errorf("removes %d, managed %v", f.removes.Load(), m.Sandboxes())
	}
}

func TestManagerEnsureTakesOverOrReplaces(t *testing.T) {
	f := newFake()
	m, _ := newManager(t, f)
	ctx := context.Background()

	// Running, ours, host dir in place: taken over as is.
	live := spec(t, "live")
	if err := os.MkdirAll(m.HostDir("acme", "live"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.put(sandbox.Sandbox{Tenant: "acme", Session: "live", Owner: "srv", State: sandbox.StateRunning, HostDir: m.HostDir("acme", "live")})
	sb, err := m.Ensure(ctx, live)
	if err != nil || f.creates.Load() != 0 || sb.ID != "c1" {
		t.Fatalf("take over: %+v, %v, %d creates", sb, err, f.creates.Load())
	}

	// Exited: replaced.
	f.put(sandbox.Sandbox{Tenant: "acme", Session: "dead", Owner: "srv", State: sandbox.StateExited, HostDir: m.HostDir("acme", "dead")})
	sb, err = m.Ensure(ctx, spec(t, "dead"))
	if err != nil || sb.ID == "c2" || f.creates.Load() != 1 || f.removes.Load() != 1 {
		t.Fatalf("replace: %+v, %v", sb, err)
	}

	// Another owner's: refused.
	f.put(sandbox.Sandbox{Tenant: "acme", Session: "theirs", Owner: "other", State: sandbox.StateRunning})
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
	s.HostDir = "/elsewhere"
	if _, err := m.Ensure(context.Background(), s); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("foreign host dir: %v", err)
	}
	long, err := sandbox.NewManager(sandbox.Config{Runtime: newFake(), Owner: "o", StateDir: "/" + strings.Repeat("x", 60)})
	if err != nil {
		t.Fatal(err)
	}
	s, _ = sandbox.NewSpec("acme", strings.Repeat("s", 40), sandbox.WithImage("i"), sandbox.WithAgent("/a"))
	if _, err := long.Ensure(context.Background(), s); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "socket path") {
		t.Errorf("long socket path: %v", err)
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
	if _, err := os.Stat(sb.HostDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host dir: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(sb.HostDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty tenant dir kept: %v", err)
	}
	if _, err := f.Get(ctx, "acme", "s1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("runtime still has it: %v", err)
	}
}

// Remove waits for a creation in flight, then removes what it made.
func TestManagerRemoveWaitsForCreate(t *testing.T) {
	f := newFake()
	release, entered := make(chan struct{}), make(chan struct{})
	f.createHook = func(sandbox.Spec) error { close(entered); <-release; return nil }
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
		s, err := sandbox.NewSpec(tenant, "s1", sandbox.WithImage("img"), sandbox.WithAgent("/bin/true"))
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

func TestManagerAdopt(t *testing.T) {
	f := newFake()
	m, cfg := newManager(t, f)
	ctx := context.Background()
	mk := func(session string, state sandbox.State, owner string, dir bool) {
		hd := m.HostDir("acme", session)
		if dir {
			if err := os.MkdirAll(filepath.Join(hd, "spill"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		f.put(sandbox.Sandbox{Tenant: "acme", Session: session, Owner: owner, State: state, HostDir: hd})
	}
	mk("live", sandbox.StateRunning, "srv", true)
	mk("exited", sandbox.StateExited, "srv", true)
	mk("created", sandbox.StateCreated, "srv", false)
	mk("nodir", sandbox.StateRunning, "srv", false)
	mk("theirs", sandbox.StateExited, "other", false)
	orphan := m.HostDir("other-tenant", "orphan")
	if err := os.MkdirAll(orphan, 0o755); err != nil {
		t.Fatal(err)
	}

	rep, err := m.Adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Kept) != 1 || rep.Kept[0].Session != "live" {
		t.Errorf("kept %+v", rep.Kept)
	}
	if len(rep.Removed) != 3 {
		t.Errorf("removed %+v, want exited, created, nodir", rep.Removed)
	}
	if len(rep.RemovedDirs) != 2 {
		t.Errorf("removed dirs %v, want exited's and the orphan", rep.RemovedDirs)
	}
	for _, d := range []string{orphan, m.HostDir("acme", "exited"), filepath.Join(cfg.StateDir, "sessions", "other-tenant")} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s kept: %v", d, err)
		}
	}
	if _, err := f.Get(ctx, "acme", "theirs"); err != nil {
		t.Errorf("another owner's sandbox was removed")
	}
	sb, err := m.Ensure(ctx, spec(t, "live"))
	if err != nil || sb.ID != "c1" || f.creates.Load() != 0 {
		t.Errorf("Ensure after Adopt: %+v, %v", sb, err)
	}
}
