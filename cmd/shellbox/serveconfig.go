package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/shellbox/shellbox/executor"
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

// image and runtime of a new session of tenant: the asked one if the tenant
// allows it, else the tenant's default.
func (c Config) sessionImage(tenant, asked string) (string, error) {
	return choose("image", tenant, asked, c.Server.Tenants[tenant].Images, c.Sandbox.Image)
}

func (c Config) sessionRuntime(tenant, asked string) (string, error) {
	return choose("runtime", tenant, asked, c.Server.Tenants[tenant].Runtimes, c.Sandbox.Runtime)
}

func choose(what, tenant, asked string, allowed []string, def string) (string, error) {
	if len(allowed) == 0 {
		allowed = []string{def}
	}
	if asked == "" {
		return allowed[0], nil
	}
	if !slices.Contains(allowed, asked) {
		return "", server.Errorf(server.ErrNotAllowed, "%s %q is not allowed for tenant %s (allowed: %v)", what, asked, tenant, allowed)
	}
	return asked, nil
}
