// Package config is shellbox's configuration: one file (--config, or
// shellbox.yaml in the working directory or $XDG_CONFIG_HOME/shellbox),
// SHELLBOX_* environment variables (one per key: EnvBindings) and flags,
// in rising precedence, decoded strictly into Config. It is the one owner
// of every setting and its default; docs/configuration.md (the README's
// reference) documents each key. cmd/shellbox loads it and constructs
// from it; nothing else reads it.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/egress"
	"github.com/shellbox/shellbox/sandbox/hostdir"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/session"
)

// Config is the whole configuration: a file (--config, or shellbox.yaml in
// the working directory or $XDG_CONFIG_HOME/shellbox), SHELLBOX_* environment
// variables (SHELLBOX_LIMITS_TAILBYTES for limits.tailBytes) and flags, in
// rising precedence. The README's config reference documents every key.
type Config struct {
	// Backend is where commands run: docker, containerd, kube, local, or
	// BackendAuto (the default).
	Backend               string            `mapstructure:"backend"`
	Tenant                string            `mapstructure:"tenant"`
	Session               string            `mapstructure:"session"`
	EnableRunInBackground bool              `mapstructure:"enableRunInBackground"`
	Facts                 map[string]string `mapstructure:"facts"`
	Limits                executor.Limits   `mapstructure:"limits"`
	Local                 Local             `mapstructure:"local"`
	Sandbox               Sandbox           `mapstructure:"sandbox"`
	Docker                Docker            `mapstructure:"docker"`
	Containerd            Containerd        `mapstructure:"containerd"`
	Kube                  Kube              `mapstructure:"kube"`
	Server                Server            `mapstructure:"server"`
	Policies              Policies          `mapstructure:"policies"`
	Audit                 Audit             `mapstructure:"audit"`
	Secrets               Secrets           `mapstructure:"secrets"`
	Egress                Egress            `mapstructure:"egress"`
	Snapshots             Snapshots         `mapstructure:"snapshots"`
	Usage                 Usage             `mapstructure:"usage"`
}

// Usage configures the measuring of what sessions use (package usage) on
// the docker and containerd backends.
type Usage struct {
	// Dir holds the usage files, one per tenant and UTC day; "" is
	// <sandbox.stateDir>/usage.
	Dir string `mapstructure:"dir"`
	// Interval is how often each running sandbox's cgroup is read.
	Interval time.Duration `mapstructure:"interval"`
}

func (u *Usage) validate() error {
	if u.Interval < time.Second {
		return fmt.Errorf("interval %s: want at least 1s", u.Interval)
	}
	return nil
}

// Egress bounds where sandboxes' egress may lead from this host,
// whatever the policies allow (sandbox/egress).
type Egress struct {
	// Blocked are address ranges never dialled for a sandbox, but for an
	// address a policy's allowlist names literally: checked on the
	// addresses names resolve to.
	Blocked []string `mapstructure:"blocked"`
	// GrantBlocked are refused, with Blocked, to a call granted the
	// network permission.
	GrantBlocked []string `mapstructure:"grantBlocked"`
	// CADir holds the tenants' egress CAs (<tenant>.pem, key included) and
	// the placeholder key; "" is <sandbox.stateDir>/egress-ca.
	CADir string `mapstructure:"caDir"`
	// KeyFile, if set, is a file of at least 32 bytes from which the
	// tenants' CAs and the placeholder key are derived instead (CADir is
	// then unused): replicas given the same file relay every session's
	// egress alike (secrets.NewDerivedCAs).
	KeyFile string `mapstructure:"keyFile"`
	// UpstreamCA is a PEM file of CA certificates trusted, besides the
	// system's, for upstreams the relay terminates TLS to.
	UpstreamCA string `mapstructure:"upstreamCA"`
}

// Secrets says where the server finds the secrets policies' credentials
// name (package secrets): Dir, then SHELLBOX_SECRET_* variables.
type Secrets struct {
	// Dir holds one file per secret, named as the secret; "" for none.
	Dir string `mapstructure:"dir"`
}

func (e *Egress) validate() error {
	return session.EgressConfig{Blocked: e.Blocked, GrantBlocked: e.GrantBlocked}.Validate()
}

// Snapshots configures where suspended sessions are kept: their
// workspaces' snapshots and their records (sandbox/snapshot).
type Snapshots struct {
	// Store is "dir" (a directory on this host's disk: one host), "s3"
	// (any S3-compatible object store: a fleet, or a host whose sessions
	// must survive its disk), "none" (no session is suspended: an idle
	// one ends, its workspace deleted) or "auto" (the default: dir on
	// docker and containerd, none on kube, whose replicas share no disk).
	Store string `mapstructure:"store"`
	// Dir is the dir store's directory (default <sandbox.stateDir>/snapshots).
	Dir string `mapstructure:"dir"`
	// S3 is the s3 store.
	S3 SnapshotsS3 `mapstructure:"s3"`
	// SuspendedTTL deletes a session suspended that long, with its
	// snapshots, where its tenant's policy sets no limits.suspendedTTL
	// (default 7 days).
	SuspendedTTL time.Duration `mapstructure:"suspendedTTL"`
}

// SnapshotsS3 is the bucket of an s3 snapshot store.
type SnapshotsS3 struct {
	// Endpoint is host[:port], no scheme.
	Endpoint string `mapstructure:"endpoint"`
	Bucket   string `mapstructure:"bucket"`
	// Prefix, if set, ends with '/': the store's keys are under it.
	Prefix string `mapstructure:"prefix"`
	Region string `mapstructure:"region"`
	// Insecure speaks plain HTTP (a store on loopback or in the cluster).
	Insecure bool `mapstructure:"insecure"`
	// AccessKey and SecretKey are the credentials; SecretKeyFile, if set,
	// holds the secret key instead (a mounted Secret).
	AccessKey     string `mapstructure:"accessKey"`
	SecretKey     string `mapstructure:"secretKey"`
	SecretKeyFile string `mapstructure:"secretKeyFile"`
}

// The snapshot stores (Snapshots.Store).
const (
	StoreAuto = "auto"
	StoreDir  = "dir"
	StoreS3   = "s3"
	StoreNone = "none"
)

// StoreKind is the store the snapshots section chooses for backend.
func (s Snapshots) StoreKind(backend string) string {
	if s.Store != StoreAuto {
		return s.Store
	}
	if backend == "kube" || backend == "local" {
		return StoreNone
	}
	return StoreDir
}

func (s *Snapshots) validate() error {
	switch s.Store {
	case StoreAuto, StoreDir, StoreNone:
	case StoreS3:
		if s.S3.Endpoint == "" || s.S3.Bucket == "" {
			return fmt.Errorf("store s3 needs s3.endpoint and s3.bucket")
		}
		if s.S3.SecretKey != "" && s.S3.SecretKeyFile != "" {
			return fmt.Errorf("s3.secretKey and s3.secretKeyFile: set one")
		}
	default:
		return fmt.Errorf("store %q: want auto, dir, s3 or none", s.Store)
	}
	if s.SuspendedTTL < 0 {
		return fmt.Errorf("suspendedTTL %s: must not be negative", s.SuspendedTTL)
	}
	return nil
}

// Policies locates the per-tenant policy files.
type Policies struct {
	// Dir holds <tenant>.yaml files; empty runs every call unchecked.
	Dir string `mapstructure:"dir"`
}

// Audit configures the audit log of policy decisions.
type Audit struct {
	File     string `mapstructure:"file"`
	MaxBytes int64  `mapstructure:"maxBytes"`
	MaxFiles int    `mapstructure:"maxFiles"`
}

// Local configures the local (host process, unsandboxed) backend.
type Local struct {
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

// defaults are the default of every key, nested keys joined by "::".
// They are the keys SHELLBOX_* variables reach (EnvBindings).
func defaults() map[string]any {
	lim := executor.DefaultLimits()
	d := map[string]any{
		"backend":                BackendAuto,
		"tenant":                 "default",
		"session":                "default",
		"enableRunInBackground":  true,
		"facts":                  map[string]string{},
		"limits::defaultTimeout": lim.DefaultTimeout,
		"limits::maxTimeout":     lim.MaxTimeout,
		"limits::grace":          lim.Grace,
		"limits::tailBytes":      lim.TailBytes,
		"limits::bufferBytes":    lim.BufferBytes,
		"limits::spillLimit":     lim.SpillLimit,
		"local::root":            "",
		"local::home":            "",
		"local::spillDir":        defaultSpillDir(),
		"local::cgroup":          "auto",
		"policies::dir":          "",
		"audit::file":            stateFile("audit.log"),
		"audit::maxBytes":        64 << 20,
		"audit::maxFiles":        5,
		"egress::caDir":          "",
		"egress::keyFile":        "",
		"egress::upstreamCA":     "",
		"secrets::dir":           "",
		"egress::blocked":        egress.HostRanges,
		"egress::grantBlocked":   egress.PrivateRanges,

		"snapshots::store":             StoreAuto,
		"snapshots::dir":               "",
		"snapshots::suspendedTTL":      7 * 24 * time.Hour,
		"snapshots::s3::endpoint":      "",
		"snapshots::s3::bucket":        "",
		"snapshots::s3::prefix":        "",
		"snapshots::s3::region":        "",
		"snapshots::s3::insecure":      false,
		"snapshots::s3::accessKey":     "",
		"snapshots::s3::secretKey":     "",
		"snapshots::s3::secretKeyFile": "",

		"usage::dir":      "",
		"usage::interval": 10 * time.Second,
	}
	for _, more := range []map[string]any{sandboxDefaults(), runtimeDefaults(), serverDefaults()} {
		maps.Copy(d, more)
	}
	return d
}

// BackendAuto, the default backend, is the first of AutoBackends whose
// engine answers, found when a command needs its backend (cmd/shellbox);
// with none, that command refuses to start. The local backend, which runs
// commands unsandboxed on the host, is never chosen for it: only named.
const BackendAuto = "auto"

// AutoBackends are the backends BackendAuto tries, in order.
var AutoBackends = []string{"docker", "containerd"}

// EnvPrefix starts the name of every variable that sets a key.
const EnvPrefix = "SHELLBOX_"

// ClientEnv are the variables the client commands read themselves (the
// server a command talks to, and its token). They set no key: a
// `shellbox serve` started in the shell of a client must not take
// SHELLBOX_SERVER for its server section (as viper's AutomaticEnv did,
// failing with `logLevel ""`). A test holds them apart from EnvBindings.
var ClientEnv = []string{EnvServer, EnvToken}

// The client's variables (ClientEnv).
const (
	EnvServer = EnvPrefix + "SERVER"
	EnvToken  = EnvPrefix + "TOKEN"
)

// EnvName is the variable of a key: SHELLBOX_ and the key's path, upper
// case, joined by underscores (limits.tailBytes: SHELLBOX_LIMITS_TAILBYTES).
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer("::", "_", ".", "_").Replace(key))
}

// EnvBindings maps each variable that sets a key to that key (dotted):
// exactly one per key with a default, never one per section (SHELLBOX_SERVER
// is no key), and nothing else with the prefix is read.
func EnvBindings() map[string]string {
	b := make(map[string]string)
	for k := range defaults() {
		b[EnvName(k)] = strings.ReplaceAll(k, "::", ".")
	}
	return b
}

// newViper sets the defaults of every key, binds each key's own variable
// (EnvBindings: an explicit list, not viper's AutomaticEnv, which also
// reads a variable named like a section as that whole section) and binds
// flags.
func newViper(flags *pflag.FlagSet) (*viper.Viper, error) {
	// "::" separates nested keys, so map keys may hold dots (label names).
	v := viper.NewWithOptions(viper.KeyDelimiter("::"))
	for k, val := range defaults() {
		v.SetDefault(k, val)
		if err := v.BindEnv(k, EnvName(k)); err != nil {
			return nil, fmt.Errorf("config: bind %s: %w", EnvName(k), err)
		}
	}

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

// Load reads file (if given, it must exist) or the default locations,
// and decodes strictly: an unknown key or a wrong type is an error naming it.
func Load(flags *pflag.FlagSet, file string) (Config, error) {
	v, err := newViper(flags)
	if err != nil {
		return Config{}, err
	}
	if file == "" {
		file = DefaultFile()
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
	if err := c.Sandbox.validate(); err != nil {
		return Config{}, fmt.Errorf("config: sandbox: %w", err)
	}
	if c.Sandbox.CreateQueue == 0 {
		c.Sandbox.CreateQueue = sandbox.NoCreateQueue
	}
	if err := c.Egress.validate(); err != nil {
		return Config{}, fmt.Errorf("config: egress: %w", err)
	}
	if err := c.Snapshots.validate(); err != nil {
		return Config{}, fmt.Errorf("config: snapshots: %w", err)
	}
	if err := c.Usage.validate(); err != nil {
		return Config{}, fmt.Errorf("config: usage: %w", err)
	}
	if c.Backend == "kube" {
		if v.InConfig("sandbox::owner") {
			return Config{}, fmt.Errorf("config: sandbox.owner: not used by the kube backend, whose sessions' owner is kube.release")
		}
		if err := c.Kube.validate(); err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
	}
	if err := c.Server.addTokensFile(); err != nil {
		return Config{}, fmt.Errorf("config: server.tokensFile: %w", err)
	}
	if err := c.Server.validate(); err != nil {
		return Config{}, fmt.Errorf("config: server: %w", err)
	}
	return c, nil
}

// Owner is the owner of the sessions' sandboxes: the one a server adopts
// and reaps. On the kube backend it is kube.release (a pod's hostname
// changes with every restart); elsewhere sandbox.owner.
func (c Config) Owner() string {
	if c.Backend == "kube" {
		return c.Kube.Runtime().Release
	}
	return c.Sandbox.Owner
}

// DefaultFile is the first of ./shellbox.yaml and
// $XDG_CONFIG_HOME/shellbox/shellbox.yaml that exists, or "". Names are
// explicit: viper's own search would also take a file called "shellbox"
// (such as the binary itself).
func DefaultFile() string {
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

// Server configures `shellbox serve` (config key server).
type Server struct {
	Listen          string        `mapstructure:"listen"`
	MaxBodyBytes    int64         `mapstructure:"maxBodyBytes"`
	ShutdownTimeout time.Duration `mapstructure:"shutdownTimeout"`
	// DrainDelay: on SIGTERM, how long the server still takes new calls
	// (failing /readyz, closing each connection after its answer: see
	// server.Retire) before it refuses them and drains.
	DrainDelay        time.Duration `mapstructure:"drainDelay"`
	IdleTTL           time.Duration `mapstructure:"idleTTL"`
	EventBuffer       int           `mapstructure:"eventBuffer"`
	MCPSessionTimeout time.Duration `mapstructure:"mcpSessionTimeout"`
	LogLevel          string        `mapstructure:"logLevel"`
	// Tenants maps each tenant to its token hashes, limits and what its
	// sessions may choose.
	Tenants map[string]Tenant `mapstructure:"tenants"`
	// OperatorTokens are sha256:<hex> hashes of the operator console's
	// all-tenant logins (/ui); tenant tokens see their own tenant there.
	OperatorTokens []string `mapstructure:"operatorTokens"`
	// TokensFile, if set, is a YAML file of more token hashes, kept apart
	// from the rest of the config (a Kubernetes Secret): TokensFileFormat.
	TokensFile string `mapstructure:"tokensFile"`
}

// Tenant is one tenant of the server.
type Tenant struct {
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
		"server::drainDelay":        time.Duration(0),
		"server::idleTTL":           time.Duration(0),
		"server::eventBuffer":       server.DefaultEventBuffer,
		"server::mcpSessionTimeout": time.Hour,
		"server::logLevel":          "info",
		"server::tenants":           map[string]any{},
		"server::operatorTokens":    []string{},
		"server::tokensFile":        "",
	}
}

// TokensFileFormat is the format of server.tokensFile: hashes (`shellbox
// token`) added to server.tenants.NAME.tokens and server.operatorTokens. A
// tenant named only here gets the default limits.
const TokensFileFormat = "tenants: {NAME: [sha256:…]}, operatorTokens: [sha256:…]"

// maxTokensFileBytes bounds server.tokensFile.
const maxTokensFileBytes = 1 << 20

type tokensFile struct {
	Tenants        map[string][]string `yaml:"tenants"`
	OperatorTokens []string            `yaml:"operatorTokens"`
}

// addTokensFile adds the hashes of TokensFile, read once (the server
// reads its config at start).
func (c *Server) addTokensFile() error {
	if c.TokensFile == "" {
		return nil
	}
	f, err := os.Open(c.TokensFile)
	if err != nil {
		return err
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, maxTokensFileBytes+1))
	if err != nil {
		return fmt.Errorf("%s: %w", c.TokensFile, err)
	}
	if len(src) > maxTokensFileBytes {
		return fmt.Errorf("%s: larger than %d bytes", c.TokensFile, maxTokensFileBytes)
	}
	var tf tokensFile
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&tf); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w (want %s)", c.TokensFile, err, TokensFileFormat)
	}
	tenants := make(map[string]Tenant, len(c.Tenants)+len(tf.Tenants))
	maps.Copy(tenants, c.Tenants)
	for name, hashes := range tf.Tenants {
		// viper folds the config's keys to lower case: so must this file.
		name = strings.ToLower(name)
		t := tenants[name]
		t.Tokens = append(slices.Clone(t.Tokens), hashes...)
		tenants[name] = t
	}
	c.Tenants = tenants
	c.OperatorTokens = append(slices.Clone(c.OperatorTokens), tf.OperatorTokens...)
	return nil
}

func (c Server) validate() error {
	for name, t := range c.Tenants {
		if err := executor.ValidSession(name); err != nil {
			return fmt.Errorf("tenants: %q: %w", name, err)
		}
		if len(t.Tokens) == 0 {
			return fmt.Errorf("tenants::%s: no tokens (make one with `shellbox token`)", name)
		}
	}
	if c.DrainDelay < 0 || c.ShutdownTimeout < 0 {
		return fmt.Errorf("drainDelay %s, shutdownTimeout %s: want durations of 0 or more", c.DrainDelay, c.ShutdownTimeout)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("logLevel %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}

// Sandbox is the sandbox of every session on the sandboxed backends
// (docker, containerd): one hardened container per (tenant, session),
// commands run through the agent inside it. A tenant's policy overrides
// the image, runtime, resources and user.
type Sandbox struct {
	StateDir string `mapstructure:"stateDir"`
	Owner    string `mapstructure:"owner"`
	Image    string `mapstructure:"image"`
	Runtime  string `mapstructure:"runtime"`
	Agent    string `mapstructure:"agent"`

	// WorkspaceMedium is what the sessions' workspaces on the host are
	// made of (docker, containerd): disk (ext4 images under StateDir,
	// loop-mounted; memory where the host has no loop devices) or memory
	// (tmpfs).
	WorkspaceMedium hostdir.Medium `mapstructure:"workspaceMedium"`
	// Resources are the sandbox.cpus, memoryBytes, pidsLimit,
	// workspaceBytes, tmpBytes and spillBytes keys.
	confine.Resources `mapstructure:",squash"`
	// Labels are extra labels on every sandbox (e.g. for an operator's
	// inventory); shellbox's own org.shellbox.* labels cannot be set.
	Labels map[string]string `mapstructure:"labels"`
	// MaxCreating bounds the sandboxes being created at once; CreateQueue
	// the creations waiting for a slot, each at most CreateQueueWait
	// (then the session's call fails, saying how busy the host is).
	// Calls to existing sandboxes never wait on them. createQueue: 0 in the
	// file means no queue; Load resolves it to sandbox.NoCreateQueue, so
	// that in a loaded Config, as in sandbox.Config and session.Admission,
	// zero means the default and NoCreateQueue none.
	MaxCreating     int           `mapstructure:"maxCreating"`
	CreateQueue     int           `mapstructure:"createQueue"`
	CreateQueueWait time.Duration `mapstructure:"createQueueWait"`
}

func (c Sandbox) validate() error {
	if _, err := hostdir.ParseMedium(string(c.WorkspaceMedium)); err != nil {
		return fmt.Errorf("workspaceMedium %q: want disk or memory", c.WorkspaceMedium)
	}
	switch {
	case !(c.TenantCPUs >= 0 && c.TenantCPUs <= 1024): // NaN too
		return fmt.Errorf("tenantCpus %v: must be 0 (none) or positive, at most 1024", c.TenantCPUs)
	case c.TenantCPUs > 0 && c.TenantCPUs < c.CPUs:
		return fmt.Errorf("tenantCpus %v: below cpus %v (the tenant's sandboxes together get at least one sandbox's quota)", c.TenantCPUs, c.CPUs)
	case c.MaxCreating < 1:
		return fmt.Errorf("maxCreating %d: must be at least 1", c.MaxCreating)
	case c.CreateQueue < 0:
		return fmt.Errorf("createQueue %d: must not be negative", c.CreateQueue)
	case c.CreateQueueWait <= 0:
		return fmt.Errorf("createQueueWait %s: must be positive", c.CreateQueueWait)
	}
	return nil
}

// Admission is the session layer's bound on sandbox creations.
func (c Sandbox) Admission() session.Admission {
	return session.Admission{MaxCreating: c.MaxCreating, CreateQueue: c.CreateQueue, CreateQueueWait: c.CreateQueueWait}
}

func sandboxDefaults() map[string]any {
	d := sandbox.DefaultSpec("t", "s")
	owner := "shellbox"
	if h, err := os.Hostname(); err == nil && sandbox.CheckID("owner", "shellbox-"+h) == nil {
		owner = "shellbox-" + h
	}
	return map[string]any{
		"sandbox::stateDir":        "/var/lib/shellbox",
		"sandbox::workspaceMedium": string(hostdir.MediumDisk),
		"sandbox::owner":           owner,
		"sandbox::image":           "shellbox-sandbox:bookworm",
		"sandbox::runtime":         d.Runtime,
		"sandbox::agent":           "",
		"sandbox::cpus":            d.CPUs,
		"sandbox::tenantCpus":      d.TenantCPUs,
		"sandbox::memoryBytes":     d.MemoryBytes,
		"sandbox::pidsLimit":       d.PidsLimit,
		"sandbox::workspaceBytes":  d.WorkspaceBytes,
		"sandbox::tmpBytes":        d.TmpBytes,
		"sandbox::spillBytes":      d.SpillBytes,
		"sandbox::labels":          map[string]string{},
		"sandbox::maxCreating":     sandbox.DefaultMaxCreating,
		"sandbox::createQueue":     sandbox.DefaultCreateQueue,
		"sandbox::createQueueWait": sandbox.DefaultCreateQueueWait,
	}
}

// Defaults are the sandbox settings of sessions where a policy sets none.
func (c Sandbox) Defaults() session.Defaults {
	return session.Defaults{Image: c.Image, Runtime: c.Runtime, Resources: c.Resources, Labels: c.Labels}
}

// Docker is what only the docker backend needs. The engine itself is
// found through the environment (DOCKER_HOST, ...).
type Docker struct {
	// EngineRuntimes maps a policy's runtime (runc, runsc) to the name the
	// engine registered it under, when they differ (daemon.json "runtimes").
	EngineRuntimes map[string]string `mapstructure:"engineRuntimes"`
}

// Containerd is what only the containerd backend needs.
type Containerd struct {
	Address     string `mapstructure:"address"`
	Namespace   string `mapstructure:"namespace"`
	Snapshotter string `mapstructure:"snapshotter"`
	// RuncRoot is runc's state directory, for a containerd that runs beside
	// another one ("" = the shim's default).
	RuncRoot string `mapstructure:"runcRoot"`
	// Checkpoint runs runsc sessions under containerd's runc v2 shim with
	// a runsc wrapper made from RuntimeConfigs' runsc.toml, so that a
	// policy's sandbox.suspend: memory can checkpoint them
	// (docs/checkpoint.md).
	Checkpoint bool `mapstructure:"checkpoint"`
	// Runtimes maps a policy's runtime (runc, runsc) to containerd's
	// runtime (shim) name; RuntimeConfigs to the options file its shim
	// reads (runsc.toml).
	Runtimes       map[string]string `mapstructure:"runtimes"`
	RuntimeConfigs map[string]string `mapstructure:"runtimeConfigs"`
}

// Kube is what only the kube backend needs (kube/): one pod per
// session in Namespace. The cluster is reached with Kubeconfig, or from
// inside it (the pod's service account) when that is empty.
type Kube struct {
	Namespace  string `mapstructure:"namespace"`
	Kubeconfig string `mapstructure:"kubeconfig"`
	// Release names the installation (the Helm release): the session
	// pods' owner and org.shellbox.release label.
	Release         string            `mapstructure:"release"`
	AgentImage      string            `mapstructure:"agentImage"`
	AgentPath       string            `mapstructure:"agentPath"`
	AgentPort       int32             `mapstructure:"agentPort"`
	RuntimeClasses  map[string]string `mapstructure:"runtimeClasses"`
	PodSecurity     string            `mapstructure:"podSecurity"`
	ImagePullPolicy string            `mapstructure:"imagePullPolicy"`
	CPURequestRatio float64           `mapstructure:"cpuRequestRatio"`
	AgentDirBytes   int64             `mapstructure:"agentDirBytes"`
	// WorkspaceMedium is a session pod's /workspace: memory or disk
	// (kube.Config.WorkspaceMedium says what each costs).
	WorkspaceMedium string `mapstructure:"workspaceMedium"`
	// GracePeriodSeconds is the session pods' termination grace period
	// when someone else deletes one (0: 2 s, or
	// kube.DefaultSaveGraceSeconds with a snapshot store, which saves a
	// deleted pod's workspace in it).
	GracePeriodSeconds int64         `mapstructure:"gracePeriodSeconds"`
	ReadyTimeout       time.Duration `mapstructure:"readyTimeout"`
	// ServerSelector are the server pods' labels, which the session pods'
	// NetworkPolicy admits (empty: shellbox manages no NetworkPolicy);
	// ServerNamespace is their namespace (default Namespace).
	ServerSelector  map[string]string `mapstructure:"serverSelector"`
	ServerNamespace string            `mapstructure:"serverNamespace"`
	// Approvals is where serve holds the asks for approval: "cluster"
	// (Approval objects in Namespace, shared by the release's replicas:
	// kube/approvals) or "memory" (this process's, as on the
	// other backends: one replica only).
	Approvals string `mapstructure:"approvals"`
	// QPS and Burst bound this process's requests to the API server
	// (client-go's client-side rate limiter, per client): the runtime's
	// pod polls, claims and last-use patches, the relay's and the
	// approvals' requests. client-go's own defaults (5/s, burst 10) made
	// a warm-pool claim wait behind the leader's polls of pods it fills;
	// 50/100 made 50 claims at once (8–10 requests each) wait ~8 s for
	// their turn. The API server's own fairness (APF) still protects it.
	QPS   float32 `mapstructure:"qps"`
	Burst int     `mapstructure:"burst"`
}

// Stores of kube.approvals.
const (
	ApprovalsCluster = "cluster"
	ApprovalsMemory  = "memory"
)

// Runtime is the kube configuration of k.
func (k Kube) Runtime() kube.Config {
	return kube.Config{Namespace: k.Namespace, Release: k.Release, AgentImage: k.AgentImage, AgentPath: k.AgentPath,
		AgentPort: k.AgentPort, RuntimeClasses: k.RuntimeClasses, PodSecurity: k.PodSecurity,
		ImagePullPolicy: corev1.PullPolicy(k.ImagePullPolicy), CPURequestRatio: k.CPURequestRatio,
		AgentDirBytes: k.AgentDirBytes, WorkspaceMedium: sandbox.WorkspaceMedium(k.WorkspaceMedium), GracePeriodSeconds: k.GracePeriodSeconds, ReadyTimeout: k.ReadyTimeout,
		ServerSelector: k.ServerSelector, ServerNamespace: k.ServerNamespace}
}

func (k Kube) validate() error {
	if err := k.Runtime().Validate(); err != nil {
		return err
	}
	if err := confine.CheckID("kube.release", k.Release); err != nil {
		return err
	}
	if k.QPS <= 0 || k.Burst < 1 {
		return fmt.Errorf("kube.qps %g and kube.burst %d: both must be positive", k.QPS, k.Burst)
	}
	if k.Approvals != ApprovalsCluster && k.Approvals != ApprovalsMemory {
		return fmt.Errorf("kube.approvals %q: %s or %s", k.Approvals, ApprovalsCluster, ApprovalsMemory)
	}
	return nil
}

func runtimeDefaults() map[string]any {
	return map[string]any{
		"kube::namespace":            "shellbox-sessions",
		"kube::kubeconfig":           "",
		"kube::release":              kube.DefaultRelease,
		"kube::agentImage":           "",
		"kube::agentPath":            kube.DefaultAgentPath,
		"kube::agentPort":            kube.DefaultAgentPort,
		"kube::runtimeClasses":       map[string]string{sandbox.RuntimeRunc: "", sandbox.RuntimeRunsc: kube.DefaultGVisorClass},
		"kube::podSecurity":          kube.PodSecurityBaseline,
		"kube::imagePullPolicy":      string(corev1.PullIfNotPresent),
		"kube::cpuRequestRatio":      0.1,
		"kube::agentDirBytes":        int64(128 * sandbox.MiB),
		"kube::workspaceMedium":      string(sandbox.WorkspaceMemory),
		"kube::gracePeriodSeconds":   int64(0), // kube's: 2 s, or kube.DefaultSaveGraceSeconds with a snapshot store
		"kube::readyTimeout":         kube.DefaultReadyTimeout,
		"kube::serverSelector":       map[string]string{},
		"kube::serverNamespace":      "",
		"kube::approvals":            ApprovalsCluster,
		"kube::qps":                  float32(200),
		"kube::burst":                400,
		"docker::engineRuntimes":     map[string]string{},
		"containerd::address":        "/run/containerd/containerd.sock",
		"containerd::namespace":      "shellbox",
		"containerd::snapshotter":    "",
		"containerd::runcRoot":       "",
		"containerd::checkpoint":     false,
		"containerd::runtimes":       map[string]string{},
		"containerd::runtimeConfigs": map[string]string{},
	}
}

// movedKeys are the sandbox settings that lived under docker.* before the
// containerd backend: a file that still sets them is refused with where
// they went, rather than with viper's "invalid keys".
var movedKeys = []string{"stateDir", "owner", "image", "runtime", "agent", "cpus", "memoryBytes",
	"pidsLimit", "workspaceBytes", "tmpBytes", "spillBytes", "labels"}

func checkMovedKeys(v *viper.Viper) error {
	var moved []string
	for _, k := range movedKeys {
		if v.InConfig("docker::" + strings.ToLower(k)) {
			moved = append(moved, "docker."+k+" is now sandbox."+k)
		}
	}
	if len(moved) > 0 {
		return fmt.Errorf("%s (the sandbox settings are the same on every runtime)", strings.Join(moved, "; "))
	}
	return nil
}

// Defaults returns the configuration of no file and no flags: every
// default, with SHELLBOX_* environment variables applied.
func Defaults() (Config, error) {
	v, err := newViper(nil)
	if err != nil {
		return Config{}, err
	}
	var c Config
	if err := v.UnmarshalExact(&c); err != nil {
		return Config{}, err
	}
	return c, nil
}
