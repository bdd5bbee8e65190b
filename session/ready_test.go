package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeEngine is a ping whose answers the test sets, on a clock it moves.
type fakeEngine struct {
	mu    sync.Mutex
	clock time.Time
	err   error
	hang  chan struct{} // non-nil: pings wait for it (or their context)
	pings atomic.Int32
}

func (f *fakeEngine) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.clock }
func (f *fakeEngine) advance(d time.Duration) {
	f.mu.Lock()
	f.clock = f.clock.Add(d)
	f.mu.Unlock()
}
func (f *fakeEngine) set(err error, hang chan struct{}) {
	f.mu.Lock()
	f.err, f.hang = err, hang
	f.mu.Unlock()
}
func (f *fakeEngine) ping(ctx context.Context) error {
	f.pings.Add(1)
	f.mu.Lock()
	err, hang := f.err, f.hang
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func newFakeHealth() (*engineHealth, *fakeEngine) {
	f := &fakeEngine{clock: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
	h := newEngineHealth(f.ping)
	h.now = f.now
	return h, f
}

// settle waits for the running check, if any, to end.
func settle(h *engineHealth) {
	h.mu.Lock()
	r := h.running
	h.mu.Unlock()
	if r != nil {
		<-r
	}
}

// A slow or failing engine is not unreadiness until it has not answered
// for the grace; then it is, naming the engine's error; an answer makes
// the server ready again at once.
func TestReadyGrace(t *testing.T) {
	h, f := newFakeHealth()
	ctx := context.Background()
	if err := h.ready(ctx); err != nil {
		t.Fatalf("first check of an answering engine: %v", err)
	}
	down := errors.New("engine unreachable")
	f.set(down, nil)
	for _, d := range []time.Duration{0, readyCheckEvery, 10 * time.Second, 10 * time.Second} {
		f.advance(d)
		if err := h.ready(ctx); err != nil {
			t.Fatalf("%s after the engine stopped answering: %v", d, err)
		}
		settle(h)
	}
	f.advance(readyGrace)
	if err := h.ready(ctx); err == nil || !errors.Is(err, down) || !strings.Contains(err.Error(), "no answer for") {
		t.Fatalf("past the grace: %v, want the engine's error and how long", err)
	}
	f.set(nil, nil)
	settle(h)
	f.advance(readyCheckEvery)
	h.ready(ctx) // starts the check that sees the engine back
	settle(h)
	if err := h.ready(ctx); err != nil {
		t.Fatalf("engine back: %v", err)
	}
}

// Only the first Ready waits for the engine: a check that hangs holds
// no later probe, and one check runs at a time.
func TestReadyDoesNotWait(t *testing.T) {
	h, f := newFakeHealth()
	ctx := context.Background()
	if err := h.ready(ctx); err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	f.set(nil, hang)
	for range 5 {
		f.advance(readyCheckEvery)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := h.ready(pctx)
		cancel()
		if err != nil {
			t.Fatalf("with a check hanging: %v", err)
		}
	}
	// The hanging check's goroutine may not have pinged yet.
	for deadline := time.Now().Add(5 * time.Second); f.pings.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := f.pings.Load(); n != 2 {
		t.Fatalf("%d pings, want 2 (the first, then one hanging)", n)
	}
	f.advance(readyGrace)
	if err := h.ready(ctx); err == nil || !strings.Contains(err.Error(), "no answer for 40s") {
		t.Fatalf("a check hanging past the grace: %v", err)
	}
	close(hang)
	settle(h)
}

// A server whose engine does not answer when it starts is not ready; the
// first Ready waits only within its context.
func TestReadyFirstCheck(t *testing.T) {
	h, f := newFakeHealth()
	down := errors.New("engine unreachable")
	f.set(down, nil)
	if err := h.ready(context.Background()); !errors.Is(err, down) {
		t.Fatalf("first check of a failing engine: %v", err)
	}
	h, f = newFakeHealth()
	hang := make(chan struct{})
	defer close(hang)
	f.set(nil, hang)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.ready(ctx); err == nil || !strings.Contains(err.Error(), "no answer yet") {
		t.Fatalf("first check hanging: %v", err)
	}
}
