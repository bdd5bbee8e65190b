package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

const poolA = sandbox.PoolPrefix + "0123456789abcdef-0000000a"

func TestDirClaimsOneWinner(t *testing.T) {
	c := claims(t)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Claim(context.Background(), "acme", poolA, "s"+string(rune('a'+i%26))+string(rune('a'+i/26)))
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, sandbox.ErrAlreadyExists):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d claims of one pooled sandbox succeeded, want 1", n)
	}
	cs, err := c.List(context.Background())
	if err != nil || len(cs) != 1 || cs[0].Pooled != poolA {
		t.Fatalf("List: %+v, %v", cs, err)
	}
	// Claiming again for the holder is not an error (a retry).
	if _, err := c.Claim(context.Background(), "acme", poolA, cs[0].Session); err != nil {
		t.Fatal(err)
	}
	got, err := c.Lookup(context.Background(), "acme", cs[0].Session)
	if err != nil || got != poolA {
		t.Fatalf("Lookup: %q, %v", got, err)
	}
	if _, err := c.Lookup(context.Background(), "acme", "nobody"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Lookup of an unclaimed session: %v", err)
	}
	if err := c.Release(context.Background(), "acme", poolA); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(context.Background(), "acme", poolA); err != nil {
		t.Fatalf("releasing twice: %v", err)
	}
	if cs, _ := c.List(context.Background()); len(cs) != 0 {
		t.Fatalf("after Release: %+v", cs)
	}
}

func TestDirClaimsRefusesBadNames(t *testing.T) {
	c := claims(t)
	for _, tc := range []struct{ tenant, pooled, session string }{
		{"../x", poolA, "s"},
		{"acme", "s1", "s"},            // not a pooled name
		{"acme", poolA + "/../x", "s"}, // not an id
		{"acme", poolA, poolA},         // a pooled name as a session
		{"acme", poolA, "a/b"},         // not an id
	} {
		if _, err := c.Claim(context.Background(), tc.tenant, tc.pooled, tc.session); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Claim(%q, %q, %q): %v, want ErrInvalid", tc.tenant, tc.pooled, tc.session, err)
		}
	}
}

// A crash mid-claim leaves at most a temporary file, which is no claim.
func TestDirClaimsIgnoresLeftovers(t *testing.T) {
	dir := t.TempDir()
	c, err := sandbox.NewDirClaims(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "acme"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "acme", ".claim-0011"), []byte("s1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "acme", poolA)); err != nil {
		t.Fatal(err)
	}
	cs, err := c.List(context.Background())
	if err != nil || len(cs) != 0 {
		t.Fatalf("List: %+v, %v; want no claims", cs, err)
	}
}

// A crash between a claim and its index leaves a claim Lookup cannot see
// until it is claimed again for its session (Adopt does); an index whose
// claim is gone or another's is not believed.
func TestDirClaimsIndex(t *testing.T) {
	dir := t.TempDir()
	c, err := sandbox.NewDirClaims(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(dir, "acme"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "acme", poolA), []byte("s1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cs, err := c.List(ctx); err != nil || len(cs) != 1 || cs[0].Session != "s1" {
		t.Fatalf("List: %+v, %v", cs, err)
	}
	if _, err := c.Lookup(ctx, "acme", "s1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Lookup without an index: %v", err)
	}
	if _, err := c.Claim(ctx, "acme", poolA, "s1"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Lookup(ctx, "acme", "s1"); err != nil || got != poolA {
		t.Fatalf("Lookup after re-claiming: %q, %v", got, err)
	}
	// An index pointing to another session's claim.
	if err := os.Symlink(poolA, filepath.Join(dir, "acme", "s2")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, "acme", "s2"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Lookup through another's claim: %v", err)
	}
	if err := c.Release(ctx, "acme", poolA); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "acme", "s1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the index outlived its claim: %v", err)
	}
}

// gettingRuntime signals read when the session's own sandbox is read.
type gettingRuntime struct {
	*sandboxtest.Fake
	session string
	read    chan struct{}
	once    sync.Once
}

func (g *gettingRuntime) Get(ctx context.Context, tenant, session string) (sandbox.Sandbox, error) {
	if session == g.session {
		g.once.Do(func() { close(g.read) })
	}
	return g.Fake.Get(ctx, tenant, session)
}

// waitingClaims answers a Lookup only once the session's own sandbox is
// being read.
type waitingClaims struct {
	*sandbox.DirClaims
	read chan struct{}
}

func (w *waitingClaims) Lookup(ctx context.Context, tenant, session string) (string, error) {
	select {
	case <-w.read:
	case <-time.After(5 * time.Second):
		return "", errors.New("the claims were looked up before the session's own sandbox was read")
	}
	return w.DirClaims.Lookup(ctx, tenant, session)
}

// A new session's first call reads its own sandbox while it looks up its
// claim, not after (on Kubernetes each is an API round trip).
func TestEnsureLooksUpWhileReading(t *testing.T) {
	dc, err := sandbox.NewDirClaims(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	rt := &gettingRuntime{Fake: newFake(), session: "s1", read: read}
	m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "srv", Claims: &waitingClaims{DirClaims: dc, read: read}})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := sandbox.NewSpec("acme", "s1", sandbox.WithImage("img"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
}
