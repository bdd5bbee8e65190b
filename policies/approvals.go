package policies

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/internal/clip"
)

// Approval states.
const (
	Pending  = approval.Pending
	Approved = approval.Approved
	Denied   = approval.Denied
	Expired  = approval.Expired
)

// ErrNoSuchApproval: an unknown approval id, or one of another tenant.
var ErrNoSuchApproval = errdefs.ErrNoSuchApproval

// ErrAlreadyDecided: the approval was decided (or expired) before.
var ErrAlreadyDecided = errors.New("approval already decided")

// Approval is an ask held for a human: the one shape of approval.
type Approval = approval.Approval

// ApprovalStore holds asks for a human decision: pending approvals until
// they are decided or expire, and a bounded history of decided ones, per
// tenant. The Engine writes to it (Add, Finish) and waits on it (Wait);
// approvers list and decide through the Engine. NewMemoryApprovals is the
// one-process store (the default); a store shared by server replicas
// (kube/approvals) lets any of them list and decide what another
// holds. Implementations must be safe for concurrent use.
type ApprovalStore interface {
	// Add holds a as pending, with a new ID and State Pending, and returns
	// it. It fails when a.Tenant has the store's maximum of pending
	// approvals already.
	Add(ctx context.Context, a Approval) (Approval, error)
	// Wait returns tenant's approval id once it is no longer pending (at
	// once if it is not), or ctx's error when ctx ends first; an unknown
	// id is ErrNoSuchApproval. It does not change the approval: the
	// caller expires it (Finish) when it stops waiting.
	Wait(ctx context.Context, tenant, id string) (Approval, error)
	// Finish moves tenant's pending approval id to state (Approved, Denied
	// or Expired), recording approver, reason and the time at: of
	// concurrent Finishes of one approval exactly one wins. It returns the
	// approval as it ends up: if it was finished before, as that decision,
	// with an error satisfying errors.Is(err, ErrAlreadyDecided); an
	// unknown id, or one of another tenant, is ErrNoSuchApproval
	// ("no such approval: <id>").
	Finish(ctx context.Context, tenant, id, state, approver, reason string, at time.Time) (Approval, error)
	// List returns tenant's pending approvals (oldest first), then the
	// decided ones the store keeps (newest first).
	List(tenant string) []Approval
	// Subscribe calls fn with every approval that becomes pending or is
	// finished, of every tenant, until cancel is called. fn must not
	// block.
	Subscribe(fn func(Approval)) (cancel func())
}

// NewMemoryApprovals is the store of one process: at most maxPending
// pending approvals per tenant, the last maxHistory decided ones kept.
// Subscribers are called on the goroutine that made the change, before
// Add or Finish returns.
func NewMemoryApprovals(maxPending, maxHistory int) ApprovalStore {
	return newApprovals(maxPending, maxHistory)
}

// approvals holds the pending approvals and a bounded history of decided
// ones, per tenant. Subscribers hear of every change.
type approvals struct {
	maxPending, maxHistory int

	mu      sync.Mutex
	tenants map[string]*tenantApprovals
	subs    Subscribers
}

var _ ApprovalStore = (*approvals)(nil)

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
		tenants: map[string]*tenantApprovals{}}
}

// NewApprovalID is a new approval id: "ap_" and 16 hex digits.
func NewApprovalID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "ap_" + hex.EncodeToString(b[:])
}

// Add holds a as pending. It fails when the tenant already has maxPending.
func (s *approvals) Add(_ context.Context, a Approval) (Approval, error) {
	s.mu.Lock()
	t := s.tenant(a.Tenant)
	if len(t.pending) >= s.maxPending {
		s.mu.Unlock()
		return Approval{}, TooManyPending(a.Tenant, s.maxPending)
	}
	a.ID, a.State = NewApprovalID(), Pending
	p := &pending{a: a, done: make(chan struct{})}
	t.pending[a.ID] = p
	s.mu.Unlock()
	s.subs.Notify(a)
	return a, nil
}

// TooManyPending is Add's error for a tenant at its bound of pending
// approvals.
func TooManyPending(tenant string, limit int) error {
	return fmt.Errorf("too many pending approvals for tenant %s (limit %d)", tenant, limit)
}

// Wait returns the approval once it is no longer pending.
func (s *approvals) Wait(ctx context.Context, tenant, id string) (Approval, error) {
	s.mu.Lock()
	var p *pending
	if t := s.tenants[tenant]; t != nil {
		p = t.pending[id]
	}
	s.mu.Unlock()
	if p != nil {
		select {
		case <-p.done:
		case <-ctx.Done():
			return s.get(tenant, id), ctx.Err()
		}
	}
	a := s.get(tenant, id)
	if a.ID == "" {
		return a, fmt.Errorf("%w: %s", ErrNoSuchApproval, clip.To(id, 64))
	}
	return a, nil
}

func (s *approvals) tenant(id string) *tenantApprovals {
	t := s.tenants[id]
	if t == nil {
		t = &tenantApprovals{pending: map[string]*pending{}}
		s.tenants[id] = t
	}
	return t
}

// Finish moves a pending approval to state.
func (s *approvals) Finish(_ context.Context, tenant, id, state, approver, reason string, now time.Time) (Approval, error) {
	s.mu.Lock()
	t := s.tenants[tenant]
	if t == nil {
		s.mu.Unlock()
		return Approval{}, fmt.Errorf("%w: %s", ErrNoSuchApproval, clip.To(id, 64))
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
		return Approval{}, fmt.Errorf("%w: %s", ErrNoSuchApproval, clip.To(id, 64))
	}
	delete(t.pending, id)
	p.a.State, p.a.Approver, p.a.DecisionReason, p.a.Decided = state, approver, reason, now
	t.history = append(t.history, p.a)
	if len(t.history) > s.maxHistory {
		t.history = slices.Delete(t.history, 0, len(t.history)-s.maxHistory)
	}
	close(p.done)
	a := p.a
	s.mu.Unlock()
	s.subs.Notify(a)
	return a, nil
}

// List returns tenant's pending approvals (oldest first), then its decided
// ones (newest first).
func (s *approvals) List(tenant string) []Approval {
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

func (s *approvals) Subscribe(fn func(Approval)) func() { return s.subs.Subscribe(fn) }

// Subscribers are an ApprovalStore's subscribers. The zero value is ready.
type Subscribers struct {
	mu   sync.Mutex
	fns  map[int]func(Approval)
	next int
}

// Subscribe adds fn until cancel is called.
func (s *Subscribers) Subscribe(fn func(Approval)) (cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fns == nil {
		s.fns = map[int]func(Approval){}
	}
	id := s.next
	s.next++
	s.fns[id] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.fns, id)
	}
}

// Notify calls every subscriber with a (a copy each), on this goroutine,
// outside any lock; a panicking subscriber is contained.
func (s *Subscribers) Notify(a Approval) {
	s.mu.Lock()
	fns := make([]func(Approval), 0, len(s.fns))
	for _, fn := range s.fns {
		fns = append(fns, fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		func() {
			defer func() { _ = recover() }()
			a := a
			a.Permissions = slices.Clone(a.Permissions)
			fn(a)
		}()
	}
}
