package server

import (
	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/errdefs"
)

// Approvals is the optional seam to a policy engine's pending "ask"
// decisions. Implementations must be safe for concurrent use.
type Approvals interface {
	// List returns the tenant's approvals, pending and decided, that the
	// engine still keeps.
	List(tenant string) []approval.Approval
	// Decide approves or denies one of the tenant's pending approvals. An
	// unknown id, or one of another tenant, is an error satisfying
	// errors.Is(err, ErrNoSuchApproval) with text "no such approval: <id>";
	// one already decided wraps ErrInvalid.
	Decide(tenant, id string, approve bool, approver, reason string) (approval.Approval, error)
	// Subscribe calls fn with every approval that is created or changes
	// state, for every tenant, until cancel is called. fn must not block.
	Subscribe(fn func(approval.Approval)) (cancel func())
}

// ErrNoSuchApproval is the class of an unknown (or foreign) approval id.
var ErrNoSuchApproval = errdefs.ErrNoSuchApproval

// NoSuchApproval is the one answer for an approval id the tenant cannot see.
func NoSuchApproval(id string) error {
	return errdefs.Errorf(ErrNoSuchApproval, "no such approval: %s", id)
}

// NoSuchSession is the one answer for a session id the tenant cannot see.
func NoSuchSession(id string) error {
	return errdefs.Errorf(ErrNoSuchSession, "no such session: %s", id)
}

// Errorf returns an error of class whose text is the formatted message alone.
func Errorf(class error, format string, a ...any) error {
	return errdefs.Errorf(class, format, a...)
}
