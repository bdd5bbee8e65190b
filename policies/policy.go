package policies

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/internal/cmdmatch"
	"github.com/shellbox/shellbox/usage"
)

// Decision is what a policy says about a call.
type Decision string

const (
	Allow Decision = "allow"
	Ask   Decision = "ask"
	Deny  Decision = "deny"
)

// rank orders decisions by strictness: the strictest wins.
func (d Decision) rank() int {
	switch d {
	case Allow:
		return 0
	case Ask:
		return 1
	}
	return 2 // deny, and anything unknown is treated as deny
}

// Stricter returns the stricter of d and o.
func (d Decision) Stricter(o Decision) Decision {
	if o.rank() > d.rank() {
		return o
	}
	return d
}

func parseDecision(s string) (Decision, bool) {
	switch d := Decision(s); d {
	case Allow, Ask, Deny:
		return d, true
	}
	return "", false
}

// Names of the built-in rules a decision can come from. Policy rules may not
// use them.
const (
	RuleDefault     = "default"     // no rule matched a simple command
	RuleUnparseable = "unparseable" // the command could not be parsed
	RuleDynamic     = "dynamic"     // a command name that is not a literal
	RuleOpaque      = "opaque"      // runs code the command does not show
	RuleTool        = "tools"       // the tool (or background) is disabled
	RuleEscalation  = "escalations" // escalations.default for a permission
	RuleApprover    = "approver"    // an approver denied, or nobody answered
	RuleLimit       = "limits"      // a quota of the policy's limits is reached
)

// Tools are the tools a tenant may use.
type Tools struct {
	Bash       bool `json:"bash"`
	Pwsh       bool `json:"pwsh"`
	Background bool `json:"background"`
}

// Network is the sandbox's network: none when Allow is empty, else the
// host:port destinations it may reach through the egress proxy
// (sandbox/egress; entry syntax in confine.Allowlist).
type Network struct {
	Allow []string `json:"allow,omitempty"`
	// Credentials are injected by the relay into requests to their hosts
	// (credentials.go).
	Credentials []Credential `json:"credentials,omitempty"`
	// HTTP are rules the relay judges requests to their hosts by
	// (httprules.go).
	HTTP []HTTPRules `json:"http,omitempty"`
	list *confine.Allowlist
}

// None reports whether the sandbox gets no network.
func (n Network) None() bool { return len(n.Allow) == 0 }

// Mount is a host directory mounted into a sandbox: an entry of
// sandbox.mounts (a directory sessions may have mounted), or one of a
// session's mounts (SessionMounts), its source resolved.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
	// Root is, in a session's mount, the resolved source of the entry that
	// allowed it (Source or a directory above it): the sandbox opens Source
	// beneath it without following symlinks (sandbox.Mount.Root).
	Root string `json:"-"`
}

// User is who commands run as inside the sandbox.
type User struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Policy is one tenant's loaded, validated policy. It is immutable: a reload
// builds a new one.
type Policy struct {
	Tenant string
	File   string
	// Default decides a simple command no rule matches; Unparseable a command
	// that cannot be parsed or whose command name is not a literal (never
	// allow); Opaque a command that runs code it does not show (an
	// interpreter, a script file, make) and no rule names, by default
	// Unparseable's decision.
	Default     Decision
	Unparseable Decision
	Opaque      Decision
	// AskTimeout is how long an ask waits for an approver before it is
	// denied.
	AskTimeout time.Duration

	// Env are plain variables every call gets, over the executor's base
	// environment (PATH, HOME, LANG, the image's); never DSH_* (tools lays
	// the managed ones over them) nor SHELLBOX_*. Nil when the file sets
	// none.
	Env map[string]string

	Tools        Tools
	Images       []string // allowed images; empty: only DefaultImage (or the backend's)
	DefaultImage string   // "" leaves the backend's configured image
	Runtime      string
	CPUs         float64
	// TenantCPUs bounds all the tenant's sandboxes on one host together,
	// in cores (sandbox.tenantCpus; 0: no bound beyond CPUs each).
	TenantCPUs  float64
	MemoryBytes int64
	PidsLimit   int64
	DiskBytes   int64 // size of /workspace
	TmpBytes    int64 // size of /tmp
	SpillBytes  int64 // the session's spill files together
	Network     Network
	Mounts      []Mount
	User        User
	// PoolSize is how many ready sandboxes the tenant's warm pool keeps
	// (sandbox.pool.size; 0: none).
	PoolSize int
	// Suspend is what a suspend of the tenant's sessions keeps
	// (sandbox.suspend): SuspendFiles (the default) the workspace,
	// SuspendMemory the whole sandbox where its runtime can checkpoint it
	// (gVisor on containerd), its processes and background tasks going on
	// after the resume, and the workspace where it cannot.
	Suspend string

	// Limits are the executor's defaults and caps for this tenant's calls.
	Limits             executor.Limits
	MaxBackgroundTasks int
	MaxSessions        int
	IdleTTL            time.Duration
	// SuspendedTTL deletes a session suspended that long, with its
	// snapshots (limits.suspendedTTL; 0: the server's default).
	SuspendedTTL time.Duration
	// SnapshotEvery is how often a running session that was used since
	// its last snapshot is snapshotted, without stopping it
	// (limits.snapshotEvery; 0: never): what a sandbox lost with no
	// snapshot at its end (a node gone) can take.
	SnapshotEvery time.Duration
	// UsageLimits are the tenant's daily limits (limits.cpuSecondsPerDay,
	// limits.sandboxHoursPerDay; zero: none): past one, new commands are
	// refused until the next UTC day; nothing running is stopped.
	UsageLimits usage.Limits

	// Files decides transfers of files in and out of sessions.
	Files Files

	rules []*rule
	// byName indexes the per-command rules that can only match a command
	// of that basename; generic lists the other per-command rules. Both
	// hold indexes into rules, ascending.
	byName      map[string][]int
	generic     []int
	escDefault  Decision
	escalations []*escalation
	pwsh        *pwshIndex // the per-command rules as pwsh commands see them
	// opaqueNote names the setting an opaque verdict comes from
	// ("opaque: allow", or unparseable's when opaque is unset), for its
	// reason.
	opaqueNote string
}

// Rules lists the names of the policy's rules, in file order.
func (p *Policy) Rules() []string {
	out := make([]string, len(p.rules))
	for i, r := range p.rules {
		out[i] = r.Name
	}
	return out
}

// Defaults of a file that says nothing.
const (
	defaultAskTimeout      = 5 * time.Minute
	defaultBackgroundTasks = 8
	defaultSessions        = 16
	defaultIdleTTL         = 30 * time.Minute
)

// compile turns a decoded file (and its env, read from the YAML) into a
// Policy, reporting every problem with its line.
func compile(l *located, tenant string, f *fileSchema, env []envVar) *Policy {
	lim := executor.DefaultLimits()
	p := &Policy{
		Tenant: tenant, File: l.file,
		Default: Ask, Unparseable: Ask, AskTimeout: defaultAskTimeout,
		Tools:   Tools{Bash: true, Pwsh: false, Background: true},
		Runtime: confine.DefaultRuntime, CPUs: confine.DefaultCPUs, MemoryBytes: confine.DefaultMemoryBytes,
		PidsLimit: confine.DefaultPidsLimit, DiskBytes: confine.DefaultWorkspaceBytes, TmpBytes: confine.DefaultTmpBytes,
		SpillBytes: confine.DefaultSpillBytes, User: User{UID: confine.DefaultUID, GID: confine.DefaultGID},
		Limits: lim, MaxBackgroundTasks: defaultBackgroundTasks, MaxSessions: defaultSessions,
		IdleTTL: defaultIdleTTL, escDefault: Ask,
	}
	if f.Version != 0 && f.Version != 1 {
		l.addf("version", "unsupported version %d (this shellbox reads version 1)", f.Version)
	}
	decision := func(key, s string, into *Decision) {
		if s == "" {
			return
		}
		d, ok := parseDecision(s)
		if !ok {
			l.addf(key, "%q is not a decision (allow, ask or deny)", s)
			return
		}
		*into = d
	}
	decision("default", f.Default, &p.Default)
	decision("unparseable", f.Unparseable, &p.Unparseable)
	if p.Unparseable == Allow {
		l.addf("unparseable", "allow is not permitted: a command that cannot be read statically is never allowed (use ask or deny)")
	}
	p.Opaque = p.Unparseable
	decision("opaque", f.Opaque, &p.Opaque)
	p.opaqueNote = "opaque: " + string(p.Opaque)
	if f.Opaque == "" {
		p.opaqueNote += " (unset: unparseable's decision)"
	}
	if f.AskTimeout != 0 {
		if f.AskTimeout < 0 {
			l.addf("askTimeout", "must be positive, got %s", f.AskTimeout)
		}
		p.AskTimeout = f.AskTimeout
	}

	setBool := func(b *bool, into *bool) {
		if b != nil {
			*into = *b
		}
	}
	setBool(f.Tools.Bash, &p.Tools.Bash)
	setBool(f.Tools.Pwsh, &p.Tools.Pwsh)
	setBool(f.Tools.Background, &p.Tools.Background)

	compileEnv(l, p, env)
	compileSandbox(l, p, &f.Sandbox)
	compileLimits(l, p, &f.Limits)
	checkMemory(l, p)
	compileFiles(l, p, &f.Files)

	names := map[string]int{}
	for i := range f.Rules {
		key := fmt.Sprintf("rules[%d]", i)
		r := compileRule(l, key, &f.Rules[i])
		if r == nil {
			continue
		}
		r.index = i
		if j, dup := names[r.Name]; dup {
			l.addf(key+".name", "rule %q is already defined at rules[%d]", r.Name, j)
		}
		names[r.Name] = i
		p.rules = append(p.rules, r)
	}
	p.index()
	decision("escalations.default", f.Escalations.Default, &p.escDefault)
	for i := range f.Escalations.Rules {
		key := fmt.Sprintf("escalations.rules[%d]", i)
		e := compileEscalation(l, key, &f.Escalations.Rules[i])
		if e == nil {
			continue
		}
		if j, dup := names[e.Name]; dup {
			l.addf(key+".name", "rule %q is already defined (rules and escalations share names; first at index %d)", e.Name, j)
		}
		names[e.Name] = i
		p.escalations = append(p.escalations, e)
	}
	return p
}

// index builds byName and generic, so a simple command is matched only
// against the rules that can match it.
func (p *Policy) index() {
	p.byName = map[string][]int{}
	add := func(name string, i int) {
		if l := p.byName[name]; len(l) == 0 || l[len(l)-1] != i {
			p.byName[name] = append(l, i)
		}
	}
	for i, r := range p.rules {
		switch {
		case !r.perCommand:
		case r.Names != nil && r.NameGlobs == nil:
			for n := range r.Names {
				add(n, i)
			}
		case r.Names == nil && r.NameGlobs == nil && r.Prefixes != nil:
			for _, pfx := range r.Prefixes {
				add(pfx[0], i)
			}
		default:
			p.generic = append(p.generic, i)
		}
	}
	p.indexPwsh()
}

// policyKeys are a policy's names of confine.Resources' keys.
var policyKeys = map[string]string{"workspaceBytes": "sandbox.disk", "tmpBytes": "sandbox.tmp", "spillBytes": "limits.spillBytes"}

// checkMemory checks the policy's memory against every runtime's rule
// (confine.Backings), so a file that loads runs on every backend: kube's
// pods charge the spill volume to memory too, and refused every pod of a
// policy that left no room for it. Spill is compiled with the limits,
// after the sandbox section: this runs once both are.
func checkMemory(l *located, p *Policy) {
	for _, b := range confine.Backings {
		var me *confine.MemoryError
		if err := p.Sandbox().Resources().CheckMemory(b); errors.As(err, &me) {
			l.addf("sandbox.memory", "%d bytes must exceed %s: on %s",
				me.MemoryBytes, me.Terms(func(k string) string { return policyKeys[k] }), b)
			return
		}
	}
}

func compileSandbox(l *located, p *Policy, s *sandboxSchema) {
	for i, img := range s.Images {
		if strings.TrimSpace(img) == "" || strings.ContainsAny(img, " \t\n") {
			l.addf(fmt.Sprintf("sandbox.images[%d]", i), "%q is not an image reference", img)
		}
	}
	p.Images = slices.Clone(s.Images)
	p.DefaultImage = s.DefaultImage
	if p.DefaultImage == "" && len(p.Images) > 0 {
		p.DefaultImage = p.Images[0]
	}
	if s.DefaultImage != "" && len(p.Images) > 0 && !slices.Contains(p.Images, s.DefaultImage) {
		l.addf("sandbox.defaultImage", "%q is not in sandbox.images", s.DefaultImage)
	}
	if s.Runtime != "" {
		if confine.CheckRuntime(s.Runtime) != nil {
			l.addf("sandbox.runtime", "%q: must be %s or %s", s.Runtime, confine.RuntimeRunc, confine.RuntimeRunsc)
		}
		p.Runtime = s.Runtime
	}
	if s.CPUs != 0 {
		if !(s.CPUs >= 0.001 && s.CPUs <= 1024) { // NaN too
			// sandbox.WithCPUs' bounds: the kernel's 1 ms quota over its
			// 1 s period at most.
			l.addf("sandbox.cpus", "must be between 0.001 and 1024 cores, got %v", s.CPUs)
		}
		p.CPUs = s.CPUs
	}
	if s.TenantCPUs != 0 {
		switch {
		case !(s.TenantCPUs > 0 && s.TenantCPUs <= 1024): // NaN too
			l.addf("sandbox.tenantCpus", "must be positive, at most 1024 (or 0: none), got %v", s.TenantCPUs)
		case s.TenantCPUs < p.CPUs:
			l.addf("sandbox.tenantCpus", "%v is below sandbox.cpus %v: the tenant's sandboxes together get at least one sandbox's quota", s.TenantCPUs, p.CPUs)
		}
		p.TenantCPUs = s.TenantCPUs
	}
	if s.Memory != 0 {
		if int64(s.Memory) < confine.MinMemory {
			l.addf("sandbox.memory", "%d bytes is below the minimum of %d", s.Memory, confine.MinMemory)
		}
		p.MemoryBytes = int64(s.Memory)
	}
	if s.Pids != 0 {
		if s.Pids < 0 {
			l.addf("sandbox.pids", "must be positive, got %d", s.Pids)
		}
		p.PidsLimit = s.Pids
	}
	if s.Disk != 0 {
		p.DiskBytes = int64(s.Disk)
	}
	if s.Tmp != 0 {
		p.TmpBytes = int64(s.Tmp)
	}
	for i, hp := range s.Network.Allow {
		if err := confine.ParseEntry(hp); err != nil {
			l.addf(fmt.Sprintf("sandbox.network.allow[%d]", i), "%v", err)
		}
	}
	p.Network.Allow = slices.Clone(s.Network.Allow)
	if list, err := confine.NewAllowlist(p.Network.Allow); err == nil {
		p.Network.list = list
	}
	compileCredentials(l, p, s.Network.Credentials)
	compileHTTPRules(l, p, s.Network.HTTP)
	compileMounts(l, p, s.Mounts)
	if s.User.UID != 0 || s.User.GID != 0 {
		if s.User.UID <= 0 || s.User.GID <= 0 {
			l.addf("sandbox.user", "%d:%d: commands never run as root (uid and gid must both be positive)", s.User.UID, s.User.GID)
		}
		p.User = User{UID: s.User.UID, GID: s.User.GID}
	}
	if s.Pool.Size < 0 || s.Pool.Size > MaxPoolSize {
		l.addf("sandbox.pool.size", "must be between 0 and %d, got %d", MaxPoolSize, s.Pool.Size)
	}
	p.PoolSize = s.Pool.Size
	switch s.Suspend {
	case "", SuspendFiles:
		p.Suspend = SuspendFiles
	case SuspendMemory:
		p.Suspend = SuspendMemory
	default:
		l.addf("sandbox.suspend", "%q: must be %s or %s", s.Suspend, SuspendMemory, SuspendFiles)
	}
}

// What a suspend keeps (sandbox.suspend).
const (
	SuspendFiles  = "files"
	SuspendMemory = "memory"
)

// MaxPoolSize bounds sandbox.pool.size: each pooled sandbox holds its
// memory and processes on the host while it waits.
const MaxPoolSize = 256

func compileLimits(l *located, p *Policy, s *limitsSchema) {
	lim := &p.Limits
	setD := func(key string, v time.Duration, into *time.Duration) {
		if v != 0 {
			if v < 0 {
				l.addf(key, "must be positive, got %s", v)
			}
			*into = v
		}
	}
	setD("limits.defaultTimeout", s.DefaultTimeout, &lim.DefaultTimeout)
	setD("limits.maxTimeout", s.MaxTimeout, &lim.MaxTimeout)
	setD("limits.grace", s.Grace, &lim.Grace)
	setD("limits.idleTTL", s.IdleTTL, &p.IdleTTL)
	setD("limits.suspendedTTL", s.SuspendedTTL, &p.SuspendedTTL)
	setD("limits.snapshotEvery", s.SnapshotEvery, &p.SnapshotEvery)
	if p.SnapshotEvery > 0 && p.SnapshotEvery < MinSnapshotEvery {
		l.addf("limits.snapshotEvery", "must be at least %s (each snapshot streams the whole workspace), got %s", MinSnapshotEvery, p.SnapshotEvery)
	}
	if lim.MaxTimeout < lim.DefaultTimeout {
		key := "limits.maxTimeout"
		if s.MaxTimeout == 0 {
			key = "limits.defaultTimeout"
		}
		l.addf(key, "maxTimeout (%s) is below defaultTimeout (%s)", lim.MaxTimeout, lim.DefaultTimeout)
	}
	setInt := func(key string, v Bytes, into *int) {
		if v != 0 {
			if v > 1<<40 {
				l.addf(key, "%d bytes is too large", v)
			}
			*into = int(v)
		}
	}
	setInt("limits.tailBytes", s.TailBytes, &lim.TailBytes)
	setInt("limits.bufferBytes", s.BufferBytes, &lim.BufferBytes)
	if s.SpillLimit != 0 {
		lim.SpillLimit = int64(s.SpillLimit)
	}
	if s.SpillBytes != 0 {
		p.SpillBytes = int64(s.SpillBytes)
	}
	setN := func(key string, v int, into *int) {
		if v != 0 {
			if v < 0 {
				l.addf(key, "must be positive, got %d", v)
			}
			*into = v
		}
	}
	setN("limits.backgroundTasks", s.BackgroundTasks, &p.MaxBackgroundTasks)
	setN("limits.sessions", s.Sessions, &p.MaxSessions)
	setF := func(key string, v float64, into *float64) {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			l.addf(key, "must be a positive number, got %v", v)
			return
		}
		*into = v
	}
	setF("limits.cpuSecondsPerDay", s.CPUSecondsPerDay, &p.UsageLimits.CPUSecondsPerDay)
	setF("limits.sandboxHoursPerDay", s.SandboxHoursPerDay, &p.UsageLimits.SandboxHoursPerDay)
}

// rule is one compiled rule. Within a rule every given matcher must hold;
// within a matcher's list, any entry may.
type rule struct {
	Name     string
	Decision Decision
	Reason   string
	index    int

	// Per simple command: the matchers on its argv (shared with the exec
	// check, which gets them as exec), and on its redirections.
	cmdmatch.Rule
	exec       cmdmatch.Spec
	redirects  []matcher
	perCommand bool

	// Per call.
	workdirs   []matcher
	tools      []string
	background *bool
	text       *regexp.Regexp

	examples examplesSchema
}

// compileHead checks what rules and escalation rules share: the name and
// the decision. ok is false when either was reported as an error.
func compileHead(l *located, key, name, decision string) (d Decision, ok bool) {
	ok = true
	if err := checkName(name); err != nil {
		l.addf(key+".name", "%v", err)
		ok = false
	}
	d, valid := parseDecision(decision)
	if !valid {
		l.addf(key+".decision", "%q is not a decision (allow, ask or deny)", decision)
		ok = false
	}
	return d, ok
}

func compileRule(l *located, key string, s *ruleSchema) *rule {
	r := &rule{Name: s.Name, Reason: s.Reason, examples: s.Examples}
	var ok bool
	r.Decision, ok = compileHead(l, key, s.Name, s.Decision)
	m := &s.Match
	// The argv matchers compile where the exec check compiles them too.
	r.exec = cmdmatch.Spec{Rule: s.Name, Decision: string(r.Decision), Reason: s.Reason,
		Command: m.Command, Prefix: m.Prefix, Args: m.Args, ArgsRegex: m.ArgsRegex}
	cm, err := cmdmatch.Compile(r.exec, r.Decision != Allow, func(e *cmdmatch.FieldError) {
		l.addf(fmt.Sprintf("%s.match.%s[%d]", key, e.Field, e.Index), "%v", e.Err)
		ok = false
	})
	if err != nil {
		l.addf(key+".match", "%v", err)
		ok = false
	}
	r.Rule = cm
	globs := func(field string, in []string) []matcher {
		var out []matcher
		for i, g := range in {
			m, err := globMatcher(g)
			if err != nil {
				l.addf(fmt.Sprintf("%s.match.%s[%d]", key, field, i), "%v", err)
				ok = false
				continue
			}
			out = append(out, m)
		}
		return out
	}
	r.redirects = globs("redirect", m.Redirect)
	r.workdirs = globs("workdir", m.Workdir)
	if m.Text != "" {
		re, err := regexp.Compile(m.Text)
		if err != nil {
			l.addf(key+".match.text", "bad regular expression: %v", err)
			ok = false
		}
		r.text = re
	}
	for i, t := range m.Tool {
		if t != "bash" && t != "pwsh" {
			l.addf(fmt.Sprintf("%s.match.tool[%d]", key, i), "%q: must be bash or pwsh", t)
			ok = false
		}
	}
	r.tools = m.Tool
	r.background = m.Background
	r.perCommand = len(m.Command) > 0 || len(m.Prefix) > 0 || len(m.Args) > 0 ||
		len(m.ArgsRegex) > 0 || len(m.Redirect) > 0
	if !r.perCommand && len(m.Workdir) == 0 && len(m.Tool) == 0 && m.Background == nil && m.Text == "" {
		l.addf(key+".match", "a rule must match something (to decide every command, set default)")
		ok = false
	}
	if !ok {
		return nil
	}
	return r
}

// escalation is one compiled escalation rule.
type escalation struct {
	Name        string
	Decision    Decision
	Reason      string
	permissions []*regexp.Regexp
}

func compileEscalation(l *located, key string, s *escalationSchema) *escalation {
	e := &escalation{Name: s.Name, Reason: s.Reason}
	var ok bool
	e.Decision, ok = compileHead(l, key, s.Name, s.Decision)
	if len(s.Permissions) == 0 {
		l.addf(key+".permissions", "name at least one permission (globs allowed)")
		ok = false
	}
	for i, g := range s.Permissions {
		re, err := globRegexp(g)
		if err != nil || g == "" {
			l.addf(fmt.Sprintf("%s.permissions[%d]", key, i), "bad permission pattern %q", g)
			ok = false
			continue
		}
		e.permissions = append(e.permissions, re)
	}
	if !ok {
		return nil
	}
	return e
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func checkName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q: rule names are 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	switch name {
	case RuleDefault, RuleUnparseable, RuleDynamic, RuleOpaque, RuleTool, RuleEscalation, RuleApprover, RuleLimit:
		return fmt.Errorf("%q is reserved for built-in decisions", name)
	}
	return nil
}

// matcher is cmdmatch's: the one matcher of globs and regexps, shared
// with the exec check inside the sandbox.
type matcher = cmdmatch.Matcher

var (
	globMatcher  = cmdmatch.Glob
	regexMatcher = cmdmatch.Regexp
	globRegexp   = cmdmatch.GlobRegexp
)

// Image returns the image a session of this tenant runs: requested if
// given, else the policy's default image, else fallback (the backend's
// configured image). It must be in Images when Images is not empty; the
// error names the setting.
func (p *Policy) Image(requested, fallback string) (string, error) {
	img := requested
	if img == "" {
		img = p.DefaultImage
	}
	if img == "" {
		img = fallback
	}
	if len(p.Images) > 0 && !slices.Contains(p.Images, img) {
		return "", fmt.Errorf("image %q is not allowed by policy %s (sandbox.images: %s)", img, p.Tenant, strings.Join(p.Images, ", "))
	}
	return img, nil
}

// SandboxSettings are a policy's settings of its tenant's sandboxes, as
// plain values: the session layer maps them onto a sandbox spec (policies
// does not know package sandbox). The image (Image) and the mounts
// (SessionMounts) depend on what a session asks for and are apart.
type SandboxSettings struct {
	// Egress: the sandbox runs the egress proxy, because the policy lists
	// destinations or a call may be granted the network permission
	// (MayGrantNetwork). Without it the sandbox has no way out at all.
	Egress  bool
	Runtime string // confine.RuntimeRunc or confine.RuntimeRunsc
	CPUs    float64
	// TenantCPUs bounds all the tenant's sandboxes on one host together
	// (0: none).
	TenantCPUs float64
	// MemoryBytes caps memory; the tmpfs pages of /workspace and /tmp count
	// towards it.
	MemoryBytes int64
	PidsLimit   int64
	DiskBytes   int64 // size of /workspace
	TmpBytes    int64 // size of /tmp
	SpillBytes  int64 // the session's spill files together
	User        User  // who commands run as
}

// Resources are the settings' caps in the shape every layer shares
// (DiskBytes is confine.Resources' WorkspaceBytes).
func (s SandboxSettings) Resources() confine.Resources {
	return confine.Resources{CPUs: s.CPUs, TenantCPUs: s.TenantCPUs, MemoryBytes: s.MemoryBytes, PidsLimit: s.PidsLimit,
		WorkspaceBytes: s.DiskBytes, TmpBytes: s.TmpBytes, SpillBytes: s.SpillBytes}
}

// Sandbox returns the policy's sandbox settings.
func (p *Policy) Sandbox() SandboxSettings {
	return SandboxSettings{
		Egress:      !p.Network.None() || p.MayGrantNetwork(),
		Runtime:     p.Runtime,
		CPUs:        p.CPUs,
		TenantCPUs:  p.TenantCPUs,
		MemoryBytes: p.MemoryBytes,
		PidsLimit:   p.PidsLimit,
		DiskBytes:   p.DiskBytes,
		TmpBytes:    p.TmpBytes,
		SpillBytes:  p.SpillBytes,
		User:        p.User,
	}
}

// MayGrantNetwork reports whether a call may be granted the network
// permission (escalations decide it allow or ask): the tenant's sandboxes
// then run the egress proxy even with an empty allowlist, for such calls.
func (p *Policy) MayGrantNetwork() bool {
	return p.decideEscalation(confine.PermissionNetwork).Decision != Deny
}

// CheckEgress decides a connection of the tenant's sandbox to target
// (host:port, as the client named it); the error is what the client reads.
func (p *Policy) CheckEgress(target string) error {
	if p.Network.list.Allows(target) {
		return nil
	}
	hint := ""
	if p.MayGrantNetwork() {
		hint = `; a call may ask for more with sandbox_permissions: ["network"] and a justification`
	}
	if p.Network.None() {
		return fmt.Errorf("shellbox: egress to %s is not allowed: policy %s allows no network (sandbox.network.allow is empty)%s", target, p.Tenant, hint)
	}
	return fmt.Errorf("shellbox: egress to %s is not allowed by policy %s (sandbox.network.allow: %s)%s", target, p.Tenant, strings.Join(p.Network.Allow, ", "), hint)
}

// CheckSessions reports whether a new session fits when the tenant has n
// already; the error names the limit and its value.
func (p *Policy) CheckSessions(n int) error {
	if n >= p.MaxSessions {
		return fmt.Errorf("session limit reached: limits.sessions = %d (policy %s)", p.MaxSessions, p.Tenant)
	}
	return nil
}

// CheckBackgroundTasks reports whether a new background task fits when the
// session runs n already; the error names the limit and its value.
func (p *Policy) CheckBackgroundTasks(n int) error {
	if n >= p.MaxBackgroundTasks {
		return fmt.Errorf("background task limit reached: limits.backgroundTasks = %d (policy %s)", p.MaxBackgroundTasks, p.Tenant)
	}
	return nil
}

// MinSnapshotEvery is the shortest limits.snapshotEvery: each periodic
// snapshot streams the session's whole workspace.
const MinSnapshotEvery = time.Minute
