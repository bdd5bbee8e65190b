package server

import (
	"sync"

	"github.com/shellbox/shellbox/eventstream"
)

// hub fans events out to subscribers. Publishing never blocks: every
// subscriber has a bounded queue, and one that is full is dropped (its queue
// closed, its dropped flag set) instead of slowing anyone down.
type hub struct {
	size int

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

type subscriber struct {
	tenant, session string // session "" = every session of the tenant
	mcp             func(eventstream.Event)
	ch              chan eventstream.Event
	dropped         bool // set under hub.mu before ch is closed
}

func newHub(size int) *hub { return &hub{size: size, subs: map[*subscriber]struct{}{}} }

// subscribe adds a subscriber for the tenant's events (one session's, or
// all when session is ""). The returned cancel removes it; the channel is
// closed when it is cancelled, dropped or the hub closes.
func (h *hub) subscribe(tenant, session string) (*subscriber, func()) {
	sub := &subscriber{tenant: tenant, session: session, ch: make(chan eventstream.Event, h.size)}
	h.mu.Lock()
	if h.closed {
		close(sub.ch)
	} else {
		h.subs[sub] = struct{}{}
	}
	h.mu.Unlock()
	return sub, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[sub]; ok {
			delete(h.subs, sub)
			close(sub.ch)
		}
	}
}

// subscribeFunc adds a subscriber called synchronously; fn must not block.
func (h *hub) subscribeFunc(tenant, session string, fn func(eventstream.Event)) func() {
	sub := &subscriber{tenant: tenant, session: session, mcp: fn}
	h.mu.Lock()
	if !h.closed {
		h.subs[sub] = struct{}{}
	}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.subs, sub)
		h.mu.Unlock()
	}
}

func (h *hub) publish(e eventstream.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		if sub.tenant != e.Tenant || (sub.session != "" && sub.session != e.Session) {
			continue
		}
		if sub.mcp != nil {
			sub.mcp(e)
			continue
		}
		select {
		case sub.ch <- e:
		default:
			sub.dropped = true
			delete(h.subs, sub)
			close(sub.ch)
		}
	}
}

// close ends every stream (graceful shutdown).
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for sub := range h.subs {
		if sub.ch != nil {
			close(sub.ch)
		}
		delete(h.subs, sub)
	}
}

func (h *hub) wasDropped(sub *subscriber) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return sub.dropped
}
