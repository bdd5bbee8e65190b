package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/server"
)

// servePolicies opens the policy engine of `shellbox serve`: the files of
// policies.dir, watched and reloaded on change, with approvers (the
// server's approvals endpoints), auditing to audit.file. close releases both.
// No policies.dir: nil, and every call is allowed. noApprover: nobody can
// answer an ask (stdio MCP), so it is denied at once.
func servePolicies(cfg Config, log *slog.Logger, noApprover bool) (*policies.Engine, func(), error) {
	if cfg.Policies.Dir == "" {
		return nil, func() {}, nil
	}
	var audit *policies.Audit
	if cfg.Audit.File != "" {
		a, err := policies.OpenAudit(cfg.Audit.File, policies.AuditOptions{MaxBytes: cfg.Audit.MaxBytes, MaxFiles: cfg.Audit.MaxFiles})
		if err != nil {
			return nil, nil, err
		}
		audit = a
	}
	e, err := policies.Open(cfg.Policies.Dir, policies.Options{Logger: log, Audit: audit, NoApprover: noApprover})
	if err != nil {
		if audit != nil {
			audit.Close()
		}
		return nil, nil, err
	}
	return e, func() {
		e.Close()
		if audit != nil {
			audit.Close()
		}
	}, nil
}

// policyApprovals is the policy engine's approvals as the server sees them.
type policyApprovals struct{ e *policies.Engine }

var _ server.Approvals = policyApprovals{}

func (p policyApprovals) List(tenant string) []server.Approval {
	list := p.e.Approvals(tenant)
	out := make([]server.Approval, len(list))
	for i, a := range list {
		out[i] = toServerApproval(a)
	}
	return out
}

func (p policyApprovals) Decide(tenant, id string, approve bool, approver, reason string) (server.Approval, error) {
	a, err := p.e.Decide(tenant, id, approve, approver, reason)
	switch {
	case errors.Is(err, policies.ErrNoSuchApproval):
		return server.Approval{}, server.NoSuchApproval(id)
	case errors.Is(err, policies.ErrAlreadyDecided):
		return toServerApproval(a), server.Errorf(server.ErrInvalid, "approval %s is already %s", id, a.State)
	case err != nil:
		return server.Approval{}, err
	}
	return toServerApproval(a), nil
}

func (p policyApprovals) Subscribe(fn func(server.Approval)) (cancel func()) {
	return p.e.Subscribe(func(a policies.Approval) { fn(toServerApproval(a)) })
}

func toServerApproval(a policies.Approval) server.Approval {
	return server.Approval{
		ID: a.ID, Tenant: a.Tenant, Session: a.Session, Tool: a.Tool, Command: a.Command, Workdir: a.Workdir,
		Rule: a.Rule, Reason: a.Reason, Justification: a.Justification, Permissions: a.Permissions,
		State: a.State, Approver: a.Approver, DecisionReason: a.DecisionReason,
		Created: a.Created, Deadline: a.Deadline, Decided: a.Decided,
	}
}

// policySpec is the sandbox spec of a new docker session of a tenant with a
// policy: the image, runtime and mounts asked for (within the policy; no
// mounts asked for: the policy's), the policy's resources and user, and the
// tenant's session quota (n sessions exist).
func policySpec(dc SandboxConfig, pol *policies.Policy, tenant, session, agent string, o server.SessionOptions, n int) (sandbox.Spec, error) {
	if o.Runtime != "" && o.Runtime != pol.Runtime {
		return sandbox.Spec{}, server.Errorf(server.ErrNotAllowed, "runtime %s is not allowed by policy %s (sandbox.runtime: %s)", o.Runtime, pol.Tenant, pol.Runtime)
	}
	img, err := pol.Image(o.Image, dc.Image)
	if err != nil {
		return sandbox.Spec{}, server.Errorf(server.ErrNotAllowed, "%v", err)
	}
	if err := pol.CheckSessions(n); err != nil {
		return sandbox.Spec{}, server.Errorf(server.ErrNotAllowed, "%v", err)
	}
	mounts, err := pol.SessionMounts(mountRequests(o.Mounts))
	if err != nil {
		switch {
		case errors.Is(err, policies.ErrNotAllowed):
			return sandbox.Spec{}, server.Errorf(server.ErrNotAllowed, "%v", err)
		case errors.Is(err, sandbox.ErrUnavailable):
			return sandbox.Spec{}, server.Errorf(server.ErrUnavailable, "%v", err)
		}
		return sandbox.Spec{}, server.Errorf(server.ErrInvalid, "%v", err)
	}
	dc.Image, dc.Runtime = img, pol.Runtime
	agentArgs := []string{"--uid", strconv.Itoa(pol.User.UID), "--gid", strconv.Itoa(pol.User.GID)}
	opts := append(pol.SpecOptions(), sandbox.WithMounts(mounts...))
	spec, err := dockerSpec(dc, tenant, session, agent, agentArgs, opts...)
	if err != nil {
		return sandbox.Spec{}, fmt.Errorf("policy %s: %w", pol.Tenant, err)
	}
	return spec, nil
}

// mountRequests are a session's requested mounts as the policy checks them:
// nil stays nil (the policy's mounts), readOnly defaults to true.
func mountRequests(ms []server.Mount) []policies.MountRequest {
	if ms == nil {
		return nil
	}
	out := make([]policies.MountRequest, len(ms))
	for i, m := range ms {
		out[i] = policies.MountRequest{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly == nil || *m.ReadOnly}
	}
	return out
}
