package server

import (
	"errors"
	"fmt"

	"github.com/shellbox/shellbox/eventstream"
)

// Approvals is the optional seam to a policy engine's pending "ask"
// decisions. Implementations must be safe for concurrent use.
type Approvals interface {
	// List returns the tenant's approvals, pending and decided, that the
	// engine still keeps.
	List(tenant string) []eventstream.Approval
	// Decide approves or denies one of the tenant's pending approvals. An
	// unknown id, or one of another tenant, is an error satisfying
	// errors.Is(err, ErrNoSuchApproval) with text "no such approval: <id>";
	// one already decided wraps ErrInvalid.
	Decide(tenant, id string, approve bool, approver, reason string) (eventstream.Approval, error)
	// Subscribe calls fn with every approval that is created or changes
	// state, for every tenant, until cancel is called. fn must not block.
	Subscribe(fn func(eventstream.Approval)) (cancel func())
}

// ErrNoSuchApproval is the class of an unknown (or foreign) approval id.
var ErrNoSuchApproval = errors.New("no such approval")

// NoSuchApproval is the one answer for an approval id the tenant cannot see.
func NoSuchApproval(id string) error {
	return &classedError{class: ErrNoSuchApproval, msg: "no such approval: " + id}
}

// NoSuchSession is the one answer for a session id the tenant cannot see.
func NoSuchSession(id string) error {
	return &classedError{class: ErrNoSuchSession, msg: "no such session: " + id}
}

// classedError is an error whose text is its message alone while errors.Is
// finds its class.
type classedError struct {
	class error
	msg   string
}

func (e *classedError) Error() string        { return e.msg }
func (e *classedError) Is(target error) bool { return target == e.class }

// Errorf returns an error of class whose text is the formatted message alone.
func Errorf(class error, format string, a ...any) error {
	return &classedError{class: class, msg: fmt.Sprintf(format, a...)}
}
