package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/tools"
)

// newFakeLayer is a Service over the in-memory runtime: sandboxes are
// records, so everything but running commands can be tested.
func newFakeLayer(t *testing.T, pol *policies.Engine, choices map[string]Choices) (*Service, *sandboxtest.Fake) {
	t.Helper()
	f := sandboxtest.NewFake()
	l, err := New(Config{Runtime: f, Owner: "srv", Defaults: DefaultsFor("img:default"), Choices: choices, Policies: pol,
		Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l, f
}

func TestSpecWithoutPolicy(t *testing.T) {
	l, _ := newFakeLayer(t, nil, map[string]Choices{"acme": {Images: []string{"img:a", "img:b"}, Runtimes: []string{"runc", "runsc"}}})
	ctx := context.Background()
	spec, err := l.spec(ctx, "acme", "s1")
	if err != nil || spec.Image != "img:a" || spec.Runtime != "runc" || spec.MemoryBytes != sandbox.DefaultSpec("a", "b").MemoryBytes {
		t.Fatalf("default spec: %+v, %v", spec, err)
	}
	if spec, err := l.spec(ctx, "other", "s1"); err != nil || spec.Image != "img:default" {
		t.Fatalf("a tenant without choices: %+v, %v", spec, err)
	}
	for _, c := range []struct {
		opts server.SessionOptions
		want string
	}{
		{server.SessionOptions{Image: "python:3"}, `image "python:3" is not allowed for tenant acme (allowed: [img:a img:b])`},
		{server.SessionOptions{Runtime: "kata"}, `runtime "kata" is not allowed for tenant acme`},
		{server.SessionOptions{Mounts: []server.Mount{{Source: "/srv"}}}, "mounts need an allowlist"},
	} {
		_, err := l.CreateSession(ctx, "acme", "s2", c.opts)
		if !errors.Is(err, server.ErrNotAllowed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrNotAllowed with %q", c.opts, err, c.want)
		}
	}
	// A refused creation leaves the session's options as they were.
	if spec, err := l.spec(ctx, "acme", "s2"); err != nil || spec.Image != "img:a" {
		t.Errorf("after refusals: %+v, %v", spec, err)
	}
	info, err := l.CreateSession(ctx, "acme", "s2", server.SessionOptions{Image: "img:b", Runtime: "runsc"})
	if err != nil || info.Image != "img:b" || info.Runtime != "runsc" || info.State != "running" {
		t.Fatalf("create: %+v, %v", info, err)
	}
}

func TestSessionsListAndDelete(t *testing.T) {
	l, f := newFakeLayer(t, nil, nil)
	ctx := context.Background()
	for _, s := range []string{"b", "a"} {
		if _, err := l.CreateSession(ctx, "acme", s, server.SessionOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.CreateSession(ctx, "beta", "x", server.SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another owner's sandbox is never listed.
	f.Put(sandbox.Sandbox{Tenant: "acme", Session: "theirs", Owner: "other", State: sandbox.StateRunning})
	list, err := l.Sessions(ctx, "acme")
	if err != nil || len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" {
		t.Fatalf("acme's sessions: %+v, %v", list, err)
	}
	if err := l.DeleteSession(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteSession(ctx, "acme", "a"); !errors.Is(err, server.ErrNoSuchSession) {
		t.Errorf("second delete: %v, want ErrNoSuchSession", err)
	}
	if err := l.DeleteSession(ctx, "acme", "../x"); err == nil {
		t.Errorf("a bad session id was accepted")
	}
	if list, _ := l.Sessions(ctx, "acme"); len(list) != 1 || list[0].ID != "b" {
		t.Errorf("after delete: %+v", list)
	}
}

// Deleting a session (sessions rm, REST DELETE) ends it: its workspace
// goes, also when its sandbox had already gone behind shellbox's back; and
// so in a server, whose observer wraps the runtime.
func TestDeleteSessionRemovesTheWorkspace(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		l, f := newFakeLayer(t, nil, nil)
		deleteRemovesWorkspace(t, l, f)
	})
	t.Run("observed", func(t *testing.T) {
		f := sandboxtest.NewFake()
		l, err := New(Config{Runtime: f, Owner: "srv", Defaults: DefaultsFor("img:default"), Notifier: nopObserver{}, Metrics: nopObserver{},
			Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(context.Background()) })
		deleteRemovesWorkspace(t, l, f)
	})
}

// nopObserver hears nothing.
type nopObserver struct{}

func (nopObserver) Notify(string, string, tools.Notice)           {}
func (nopObserver) ObserveGate(_ string, g tools.Gate) tools.Gate { return g }
func (nopObserver) ObserveSandboxCreate(string, time.Duration)    {}
func (nopObserver) ObserveEgress(string, string)                  {}
func (nopObserver) ObserveLeader(bool)                            {}
func (nopObserver) Reported(string, string, string)               {}
func (nopObserver) HandOver(string, string)                       {}

func deleteRemovesWorkspace(t *testing.T, l *Service, f *sandboxtest.Fake) {
	ctx := context.Background()
	for _, s := range []string{"a", "gone"} {
		if _, err := l.CreateSession(ctx, "acme", s, server.SessionOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.DeleteSession(ctx, "acme", "a"); err != nil || f.HasWorkspace("acme", "a") {
		t.Errorf("delete: %v, workspace kept %v", err, f.HasWorkspace("acme", "a"))
	}
	f.Vanish("acme", "gone")
	if err := l.DeleteSession(ctx, "acme", "gone"); err != nil || f.HasWorkspace("acme", "gone") {
		t.Errorf("delete of a session whose sandbox vanished: %v, workspace kept %v", err, f.HasWorkspace("acme", "gone"))
	}
	if err := l.DeleteSession(ctx, "acme", "gone"); !errors.Is(err, server.ErrNoSuchSession) {
		t.Errorf("second delete: %v, want ErrNoSuchSession", err)
	}
}

func TestPolicySettingsAndQuota(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(`
sandbox:
  images: [img:p]
  runtime: runsc
  memory: 2GiB
  user: {uid: 1234, gid: 1234}
limits:
  sessions: 2
`), 0o644)
	e, err := policies.Open(dir, policies.Options{NoWatch: true, NoApprover: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	l, _ := newFakeLayer(t, e, nil)
	ctx := context.Background()
	spec, err := l.spec(ctx, "acme", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if spec.Image != "img:p" || spec.Runtime != "runsc" || spec.MemoryBytes != 2<<30 || spec.UID != 1234 ||
		strings.Join(spec.AgentArgs, " ") != "--uid 1234 --gid 1234" {
		t.Errorf("policy spec: %+v", spec)
	}
	if _, err := l.CreateSession(ctx, "acme", "s1", server.SessionOptions{Runtime: "runc"}); !errors.Is(err, server.ErrNotAllowed) ||
		!strings.Contains(err.Error(), "runtime runc is not allowed by policy acme (sandbox.runtime: runsc)") {
		t.Errorf("runtime outside the policy: %v", err)
	}
	for _, s := range []string{"s1", "s2"} {
		if _, err := l.CreateSession(ctx, "acme", s, server.SessionOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.CreateSession(ctx, "acme", "s3", server.SessionOptions{}); !errors.Is(err, server.ErrNotAllowed) ||
		!strings.Contains(err.Error(), "session limit reached: limits.sessions = 2") {
		t.Errorf("third session: %v", err)
	}
	// An existing session is not a new one.
	if _, err := l.CreateSession(ctx, "acme", "s2", server.SessionOptions{}); err != nil {
		t.Errorf("existing session at the quota: %v", err)
	}
}

func TestUnavailableAndLocal(t *testing.T) {
	f := sandboxtest.NewFake()
	l, err := New(Config{Runtime: f, Owner: "srv", Defaults: DefaultsFor("img"),
		Unavailable: errors.New("the shellbox-agent binary was not found")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreateSession(context.Background(), "acme", "s1", server.SessionOptions{}); !errors.Is(err, server.ErrUnavailable) ||
		!strings.Contains(err.Error(), "shellbox-agent binary was not found") {
		t.Errorf("no agent: %v", err)
	}
	loc, err := New(Config{Local: LocalConfig{Root: t.TempDir(), SpillDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close(context.Background())
	if loc.Sandboxed() {
		t.Fatal("a layer without a runtime is sandboxed")
	}
	if _, err := loc.CreateSession(context.Background(), "acme", "s1", server.SessionOptions{Image: "x"}); !errors.Is(err, server.ErrNotAllowed) {
		t.Errorf("local with an image: %v", err)
	}
	if _, err := New(Config{Egress: EgressConfig{Blocked: []string{"10.0.0.0/33"}}}); err == nil || !strings.Contains(err.Error(), "10.0.0.0/33") {
		t.Errorf("bad egress range: %v", err)
	}
}

// A tenant's broken policy file is a warning, not unreadiness: every
// replica reads the same files, so a 503 would take the whole service down
// for one tenant's typo, while the other tenants (and that one, on its
// last good policy) can be served.
func TestBrokenPolicyIsAWarning(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte("default: allow\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("defualt: allow\n"), 0o644)
	e, err := policies.Open(dir, policies.Options{NoWatch: true, NoApprover: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, _ := newFakeLayer(t, e, nil)
	if err := l.Ready(context.Background()); err != nil {
		t.Fatalf("Ready with one tenant's policy broken: %v", err)
	}
	w := l.Warnings()
	if len(w) != 1 || w[0].Tenant != "bad" || !strings.Contains(w[0].Text, "tenant bad: no policy in force") || !strings.Contains(w[0].Text, "bad.yaml:1: defualt: unknown key") {
		t.Fatalf("Warnings = %+v", w)
	}
	if _, err := l.CreateSession(context.Background(), "acme", "s1", server.SessionOptions{}); err != nil {
		t.Fatalf("the other tenant is not served: %v", err)
	}
	if _, err := l.CreateSession(context.Background(), "bad", "s1", server.SessionOptions{}); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Fatalf("the broken tenant: %v", err)
	}
}

// listingRuntime answers the first Get of session only once a List has
// begun.
type listingRuntime struct {
	*sandboxtest.Fake
	session string
	listed  chan struct{}
	once    sync.Once
	gated   atomic.Bool
}

func (r *listingRuntime) List(ctx context.Context, owner string) ([]sandbox.Sandbox, error) {
	r.once.Do(func() { close(r.listed) })
	return r.Fake.List(ctx, owner)
}

func (r *listingRuntime) Get(ctx context.Context, tenant, session string) (sandbox.Sandbox, error) {
	if session == r.session && r.gated.CompareAndSwap(false, true) {
		select {
		case <-r.listed:
		case <-time.After(5 * time.Second):
			return sandbox.Sandbox{}, errors.New("the session's settings were read before its tenant's sandboxes were listed")
		}
	}
	return r.Fake.Get(ctx, tenant, session)
}

// A new session's spec lists the tenant's sandboxes (its session quota)
// while it reads the session's settings, not after (on Kubernetes each is
// API round trips).
func TestSpecListsWhileReading(t *testing.T) {
	e, _ := acmePolicy(t, "version: 1\ndefault: allow\nlimits:\n  sessions: 4\n")
	rt := &listingRuntime{Fake: sandboxtest.NewFake(), session: "s1", listed: make(chan struct{})}
	l, err := New(Config{Runtime: rt, Owner: "srv", Defaults: DefaultsFor("img:default"), Policies: e,
		Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	if _, err := l.spec(context.Background(), "acme", "s1"); err != nil {
		t.Fatal(err)
	}
}
