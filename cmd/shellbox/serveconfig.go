package main

import (
	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/server"
)

// consoleConfig is the operator console's: its operator tokens, and the
// audit log it tails (when policies, which write it, are on).
func consoleConfig(cfg config.Config) server.ConsoleConfig {
	cc := server.ConsoleConfig{OperatorTokens: cfg.Server.OperatorTokens}
	if cfg.Policies.Dir != "" && cfg.Audit.File != "" {
		file := cfg.Audit.File
		cc.ReadAudit = func(n int, tenant string) ([]server.AuditRecord, error) {
			// The console polls: read at most the log's last 8 MiB.
			recs, _, err := policies.TailAudit(file, n, tenant, 8<<20)
			out := make([]server.AuditRecord, len(recs))
			for i, r := range recs {
				out[i] = server.AuditRecord{Time: r.Time, Tenant: r.Tenant, Session: r.Session, Tool: r.Tool,
					Command: r.Command, Workdir: r.Workdir, Background: r.Background, Decision: string(r.Decision),
					Rule: r.Rule, Reason: r.Reason, Escalation: r.Escalation, Justification: r.Justification,
					Approval: r.Approval, Approver: r.Approver}
			}
			return out, err
		}
	}
	return cc
}
