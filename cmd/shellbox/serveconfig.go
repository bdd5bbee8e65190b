package main

import (
	"fmt"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/server"
)

// ServerConfig configures `shellbox serve` (config key server).
type ServerConfig struct {
	Listen            string        `mapstructure:"listen"`
	MaxBodyBytes      int64         `mapstructure:"maxBodyBytes"`
	ShutdownTimeout   time.Duration `mapstructure:"shutdownTimeout"`
	IdleTTL           time.Duration `mapstructure:"idleTTL"`
	EventBuffer       int           `mapstructure:"eventBuffer"`
	MCPSessionTimeout time.Duration `mapstructure:"mcpSessionTimeout"`
	LogLevel          string        `mapstructure:"logLevel"`
	// Tenants maps each tenant to its token hashes, limits and what its
	// sessions may choose.
	Tenants map[string]TenantConfig `mapstructure:"tenants"`
	// OperatorTokens are sha256:<hex> hashes of the operator console's
	// all-tenant logins (/ui); tenant tokens see their own tenant there.
	OperatorTokens []string `mapstructure:"operatorTokens"`
}

// TenantConfig is one tenant of the server.
type TenantConfig struct {
	server.TenantConfig `mapstructure:",squash"`
	// Images a session may ask for; the first is the tenant's default.
	// Empty: sandbox.image only.
	Images []string `mapstructure:"images"`
	// Runtimes a session may ask for; the first is the default. Empty:
	// sandbox.runtime only.
	Runtimes []string `mapstructure:"runtimes"`
}

func serverDefaults() map[string]any {
	return map[string]any{
		"server::listen":            "127.0.0.1:8080",
		"server::maxBodyBytes":      int64(server.DefaultMaxBodyBytes),
		"server::shutdownTimeout":   30 * time.Second,
		"server::idleTTL":           time.Duration(0),
		"server::eventBuffer":       server.DefaultEventBuffer,
		"server::mcpSessionTimeout": time.Hour,
		"server::logLevel":          "info",
		"server::tenants":           map[string]any{},
		"server::operatorTokens":    []string{},
	}
}

func (c ServerConfig) validate() error {
	for name, t := range c.Tenants {
		if err := executor.ValidSession(name); err != nil {
			return fmt.Errorf("tenants: %q: %w", name, err)
		}
		if len(t.Tokens) == 0 {
			return fmt.Errorf("tenants::%s: no tokens (make one with `shellbox token`)", name)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("logLevel %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}

// consoleConfig is the operator console's: its operator tokens, and the
// audit log it tails (when policies, which write it, are on).
func consoleConfig(cfg Config) server.ConsoleConfig {
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
