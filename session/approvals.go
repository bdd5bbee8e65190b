package session

import (
	"errors"

	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/server"
)

// Approvals is the policy engine's approvals as the server sees them.
func Approvals(e *policies.Engine) server.Approvals { return policyApprovals{e} }

type policyApprovals struct{ e *policies.Engine }

func (p policyApprovals) List(tenant string) []eventstream.Approval {
	list := p.e.Approvals(tenant)
	out := make([]eventstream.Approval, len(list))
	for i, a := range list {
		out[i] = toServerApproval(a)
	}
	return out
}

func (p policyApprovals) Decide(tenant, id string, approve bool, approver, reason string) (eventstream.Approval, error) {
	a, err := p.e.Decide(tenant, id, approve, approver, reason)
	switch {
	case errors.Is(err, policies.ErrNoSuchApproval):
		return eventstream.Approval{}, server.NoSuchApproval(id)
	case errors.Is(err, policies.ErrAlreadyDecided):
		return toServerApproval(a), server.Errorf(server.ErrInvalid, "approval %s is already %s", id, a.State)
	case err != nil:
		return eventstream.Approval{}, err
	}
	return toServerApproval(a), nil
}

func (p policyApprovals) Subscribe(fn func(eventstream.Approval)) (cancel func()) {
	return p.e.Subscribe(func(a policies.Approval) { fn(toServerApproval(a)) })
}

func toServerApproval(a policies.Approval) eventstream.Approval {
	return eventstream.Approval{
		ID: a.ID, Tenant: a.Tenant, Session: a.Session, Tool: a.Tool, Command: a.Command, Workdir: a.Workdir,
		Rule: a.Rule, Reason: a.Reason, Justification: a.Justification, Permissions: a.Permissions,
		State: a.State, Approver: a.Approver, DecisionReason: a.DecisionReason,
		Created: a.Created, Deadline: a.Deadline, Decided: a.Decided,
	}
}
