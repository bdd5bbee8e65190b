package main

import (
	"log/slog"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/policies"
)

// servePolicies opens the policy engine of `shellbox serve`: the files of
// policies.dir, watched and reloaded on change, with approvers (the
// server's approvals endpoints), auditing to audit.file. close releases both.
// No policies.dir: nil, and every call is allowed. noApprover: nobody can
// answer an ask (stdio MCP), so it is denied at once. store holds the asks
// (nil: the engine's memory; approvalStore).
func servePolicies(cfg config.Config, log *slog.Logger, noApprover bool, store policies.ApprovalStore) (*policies.Engine, func(), error) {
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
	e, err := policies.Open(cfg.Policies.Dir, policies.Options{Logger: log, Audit: audit, NoApprover: noApprover, Approvals: store})
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
