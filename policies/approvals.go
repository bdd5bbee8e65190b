package policies

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Approval states.
const (
	Pending  = "pending"
	Approved = "approved"
	Denied   = "denied"
	Expired  = "expired"
)

// ErrNoSuchApproval: an unknown approval id, or one of another tenant.
var ErrNoSuchApproval = errors.New("no such approval")

// ErrAlreadyDecided: the approval was decided (or expired) before.
var ErrAlreadyDecided = errors.New("approval already decided")

// Approval is an ask held for a human: the call, why it asks, and once
// decided, by whom and why.
type Approval struct {
	ID             string    `json:"id"`
	Tenant         string    `json:"tenant"`
	Session        string    `json:"session"`
	Tool           string    `json:"tool"`
	Command        string    `json:"command"`
	Workdir        string    `json:"workdir,omitempty"`
	Rule           string    `json:"rule"`
	Reason         string    `json:"reason"`
	Justification  string    `json:"justification,omitempty"`
	Permissions    []string  `json:"permissions,omitempty"`
	State          string    `json:"state"`
	Approver       string    `json:"approver,omitempty"`
	DecisionReason string    `json:"decisionReason,omitempty"`
	Created        time.Time `json:"created"`
	Deadline       time.Time `json:"deadline"`
	Decided        time.Time `json:"decided,omitzero"`
}

// approvals holds the pending approvals and a bounded history of decided
// ones, per tenant. Subscribers hear of every change.
type approvals struct {
	maxPending, maxHistory int

	mu      sync.Mutex
	tenants map[string]*tenantApprovals
	subs    map[int]func(Approval)
	nextSub int
}

type tenantApprovals struct {
	pending map[string]*pending
	history []Approval // oldest first, at most maxHistory
}

type pending struct {
	a    Approval
	done chan struct{} // closed when decided or expired
}

func newApprovals(maxPending, maxHistory int) *approvals {
	return &approvals{maxPending: maxPending, maxHistory: maxHistory,
		tenants: map[string]*tenantApprovals{}, subs: map[int]func(Approval){}}
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "ap_" + hex.EncodeToString(b[:])
}

// add holds a as pending. It fails when the tenant already has maxPending.
func (s *approvals) add(a Approval) (*pending, error) {
	s.mu.Lock()
	t := s.tenant(a.Tenant)
	if len(t.pending) >= s.maxPending {
		s.mu.Unlock()
		return nil, fmt.Errorf("too many pending approvals for tenant %s (limit %d)", a.Tenant, s.maxPending)
	}
	a.ID, a.State = newID(), Pending
	p := &pending{a: a, done: make(chan struct{})}
	t.pending[a.ID] = p
	subs := s.subscribers()
	s.mu.Unlock()
	notify(subs, a)
	return p, nil
}

func (s *approvals) tenant(id string) *tenantApprovals {
	t := s.tenants[id]
	if t == nil {
		t = &tenantApprovals{pending: map[string]*pending{}}
		s.tenants[id] = t
	}
	return t
}

// finish moves a pending approval to state. It returns the approval as it
// ends up: if it was decided already, as that decision, with
// ErrAlreadyDecided; if unknown (or another tenant's), ErrNoSuchApproval.
func (s *approvals) finish(tenant, id, state, approver, reason string, now time.Time) (Approval, error) {
	s.mu.Lock()
	t := s.tenants[tenant]
	if t == nil {
		s.mu.Unlock()
		return Approval{}, fmt.Errorf("%w: %s", ErrNoSuchApproval, clip(id, 64))
	}
	p := t.pending[id]
	if p == nil {
		for _, h := range t.history {
			if h.ID == id {
				s.mu.Unlock()
				return h, fmt.Errorf("%w: %s is %s", ErrAlreadyDecided, id, h.State)
			}
		}
		s.mu.Unlock()
		return Approval{}, fmt.Errorf("%w: %s", ErrNoSuchApproval, clip(id, 64))
	}
	delete(t.pending, id)
	p.a.State, p.a.Approver, p.a.DecisionReason, p.a.Decided = state, approver, reason, now
	t.history = append(t.history, p.a)
	if len(t.history) > s.maxHistory {
		t.history = slices.Delete(t.history, 0, len(t.history)-s.maxHistory)
	}
	close(p.done)
	a := p.a
	subs := s.subscribers()
	s.mu.Unlock()
	notify(subs, a)
	return a, nil
}

// list returns tenant's pending approvals (oldest first), then its decided
// ones (newest first).
func (s *approvals) list(tenant string) []Approval {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants[tenant]
	if t == nil {
		return []Approval{}
	}
	out := make([]Approval, 0, len(t.pending)+len(t.history))
	for _, p := range t.pending {
		out = append(out, p.a)
	}
	slices.SortFunc(out, func(a, b Approval) int { return a.Created.Compare(b.Created) })
	for i := len(t.history) - 1; i >= 0; i-- {
		out = append(out, t.history[i])
	}
	return out
}

// get returns the approval as it is now.
func (s *approvals) get(tenant, id string) Approval {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tenants[tenant]; t != nil {
		if p := t.pending[id]; p != nil {
			return p.a
		}
		for _, h := range t.history {
			if h.ID == id {
				return h
			}
		}
	}
	return Approval{}
}

func (s *approvals) subscribe(fn func(Approval)) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, id)
	}
}

func (s *approvals) subscribers() []func(Approval) {
	out := make([]func(Approval), 0, len(s.subs))
	for _, fn := range s.subs {
		out = append(out, fn)
	}
	return out
}

// notify calls the subscribers outside the lock; a panicking subscriber is
// contained.
func notify(subs []func(Approval), a Approval) {
	for _, fn := range subs {
		func() {
			defer func() { _ = recover() }()
			a := a
			a.Permissions = slices.Clone(a.Permissions)
			fn(a)
		}()
	}
}
