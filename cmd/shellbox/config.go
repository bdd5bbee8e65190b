package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox/egress"
	"github.com/shellbox/shellbox/session"
)

// Config is the whole configuration: a file (--config, or shellbox.yaml in
// the working directory or $XDG_CONFIG_HOME/shellbox), SHELLBOX_* environment
// variables (SHELLBOX_LIMITS_TAILBYTES for limits.tailBytes) and flags, in
// rising precedence. The README's config reference documents every key.
type Config struct {
	Backend               string            `mapstructure:"backend"`
	Tenant                string            `mapstructure:"tenant"`
	Session               string            `mapstructure:"session"`
	EnableRunInBackground bool              `mapstructure:"enableRunInBackground"`
	Facts                 map[string]string `mapstructure:"facts"`
	Limits                executor.Limits   `mapstructure:"limits"`
	Local                 LocalConfig       `mapstructure:"local"`
	Sandbox               SandboxConfig     `mapstructure:"sandbox"`
	Docker                DockerConfig      `mapstructure:"docker"`
	Containerd            ContainerdConfig  `mapstructure:"containerd"`
	Server                ServerConfig      `mapstructure:"server"`
	Policies              PoliciesConfig    `mapstructure:"policies"`
	Audit                 AuditConfig       `mapstructure:"audit"`
	Egress                EgressConfig      `mapstructure:"egress"`
}

// EgressConfig bounds where sandboxes' egress may lead from this host,
// whatever the policies allow (sandbox/egress).
type EgressConfig struct {
	// Blocked are address ranges never dialled for a sandbox, but for an
	// address a policy's allowlist names literally: checked on the
	// addresses names resolve to.
	Blocked []string `mapstructure:"blocked"`
	// GrantBlocked are refused, with Blocked, to a call granted the
	// network permission.
	GrantBlocked []string `mapstructure:"grantBlocked"`
}

func (e *EgressConfig) validate() error {
	return session.EgressConfig{Blocked: e.Blocked, GrantBlocked: e.GrantBlocked}.Validate()
}

// PoliciesConfig locates the per-tenant policy files.
type PoliciesConfig struct {
	// Dir holds <tenant>.yaml files; empty runs every call unchecked.
	Dir string `mapstructure:"dir"`
}

// AuditConfig configures the audit log of policy decisions.
type AuditConfig struct {
	File     string `mapstructure:"file"`
	MaxBytes int64  `mapstructure:"maxBytes"`
	MaxFiles int    `mapstructure:"maxFiles"`
}

// LocalConfig configures the local (host process, unsandboxed) backend.
type LocalConfig struct {
	Root     string `mapstructure:"root"`
	Home     string `mapstructure:"home"`
	SpillDir string `mapstructure:"spillDir"`
	Cgroup   string `mapstructure:"cgroup"`
}

func defaultSpillDir() string { return stateFile("spill") }

// stateFile is name in shellbox's state directory.
func stateFile(name string) string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "shellbox", name)
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "shellbox", name)
	}
	return filepath.Join(os.TempDir(), "shellbox-"+name)
}

// newViper sets the defaults of every key (so SHELLBOX_* variables reach
// them all) and binds flags.
func newViper(flags *pflag.FlagSet) (*viper.Viper, error) {
	// "::" separates nested keys, so map keys may hold dots (label names).
	v := viper.NewWithOptions(viper.KeyDelimiter("::"))
	lim := executor.DefaultLimits()
	v.SetDefault("backend", "local")
	v.SetDefault("tenant", "default")
	v.SetDefault("session", "default")
	v.SetDefault("enableRunInBackground", true)
	v.SetDefault("facts", map[string]string{})
	v.SetDefault("limits::defaultTimeout", lim.DefaultTimeout)
	v.SetDefault("limits::maxTimeout", lim.MaxTimeout)
	v.SetDefault("limits::grace", lim.Grace)
	v.SetDefault("limits::tailBytes", lim.TailBytes)
	v.SetDefault("limits::bufferBytes", lim.BufferBytes)
	v.SetDefault("limits::spillLimit", lim.SpillLimit)
	v.SetDefault("local::root", "")
	v.SetDefault("local::home", "")
	v.SetDefault("local::spillDir", defaultSpillDir())
	v.SetDefault("local::cgroup", "auto")
	v.SetDefault("policies::dir", "")
	v.SetDefault("audit::file", stateFile("audit.log"))
	v.SetDefault("audit::maxBytes", 64<<20)
	v.SetDefault("audit::maxFiles", 5)
	v.SetDefault("egress::blocked", egress.HostRanges)
	v.SetDefault("egress::grantBlocked", egress.PrivateRanges)
	for k, val := range sandboxDefaults() {
		v.SetDefault(k, val)
	}
	for k, val := range runtimeDefaults() {
		v.SetDefault(k, val)
	}
	for k, val := range serverDefaults() {
		v.SetDefault(k, val)
	}

	v.SetEnvPrefix("SHELLBOX")
	v.SetEnvKeyReplacer(strings.NewReplacer("::", "_"))
	v.AutomaticEnv()

	if flags != nil {
		for key, name := range map[string]string{"backend": "backend", "session": "session", "tenant": "tenant", "server::listen": "listen", "policies::dir": "policies"} {
			if f := flags.Lookup(name); f != nil {
				if err := v.BindPFlag(key, f); err != nil {
					return nil, err
				}
			}
		}
	}
	return v, nil
}

// loadConfig reads file (if given, it must exist) or the default locations,
// and decodes strictly: an unknown key or a wrong type is an error naming it.
func loadConfig(flags *pflag.FlagSet, file string) (Config, error) {
	v, err := newViper(flags)
	if err != nil {
		return Config{}, err
	}
	if file == "" {
		file = defaultConfigFile()
	}
	if file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", file, err)
		}
	}
	if err := checkMovedKeys(v); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", v.ConfigFileUsed(), err)
	}
	var c Config
	if err := v.UnmarshalExact(&c); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", orDefault(v.ConfigFileUsed(), "(defaults and environment)"), err)
	}
	// viper folds keys to lower case; DSH_* names are upper case.
	facts := make(map[string]string, len(c.Facts))
	for k, val := range c.Facts {
		facts[strings.ToUpper(k)] = val
	}
	c.Facts = facts
	if err := c.Limits.Validate(); err != nil {
		return Config{}, fmt.Errorf("config: limits: %w", err)
	}
	if err := executor.ValidSession(c.Session); err != nil {
		return Config{}, fmt.Errorf("config: session: %w", err)
	}
	if err := executor.ValidSession(c.Tenant); err != nil {
		return Config{}, fmt.Errorf("config: tenant: %w", err)
	}
	if err := c.Server.validate(); err != nil {
		return Config{}, fmt.Errorf("config: server: %w", err)
	}
	if err := c.Egress.validate(); err != nil {
		return Config{}, fmt.Errorf("config: egress: %w", err)
	}
	return c, nil
}

// defaultConfigFile is the first of ./shellbox.yaml and
// $XDG_CONFIG_HOME/shellbox/shellbox.yaml that exists, or "". Names are
// explicit: viper's own search would also take a file called "shellbox"
// (such as the binary itself).
func defaultConfigFile() string {
	candidates := []string{"shellbox.yaml"}
	if d, err := os.UserConfigDir(); err == nil {
		candidates = append(candidates, filepath.Join(d, "shellbox", "shellbox.yaml"))
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
			return c
		}
	}
	return ""
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
