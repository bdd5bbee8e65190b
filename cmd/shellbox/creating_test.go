package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// blockingRuntime's Create waits until release is closed.
type blockingRuntime struct {
	sandboxRuntime // nil: only Create is called
	entered        chan struct{}
	release        chan struct{}
}

func (b blockingRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	close(b.entered)
	<-b.release
	return sandbox.Sandbox{Tenant: spec.Tenant, Session: spec.Session}, nil
}

// syncBuffer is a bytes.Buffer safe for the watcher and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A call that waits for a sandbox being created past the notice time says
// so, and how long creating took; a call on an existing sandbox says
// nothing, however long it runs.
func TestCreationNotice(t *testing.T) {
	defer func(d time.Duration) { creationNotice = d }(creationNotice)
	creationNotice = 10 * time.Millisecond

	w := newCreationWatch()
	rt := blockingRuntime{entered: make(chan struct{}), release: make(chan struct{})}
	var out syncBuffer
	stop := w.announce("acme", "s1", &out)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.wrap(rt).Create(context.Background(), sandbox.Spec{Tenant: "acme", Session: "s1"})
	}()
	<-rt.entered
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "creating the sandbox of session acme/s1") {
		if time.Now().After(deadline) {
			t.Fatalf("no creation notice: %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(rt.release)
	<-done
	for !strings.Contains(out.String(), "sandbox created in") {
		if time.Now().After(deadline) {
			t.Fatalf("no completion notice: %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()

	w = newCreationWatch() // an existing sandbox: Create is never called
	out = syncBuffer{}
	stop = w.announce("acme", "s2", &out)
	time.Sleep(5 * creationNotice)
	stop()
	if out.String() != "" {
		t.Errorf("a call on an existing sandbox said %q", out.String())
	}
}
