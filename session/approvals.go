package session

import (
	"errors"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/server"
)

// Approvals is the policy engine's approvals as the server sees them.
func Approvals(e *policies.Engine) server.Approvals { return policyApprovals{e} }

type policyApprovals struct{ e *policies.Engine }

func (p policyApprovals) List(tenant string) []approval.Approval {
	return p.e.Approvals(tenant)
}

func (p policyApprovals) Decide(tenant, id string, approve bool, approver, reason string) (approval.Approval, error) {
	a, err := p.e.Decide(tenant, id, approve, approver, reason)
	switch {
	case errors.Is(err, policies.ErrNoSuchApproval):
		return approval.Approval{}, server.NoSuchApproval(id)
	case errors.Is(err, policies.ErrAlreadyDecided):
		return a, server.Errorf(server.ErrInvalid, "approval %s is already %s", id, a.State)
	case err != nil:
		return approval.Approval{}, err
	}
	return a, nil
}

func (p policyApprovals) Subscribe(fn func(approval.Approval)) (cancel func()) {
	return p.e.Subscribe(fn)
}
