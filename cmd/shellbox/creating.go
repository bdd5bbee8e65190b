package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// creationNotice is how long a call on a sandboxed backend may run before
// the CLI says that it is creating the session's sandbox.
var creationNotice = time.Second

// creationWatch hears the runtime create a sandbox (creatingRuntime) so that
// a one-shot call can say that it is waiting for one.
type creationWatch struct {
	startOnce, doneOnce sync.Once
	started, created    chan struct{} // closed when the first Create begins, and succeeds
	began               time.Time
	took                time.Duration
}

func newCreationWatch() *creationWatch {
	return &creationWatch{started: make(chan struct{}), created: make(chan struct{})}
}

// wrap is the runtime rt with Create reported to the watch.
func (c *creationWatch) wrap(rt sandboxRuntime) sandboxRuntime { return creatingRuntime{rt, c} }

// announce watches a call: once it has run for creationNotice while the
// runtime creates a sandbox, it says so on w, and when the sandbox is
// created, how long that took (a few hundred milliseconds on runc, seconds
// on a loaded machine). A call on an existing sandbox says nothing. stop
// ends the watch and returns once nothing more will be written.
func (c *creationWatch) announce(tenant, sess string, w io.Writer) (stop func()) {
	if c == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTimer(creationNotice)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-c.started:
		}
		select {
		case <-c.created:
			return // created, now waiting for something else
		default:
		}
		fmt.Fprintf(w, "shellbox: creating the sandbox of session %s/%s …\n", tenant, sess)
		select {
		case <-ctx.Done():
		case <-c.created:
			fmt.Fprintf(w, "shellbox: sandbox created in %s\n", c.took.Round(time.Millisecond))
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// creatingRuntime tells its watch when Create begins and succeeds.
type creatingRuntime struct {
	sandboxRuntime
	watch *creationWatch
}

var (
	_ sandbox.Sweeper      = creatingRuntime{}
	_ sandbox.SessionState = creatingRuntime{}
)

// Unwrap lets the Manager find the runtime's optional abilities
// (sandbox.AsUseRecorder).
func (r creatingRuntime) Unwrap() sandbox.Runtime { return r.sandboxRuntime }

func (r creatingRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	c := r.watch
	c.startOnce.Do(func() { c.began = time.Now(); close(c.started) })
	sb, err := r.sandboxRuntime.Create(ctx, spec)
	if err == nil {
		c.doneOnce.Do(func() { c.took = time.Since(c.began); close(c.created) })
	}
	return sb, err
}

// Sweep passes the runtime's Sweeper through.
func (r creatingRuntime) Sweep(ctx context.Context, owner string, live func(tenant, session string) bool) ([]string, error) {
	if s, ok := r.sandboxRuntime.(sandbox.Sweeper); ok {
		return s.Sweep(ctx, owner, live)
	}
	return nil, nil
}
