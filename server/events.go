package server

import (
	"sync"
	"time"

	"github.com/shellbox/shellbox/tools"
)

// Event types on the event streams.
const (
	// EventNotice: a background task of the session ended.
	EventNotice = "notice"
	// EventApproval: an approval was created or decided.
	EventApproval = "approval"
	// EventDropped: the subscriber fell behind and is dropped; the stream
	// ends after it. Reconnect and list what you missed.
	EventDropped = "dropped"
	// EventReported travels between replicas only (EventRelay), never on
	// a client's stream: a task's end was reported to the model on one
	// replica (Notice carries the task id), so the others drop their copy
	// of its notice.
	EventReported = "reported"
	// EventHandover travels between replicas only: a replica shutting
	// down watched background tasks of the session; the others watch them
	// from now on, so their ends still have notices.
	EventHandover = "handover"
)

// Event is one item of a tenant's event stream.
type Event struct {
	Type     string        `json:"type"`
	Tenant   string        `json:"tenant"`
	Session  string        `json:"session,omitempty"`
	Notice   *tools.Notice `json:"notice,omitempty"`
	Approval *Approval     `json:"approval,omitempty"`
	Message  string        `json:"message,omitempty"`
	Time     time.Time     `json:"time"`
}

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
	mcp             func(Event)
	ch              chan Event
	dropped         bool // set under hub.mu before ch is closed
}

func newHub(size int) *hub { return &hub{size: size, subs: map[*subscriber]struct{}{}} }

// subscribe adds a subscriber for the tenant's events (one session's, or
// all when session is ""). The returned cancel removes it; the channel is
// closed when it is cancelled, dropped or the hub closes.
func (h *hub) subscribe(tenant, session string) (*subscriber, func()) {
	sub := &subscriber{tenant: tenant, session: session, ch: make(chan Event, h.size)}
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
func (h *hub) subscribeFunc(tenant, session string, fn func(Event)) func() {
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

func (h *hub) publish(e Event) {
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
