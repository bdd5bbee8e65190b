package server

import (
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/tools"
)

// memRelay is the EventRelay of replicas in one process: what one
// publishes, every other subscriber hears.
type memRelay struct {
	mu   sync.Mutex
	subs map[*relaySub]struct{}
}

type relaySub struct {
	relay *memRelay
	fn    func(eventstream.Event)
}

func newMemRelay() *memRelay { return &memRelay{subs: map[*relaySub]struct{}{}} }

// replica is the relay as one replica sees it.
func (m *memRelay) replica() *relaySub { return &relaySub{relay: m} }

func (r *relaySub) Publish(e eventstream.Event) {
	r.relay.mu.Lock()
	defer r.relay.mu.Unlock()
	for s := range r.relay.subs {
		if s != r {
			s.fn(e)
		}
	}
}

func (r *relaySub) Subscribe(fn func(eventstream.Event)) func() {
	r.relay.mu.Lock()
	defer r.relay.mu.Unlock()
	r.fn = fn
	r.relay.subs[r] = struct{}{}
	return func() {
		r.relay.mu.Lock()
		defer r.relay.mu.Unlock()
		delete(r.relay.subs, r)
	}
}

// TestRelayedNotice: a background task's end seen by replica A reaches
// B's event stream and B's next tool result for the session, once; B's
// streams of another tenant hear nothing.
func TestRelayedNotice(t *testing.T) {
	relay := newMemRelay()
	a := newRig(t, func(c *Config) { c.Relay = relay.replica() })
	b := newRig(t, func(c *Config) { c.Relay = relay.replica() })
	events, stop := sse(t, b, "/v1/sessions/s1/events", tokenAcme)
	defer stop()
	beta, stopBeta := sse(t, b, "/v1/events", tokenBeta)
	defer stopBeta()

	_, m := a.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"exit 3","description":"end soon","run_in_background":true}`)
	id := m["result"].(map[string]any)["taskId"].(string)
	select {
	case e := <-events:
		n := e["notice"].(map[string]any)
		if e["type"] != "notice" || e["session"] != "s1" || n["text"] != "background task "+id+" completed, exit code: 3" {
			t.Fatalf("event on B: %v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B's stream heard no notice of A's task")
	}
	_, m = b.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"true","description":"next call on B"}`)
	if notices, _ := m["notices"].([]any); len(notices) != 1 || notices[0].(map[string]any)["taskId"] != id {
		t.Fatalf("B's next result: %v", m)
	}
	// Reported to the model on B: neither B nor A (whose watcher queued
	// it) repeats it.
	for _, r := range []*rig{b, a} {
		_, m = r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"true","description":"and the one after"}`)
		if notices, _ := m["notices"].([]any); len(notices) != 0 {
			t.Fatalf("the notice again: %v", m)
		}
	}

	// The other way: a task whose end the model reads with bash_output
	// on A gets no notice on B's next result.
	_, m = a.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"exit 5","description":"end soon","run_in_background":true}`)
	id2 := m["result"].(map[string]any)["taskId"].(string)
	select {
	case <-events:
	case <-time.After(30 * time.Second):
		t.Fatal("B's stream heard no notice of A's second task")
	}
	_, m = a.json("POST", "/v1/sessions/s1/tools/bash_output", tokenAcme, `{"task_id":"`+id2+`"}`)
	if r, _ := m["result"].(map[string]any); r == nil || r["status"] == nil {
		t.Fatalf("bash_output on A: %v", m)
	}
	_, m = b.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, `{"command":"true","description":"after bash_output on A"}`)
	if notices, _ := m["notices"].([]any); len(notices) != 0 {
		t.Fatalf("B repeats a notice of a task whose end A reported: %v", m)
	}
	// A second copy of the same notice (another watcher of the task) is dropped.
	b.srv.onRelayed(eventstream.Event{Type: eventstream.EventNotice, Tenant: "acme", Session: "s1", Notice: &tools.Notice{TaskID: id, Text: "background task " + id + " completed, exit code: 3"}})
	select {
	case e := <-events:
		t.Fatalf("a second event of the same task: %v", e)
	case e := <-beta:
		t.Fatalf("tenant beta heard acme's notice: %v", e)
	case <-time.After(200 * time.Millisecond):
	}
	// Events of tenants this server does not serve, or not notices, are ignored.
	b.srv.onRelayed(eventstream.Event{Type: eventstream.EventNotice, Tenant: "nobody", Session: "s1", Notice: &tools.Notice{TaskID: "x"}})
	b.srv.onRelayed(eventstream.Event{Type: eventstream.EventApproval, Tenant: "acme", Session: "s1"})
	select {
	case e := <-events:
		t.Fatalf("unexpected event: %v", e)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestRelayedHandover: a replica's handover of a session reaches the
// other replicas' backends (WatchTasks), not its own.
func TestRelayedHandover(t *testing.T) {
	relay := newMemRelay()
	a := newRig(t, func(c *Config) { c.Relay = relay.replica() })
	b := newRig(t, func(c *Config) { c.Relay = relay.replica() })
	a.srv.HandOver("acme", "s1")
	a.srv.HandOver("nobody", "s1") // a tenant b does not serve
	b.b.mu.Lock()
	got := b.b.handedOver
	b.b.mu.Unlock()
	if len(got) != 1 || got[0] != "acme/s1" {
		t.Fatalf("b's backend was handed %v, want [acme/s1]", got)
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	if len(a.b.handedOver) != 0 {
		t.Fatalf("a handed over to itself: %v", a.b.handedOver)
	}
}
