package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/session"
	"github.com/shellbox/shellbox/tools"
)

// creationNotice is how long a call on a sandboxed backend may run before
// the CLI says that it is creating the session's sandbox.
const creationNotice = time.Second

// creationWatch hears the session layer create sandboxes (its Observer,
// for the CLI: nothing else is observed) so that a one-shot call can say
// it is creating one.
type creationWatch struct {
	l       *session.Layer
	once    sync.Once
	created chan struct{} // closed by the first creation
	took    time.Duration
}

func newCreationWatch() *creationWatch { return &creationWatch{created: make(chan struct{})} }

func (*creationWatch) Notify(string, string, tools.Notice)           {}
func (*creationWatch) ObserveGate(_ string, g tools.Gate) tools.Gate { return g }
func (*creationWatch) ObserveEgress(string, string)                  {}
func (c *creationWatch) ObserveSandboxCreate(_ string, d time.Duration) {
	c.once.Do(func() { c.took = d; close(c.created) })
}

// announce watches a call of tenant's session: if it still runs after
// creationNotice, no sandbox has been created yet and the session has no
// sandbox older than the call, it says on w that the sandbox is being
// created, and when it is, how long that took (a new sandbox takes a few
// hundred milliseconds on runc, seconds on a loaded machine). stop ends the
// watch and returns once nothing more will be written.
func (c *creationWatch) announce(tenant, sess string, w io.Writer) (stop func()) {
	if c == nil || c.l == nil || !c.l.Sandboxed() {
		return func() {}
	}
	began := time.Now()
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
		case <-c.created:
			return
		case <-t.C:
		}
		list, err := c.l.Sessions(ctx, tenant)
		if err != nil || ctx.Err() != nil {
			return
		}
		for _, s := range list {
			if s.ID == sess && s.Created.Before(began.Add(-time.Second)) {
				return // an existing sandbox: the command itself is slow
			}
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

var _ server.Observer = (*creationWatch)(nil)
