package server

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/approval"
)

// fakeApprovals is an in-memory Approvals for tests.
type fakeApprovals struct {
	mu   sync.Mutex
	list []approval.Approval
	subs map[int]func(approval.Approval)
	next int
}

func newFakeApprovals() *fakeApprovals {
	return &fakeApprovals{subs: map[int]func(approval.Approval){}}
}

func (f *fakeApprovals) add(a approval.Approval) {
	a.Created = time.Now().UTC()
	f.mu.Lock()
	f.list = append(f.list, a)
	subs := f.snapshot()
	f.mu.Unlock()
	for _, fn := range subs {
		fn(a)
	}
}

func (f *fakeApprovals) snapshot() []func(approval.Approval) {
	var out []func(approval.Approval)
	for _, fn := range f.subs {
		out = append(out, fn)
	}
	return out
}

func (f *fakeApprovals) get(id string) approval.Approval {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.list {
		if a.ID == id {
			return a
		}
	}
	return approval.Approval{}
}

func (f *fakeApprovals) List(tenant string) []approval.Approval {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []approval.Approval
	for _, a := range f.list {
		if a.Tenant == tenant {
			out = append(out, a)
		}
	}
	return out
}

func (f *fakeApprovals) Decide(tenant, id string, approve bool, approver, reason string) (approval.Approval, error) {
	f.mu.Lock()
	var out approval.Approval
	found := false
	for i, a := range f.list {
		if a.ID != id || a.Tenant != tenant {
			continue
		}
		if a.State != approval.Pending {
			f.mu.Unlock()
			return approval.Approval{}, Errorf(ErrInvalid, "approval %s is already %s", id, a.State)
		}
		a.State, a.Approver, a.DecisionReason, a.Decided = approval.Denied, approver, reason, time.Now().UTC()
		if approve {
			a.State = approval.Approved
		}
		f.list[i] = a
		out, found = a, true
	}
	subs := f.snapshot()
	f.mu.Unlock()
	if !found {
		return approval.Approval{}, NoSuchApproval(id)
	}
	for _, fn := range subs {
		fn(out)
	}
	return out, nil
}

func (f *fakeApprovals) Subscribe(fn func(approval.Approval)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	k := f.next
	f.subs[k] = fn
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, k)
	}
}

func TestApprovals(t *testing.T) {
	fa := newFakeApprovals()
	r := newRig(t, func(c *Config) { c.Approvals = fa })
	events, stop := sse(t, r, "/v1/events", tokenAcme)
	defer stop()
	fa.add(approval.Approval{ID: "a1", Tenant: "acme", Session: "s1", Tool: "bash", Command: "curl example.com", State: approval.Pending, Permissions: []string{"network"}, Background: true})
	fa.add(approval.Approval{ID: "a2", Tenant: "acme", Session: "s1", Tool: "bash", Command: "rm x", State: approval.Pending})
	if e := <-events; e["type"] != "approval" || e["approval"].(map[string]any)["id"] != "a1" || e["approval"].(map[string]any)["background"] != true {
		t.Fatalf("event: %v", e)
	}
	<-events
	// How the call runs is part of every view of it (issue 29, item 8).
	if code, m := r.json("GET", "/v1/approvals/a2", tokenAcme, nil); code != 200 || m["background"] != false || m["timeoutMs"] != float64(0) {
		t.Fatalf("a foreground approval: %d %v", code, m)
	}
	code, m := r.json("GET", "/v1/approvals?state=pending", tokenAcme, nil)
	if code != 200 || len(m["approvals"].([]any)) != 2 {
		t.Fatalf("list: %d %v", code, m)
	}
	code, m = r.json("POST", "/v1/approvals/a1/approve", tokenAcme, map[string]string{"approver": "alice", "reason": "ok"})
	if code != 200 || m["state"] != "approved" || m["approver"] != "alice" || m["decisionReason"] != "ok" {
		t.Fatalf("approve: %d %v", code, m)
	}
	if e := <-events; e["approval"].(map[string]any)["state"] != "approved" {
		t.Fatalf("decision event: %v", e)
	}
	code, m = r.json("POST", "/v1/approvals/a2/deny", tokenAcme, nil)
	if code != 200 || m["state"] != "denied" || m["approver"] != "tenant:acme" {
		t.Fatalf("deny: %d %v", code, m)
	}
	code, m = r.json("POST", "/v1/approvals/a2/approve", tokenAcme, nil)
	if code != http.StatusBadRequest || errCode(m) != "invalid" {
		t.Fatalf("decide twice: %d %v", code, m)
	}
	code, m = r.json("GET", "/v1/approvals/a1", tokenAcme, nil)
	if code != 200 || m["state"] != "approved" {
		t.Fatalf("get: %d %v", code, m)
	}
}
