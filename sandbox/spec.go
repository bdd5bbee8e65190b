package sandbox

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shellbox/shellbox/confine"
)

// Runtimes a Spec may select (defined in confine, which policies shares).
// runc is the kernel's own isolation (namespaces, cgroups, seccomp); runsc
// is gVisor, a user-space kernel between the workload and the host's.
const (
	RuntimeRunc  = confine.RuntimeRunc
	RuntimeRunsc = confine.RuntimeRunsc
)

// Networks a Spec may select. Either way the sandbox has no network
// interface but loopback: with NetworkEgress its agent also runs the egress
// proxy (sandbox/egress), whose connections leave only through the server's
// relay, to the destinations the tenant's policy allows.
const (
	NetworkNone   = "none"
	NetworkEgress = "egress"
)

// Labels every backend puts on a sandbox, so a restarted server can find its
// sandboxes (Runtime.List) and tell them from another server's.
const (
	LabelManaged = "org.shellbox.managed" // always "true"
	LabelTenant  = "org.shellbox.tenant"
	LabelSession = "org.shellbox.session"
	LabelOwner   = "org.shellbox.owner"
	LabelRuntime = "org.shellbox.runtime"
	LabelNetwork = "org.shellbox.network"
)

// ReservedLabels returns a copy of s.Labels with the reserved labels every
// container runtime records set from s: LabelManaged, LabelTenant,
// LabelSession, LabelOwner, LabelRuntime and LabelNetwork. Labelled reads
// them back.
func (s Spec) ReservedLabels() map[string]string {
	l := maps.Clone(s.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[LabelManaged] = "true"
	l[LabelTenant] = s.Tenant
	l[LabelSession] = s.Session
	l[LabelOwner] = s.Owner
	l[LabelRuntime] = s.Runtime
	l[LabelNetwork] = s.Network
	return l
}

// Labelled returns the Sandbox of id that the reserved labels of
// Spec.ReservedLabels describe; the rest is the runtime's to fill.
func Labelled(id string, labels map[string]string) Sandbox {
	return Sandbox{
		ID:      id,
		Tenant:  labels[LabelTenant],
		Session: labels[LabelSession],
		Owner:   labels[LabelOwner],
		Runtime: labels[LabelRuntime],
		Network: labels[LabelNetwork],
	}
}

// Paths inside every sandbox (defined in confine, whose mount target rule
// reserves them).
const (
	// AgentPath is where the agent binary is bind-mounted, read-only; it is
	// the sandbox's PID 1.
	AgentPath = confine.AgentPath
	// HostDirMount is the agent's directory: its socket (single-host
	// runtimes) and spill files (spill/) are there. A single-host runtime
	// bind-mounts the session's host directory on it; Kubernetes an emptyDir.
	HostDirMount = confine.HostDirMount
	// WorkspacePath is the writable, size-limited working directory.
	WorkspacePath = confine.WorkspacePath
	// TmpPath is the writable, size-limited /tmp.
	TmpPath = confine.TmpPath
)

// GVisorLookupCaps are the capabilities a runtime gives the agent under
// gVisor (Spec.Runtime runsc) on top of its own: the egress proxy reads its
// commands' /proc/<pid>/fd links with them (CAP_SYS_PTRACE for the links,
// CAP_DAC_READ_SEARCH for the 0500 directory), where gVisor refuses the
// agent acting as the commands' user. The agent keeps them permitted only
// and raises them on one thread per lookup (executor/files, AsTracer);
// commands never get them. Not under runc: there acting as the user
// suffices, and CAP_DAC_READ_SEARCH would open open_by_handle_at(2) on the
// host's kernel (gVisor has none).
var GVisorLookupCaps = []string{"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}

// EnvSpillBytes is the variable through which the agent learns the session's
// spill cap (Spec.SpillBytes), so it can stop writing and say why before the
// kernel says ENOSPC.
const EnvSpillBytes = "SHELLBOX_SPILL_BYTES"

// Size units, for readability of options: WithMemory(512 * sandbox.MiB).
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
)

// MinMemory is the smallest memory limit container engines accept.
const MinMemory = confine.MinMemory

// Spec is everything a backend needs to create one session's sandbox. It is
// built once, from the tenant's policy, by pure options; each backend only
// translates it (sandbox/docker into a container config). The zero value is
// not usable: start from DefaultSpec or NewSpec.
type Spec struct {
	// Tenant and Session identify the sandbox: one per pair. Letters, digits
	// and . _ @ : - only, starting with a letter or digit, at most 64 bytes.
	Tenant  string
	Session string
	// Owner identifies the server that manages the sandbox; the Manager sets
	// it, so two servers on one engine never reap each other's sandboxes.
	Owner string

	// Image is the container image; it must already be present on the engine.
	Image string
	// Runtime is RuntimeRunc or RuntimeRunsc.
	Runtime string

	// Resources are the caps on CPU, memory, processes, /workspace, /tmp
	// and spill files (see confine.Resources).
	confine.Resources

	// Network is NetworkNone or NetworkEgress.
	Network string
	// UID and GID own /workspace; they are the user commands run as (the
	// agent runs as root and drops to them). Never 0.
	UID, GID int

	// Env is the agent's environment, KEY=VALUE. It is not the commands'
	// environment: the agent builds that per call.
	Env []string
	// Labels are extra labels; the org.shellbox.{managed,tenant,session,owner,
	// runtime} labels are the backend's and may not be set here.
	Labels map[string]string

	// AgentArgs are the agent's arguments. The agent itself (a static
	// binary at AgentPath) is the runtime's to deliver: a read-only bind
	// mount on one host, an init container's copy on Kubernetes.
	AgentArgs []string

	// Mounts are host directories bind-mounted into the sandbox (WithMounts).
	Mounts []Mount

	// Settings is the creator's record of what the session asked for when
	// it was created (the session layer: its options as JSON), kept with
	// the sandbox (label or annotation LabelSettings) so that any server
	// process, or this one after a restart, makes the session's next
	// sandbox as the session asked. Opaque to runtimes; at most
	// MaxSettingsBytes of printable text (WithSettings).
	Settings string
}

// LabelSettings is the label (Docker), OCI annotation (containerd) or pod
// annotation (Kubernetes) that keeps a sandbox's Spec.Settings.
const LabelSettings = "org.shellbox.settings"

// MaxSettingsBytes bounds Spec.Settings (containerd's labels are bounded by
// 4,096 bytes; a record is far smaller).
const MaxSettingsBytes = 3072

// Opt changes a Spec. Options are pure: they touch nothing but the Spec, so
// they can be tested by applying them to a DefaultSpec. An option rejects a
// bad argument with an ErrInvalid error naming the field.
type Opt func(*Spec) error

// DefaultSpec returns the hardened defaults for a session: runc, 1 CPU,
// 1 GiB memory, 256 processes, 512 MiB workspace, 128 MiB /tmp, 64 MiB of
// spill, no network, commands as uid/gid 1000. Image has no default; the
// Manager fills Owner.
func DefaultSpec(tenant, session string) Spec {
	return Spec{
		Tenant:    tenant,
		Session:   session,
		Runtime:   confine.DefaultRuntime,
		Resources: confine.DefaultResources(),
		Network:   NetworkNone,
		UID:       confine.DefaultUID,
		GID:       confine.DefaultGID,
	}
}

// NewSpec applies opts to DefaultSpec(tenant, session). It does not call
// Validate: the Manager completes the Spec (Owner) first.
func NewSpec(tenant, session string, opts ...Opt) (Spec, error) {
	s := DefaultSpec(tenant, session)
	if err := Compose(opts...)(&s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// Compose returns an option that applies opts in order, stopping at the
// first error.
func Compose(opts ...Opt) Opt {
	return func(s *Spec) error {
		for _, o := range opts {
			if o == nil {
				continue
			}
			if err := o(s); err != nil {
				return err
			}
		}
		return nil
	}
}

// WithImage sets the image.
func WithImage(image string) Opt {
	return func(s *Spec) error {
		if strings.TrimSpace(image) == "" {
			return invalid("image", "empty")
		}
		s.Image = image
		return nil
	}
}

// WithRuntime selects RuntimeRunc or RuntimeRunsc.
func WithRuntime(runtime string) Opt {
	return func(s *Spec) error {
		if err := checkRuntime(runtime); err != nil {
			return err
		}
		s.Runtime = runtime
		return nil
	}
}

// CPUPeriod is the CFS period over which the docker and containerd
// backends enforce a sandbox's CPU quota (and a tenant's, hostcgroup):
// 10 ms, not the 100 ms Docker's --cpus and the kernel default to. Over
// 100 ms a sandbox with two busy threads and a 1-core quota runs on both
// cores for 50 ms, then waits 50: every other process of the host waits
// behind it in those bursts (another tenant's p99 beside one sandbox's
// 1 GB outputs: docs/reliability.md#load-and-fairness). Kubernetes' is
// the kubelet's (cpuCFSQuotaPeriod).
const CPUPeriod = 10 * time.Millisecond

// The CPU quota's bounds in cores: the kernel's shortest quota is 1 ms
// and its longest period 1 s.
const (
	minCPUs = 0.001
	maxCPUs = 1024
)

// CPUQuota returns the CFS quota and period, in µs, of cores: quota over
// CPUPeriod, the period stretched for a quota under the kernel's 1 ms
// (cores below 0.1). cores must be within WithCPUs' bounds.
func CPUQuota(cores float64) (quota, period int64) {
	period = CPUPeriod.Microseconds()
	if q := int64(math.Round(cores * float64(period))); q >= 1000 {
		return q, period
	}
	period = min(int64(math.Ceil(1000/cores)), 1000000)
	return max(int64(math.Round(cores*float64(period))), 1000), period
}

// WithCPUs sets the CPU quota in cores.
func WithCPUs(cores float64) Opt {
	return func(s *Spec) error {
		if !(cores >= minCPUs) || cores > maxCPUs {
			return invalid("cpus", "%v: must be at least %v, at most %d", cores, minCPUs, maxCPUs)
		}
		s.CPUs = cores
		return nil
	}
}

// WithTenantCPUs sets the quota in cores of all the tenant's sandboxes on
// one host together (0: none); with a quota, at least the sandbox's own
// (Spec.CPUs), checked by Validate.
func WithTenantCPUs(cores float64) Opt {
	return func(s *Spec) error {
		if !(cores >= 0) || cores > maxCPUs {
			return invalid("tenantCpus", "%v: must be 0 (none) or positive, at most %d", cores, maxCPUs)
		}
		s.TenantCPUs = cores
		return nil
	}
}

// WithMemory sets the memory limit in bytes.
func WithMemory(bytes int64) Opt {
	return func(s *Spec) error {
		if bytes < MinMemory {
			return invalid("memory", "%d bytes: below the minimum of %d", bytes, MinMemory)
		}
		s.MemoryBytes = bytes
		return nil
	}
}

// WithPidsLimit sets the process/thread limit.
func WithPidsLimit(n int64) Opt {
	return func(s *Spec) error {
		if n < 1 {
			return invalid("pids", "%d: must be at least 1 (a sandbox is never unlimited)", n)
		}
		s.PidsLimit = n
		return nil
	}
}

// WithWorkspaceSize sets the size of /workspace in bytes.
func WithWorkspaceSize(bytes int64) Opt {
	return func(s *Spec) error {
		if bytes < 1 {
			return invalid("workspace", "%d bytes: must be positive", bytes)
		}
		s.WorkspaceBytes = bytes
		return nil
	}
}

// WithTmpSize sets the size of /tmp in bytes.
func WithTmpSize(bytes int64) Opt {
	return func(s *Spec) error {
		if bytes < 1 {
			return invalid("tmp", "%d bytes: must be positive", bytes)
		}
		s.TmpBytes = bytes
		return nil
	}
}

// WithSpillSize sets the session's spill cap in bytes; 0 disables spilling.
func WithSpillSize(bytes int64) Opt {
	return func(s *Spec) error {
		if bytes < 0 {
			return invalid("spill", "%d bytes: must not be negative", bytes)
		}
		s.SpillBytes = bytes
		return nil
	}
}

// WithResources sets every cap of r, each checked as its own option does
// (WithCPUs, WithMemory, WithPidsLimit, WithWorkspaceSize, WithTmpSize,
// WithSpillSize, in that order: the first error wins).
func WithResources(r confine.Resources) Opt {
	return Compose(WithCPUs(r.CPUs), WithTenantCPUs(r.TenantCPUs), WithMemory(r.MemoryBytes), WithPidsLimit(r.PidsLimit),
		WithWorkspaceSize(r.WorkspaceBytes), WithTmpSize(r.TmpBytes), WithSpillSize(r.SpillBytes))
}

// WithSettings sets the creator's record of the session's requested
// settings (Spec.Settings): printable text, at most MaxSettingsBytes.
func WithSettings(record string) Opt {
	return func(s *Spec) error {
		if len(record) > MaxSettingsBytes {
			return invalid("settings", "%d bytes: more than %d", len(record), MaxSettingsBytes)
		}
		if !utf8.ValidString(record) {
			return invalid("settings", "not UTF-8")
		}
		if i := strings.IndexFunc(record, unicode.IsControl); i >= 0 {
			return invalid("settings", "a control character at byte %d", i)
		}
		s.Settings = record
		return nil
	}
}

// WithNetwork sets the network: NetworkNone or NetworkEgress.
func WithNetwork(network string) Opt {
	return func(s *Spec) error {
		if network != NetworkNone && network != NetworkEgress {
			return invalid("network", "%q: must be %q or %q", network, NetworkNone, NetworkEgress)
		}
		s.Network = network
		return nil
	}
}

// WithUser sets the uid and gid commands run as (and that own /workspace).
func WithUser(uid, gid int) Opt {
	return func(s *Spec) error {
		if uid <= 0 || gid <= 0 {
			return invalid("user", "%d:%d: commands never run as root (uid and gid must be positive)", uid, gid)
		}
		s.UID, s.GID = uid, gid
		return nil
	}
}

// WithEnv sets one variable of the agent's environment, replacing an
// earlier value of the same key.
func WithEnv(key, value string) Opt {
	return func(s *Spec) error {
		if key == "" || strings.ContainsAny(key, "=\x00") || strings.ContainsRune(value, 0) {
			return invalid("env", "%q: bad variable", key)
		}
		s.Env = slices.DeleteFunc(slices.Clone(s.Env), func(kv string) bool {
			return strings.HasPrefix(kv, key+"=")
		})
		s.Env = append(s.Env, key+"="+value)
		return nil
	}
}

// WithLabels adds extra labels. The reserved org.shellbox.* labels the
// backend sets are refused.
func WithLabels(labels map[string]string) Opt {
	return func(s *Spec) error {
		for k := range labels {
			if reservedLabel(k) {
				return invalid("labels", "%q is reserved", k)
			}
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		} else {
			s.Labels = maps.Clone(s.Labels)
		}
		maps.Copy(s.Labels, labels)
		return nil
	}
}

// WithAgentArgs sets the agent's arguments.
func WithAgentArgs(args ...string) Opt {
	return func(s *Spec) error {
		for _, a := range args {
			if strings.ContainsRune(a, 0) {
				return invalid("agent", "argument %q contains a NUL byte", a)
			}
		}
		s.AgentArgs = slices.Clone(args)
		return nil
	}
}

// Clone returns a deep copy of s.
func (s Spec) Clone() Spec {
	s.Env = slices.Clone(s.Env)
	s.Labels = maps.Clone(s.Labels)
	s.AgentArgs = slices.Clone(s.AgentArgs)
	s.Mounts = slices.Clone(s.Mounts)
	return s
}

// Validate checks that s is complete and consistent. Errors are ErrInvalid
// and name the field.
func (s Spec) Validate() error {
	if err := CheckID("tenant", s.Tenant); err != nil {
		return err
	}
	if err := CheckID("session", s.Session); err != nil {
		return err
	}
	if s.Owner == "" || strings.ContainsRune(s.Owner, 0) {
		return invalid("owner", "empty")
	}
	if strings.TrimSpace(s.Image) == "" {
		return invalid("image", "empty")
	}
	if err := checkRuntime(s.Runtime); err != nil {
		return err
	}
	opts := []Opt{
		WithCPUs(s.CPUs), WithTenantCPUs(s.TenantCPUs), WithMemory(s.MemoryBytes), WithPidsLimit(s.PidsLimit),
		WithWorkspaceSize(s.WorkspaceBytes), WithTmpSize(s.TmpBytes),
		WithSpillSize(s.SpillBytes), WithNetwork(s.Network), WithUser(s.UID, s.GID),
		WithLabels(s.Labels), WithAgentArgs(s.AgentArgs...), WithMounts(s.Mounts...),
		WithSettings(s.Settings),
	}
	for _, kv := range s.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return invalid("env", "%q: not KEY=VALUE", kv)
		}
		opts = append(opts, WithEnv(k, v))
	}
	if s.TenantCPUs > 0 && s.TenantCPUs < s.CPUs {
		return invalid("tenantCpus", "%v: below the sandbox's own cpus %v (the tenant's sandboxes together get at least one sandbox's quota)", s.TenantCPUs, s.CPUs)
	}
	// The options double as field checks; they run on a scratch copy.
	scratch := s.Clone()
	if err := Compose(opts...)(&scratch); err != nil {
		return err
	}
	// Every runtime's own rule: the one that backs its volumes with the
	// most memory (kube) checks again at Create.
	if err := s.Resources.CheckMemory(confine.BackingHost); err != nil {
		return fmt.Errorf("%w: memory: %w", ErrInvalid, err)
	}
	return nil
}

// CheckID checks a tenant or session id (confine.CheckID, in ErrInvalid);
// field names it in the error.
func CheckID(field, id string) error {
	if err := confine.CheckID(field, id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func checkRuntime(r string) error {
	if err := confine.CheckRuntime(r); err != nil {
		return invalid("runtime", "%v", err)
	}
	return nil
}

func reservedLabel(k string) bool {
	switch k {
	case LabelManaged, LabelTenant, LabelSession, LabelOwner, LabelRuntime, LabelNetwork, LabelMounts, LabelSettings:
		return true
	}
	return false
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

// WorkspaceMedium is what a session's /workspace is made of, on every
// runtime that lets the operator choose (sandbox/hostdir on one host, kube
// in a pod); each runtime says what the two cost and which it defaults to.
type WorkspaceMedium string

// The media of a workspace.
const (
	WorkspaceDisk   WorkspaceMedium = "disk"
	WorkspaceMemory WorkspaceMedium = "memory"
)
