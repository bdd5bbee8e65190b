package local

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/internal/cmdmatch"
)

// CgroupMode selects how a command's process tree is tracked.
type CgroupMode string

const (
	// CgroupAuto uses the best the host allows: cgroup v2, else a cgroup v1
	// freezer (or pids) hierarchy, else the process group alone. The default.
	CgroupAuto CgroupMode = "auto"
	// CgroupOff tracks the process group alone (see the package doc for what
	// that does not catch).
	CgroupOff CgroupMode = "off"
	// CgroupV2 and CgroupV1 insist on one kind; New fails without it.
	CgroupV2 CgroupMode = "v2"
	CgroupV1 CgroupMode = "v1"
)

// DefaultPath is the PATH of the default base environment.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DefaultMaxFinishedTasks is how many finished background tasks a session
// keeps for reads by default.
const DefaultMaxFinishedTasks = 256

// Config configures an Executor. The zero value works: commands run in the
// process's working directory with the default limits.
type Config struct {
	// Root is the session cwd and the directory workdirs must stay inside;
	// absolute. Default: the process's working directory.
	Root string
	// Home is HOME (and DSH_HOME) of the default base environment. Default:
	// Root.
	Home string
	// SpillDir holds the spill files, <SpillDir>/<session>/<id>.log; absolute.
	// Default: <os.TempDir()>/shellbox-spill.
	SpillDir string
	// Limits are the defaults and caps requests are resolved with. The zero
	// value means executor.DefaultLimits(); any other value is used as given.
	Limits executor.Limits
	// BaseEnv is the environment every command starts from, KEY=VALUE; the
	// request's managed environment is applied over it. The server's own
	// environment never reaches a command. Default: PATH=DefaultPath,
	// HOME=<Home>, DSH_HOME=<Home>, LANG=C.UTF-8.
	BaseEnv []string
	// Cgroup selects how process trees are tracked. Default CgroupAuto.
	Cgroup CgroupMode
	// CgroupParent is the directory, relative to each cgroup mount, that holds
	// the per-command cgroups. Default "shellbox".
	CgroupParent string
	// Credential, when set, runs commands as another uid/gid (the server must
	// be allowed to switch to it).
	Credential *syscall.Credential
	// ExecShim, if set, is a program every command starts through, which
	// execs the command in the same process (so its pid, process group,
	// credentials and exit status are the command's): the child runs
	// /proc/self/fd/3, ExecShim as its fd 3, with argv ExecShim's base
	// name, the command's resolved path, then the command's argv. The
	// shim must close fd 3 before the exec, and exit 127 if the command
	// does not exist, 126 if it cannot run. The agent puts each call in a
	// Landlock domain of its own this way (package landlock). Not closed
	// by Close.
	ExecShim *os.File
	// ExecGuard, if set, is told of every command's leader as soon as it
	// has started, with the argv it runs and the call's exec rules
	// (Spec.ExecRules), before anything waits for it: the agent's exec
	// guard (agent/execguard), which checks every exec of the tree and
	// writes each refusal into the call's stderr with note.
	ExecGuard ExecGuard
	// OOMScoreAdj, when non-zero, is written to each command's oom_score_adj
	// right after it starts (processes it forks before that keep the old
	// value). Raising it needs no privilege, which is how an agent protects
	// itself from its commands.
	OOMScoreAdj int
	// MaxFinishedTasks bounds the finished background tasks kept per session;
	// the oldest is evicted first. Default DefaultMaxFinishedTasks.
	MaxFinishedTasks int

	// PID1, if set, is what the runner does differently as a sandbox's PID 1
	// (cmd/shellbox-agent): tag groups, the inherited OOM score, OOM
	// reporting (see PID1; package agent/pid1 sets it). Nil: none of them.
	PID1 PID1
	// Logf, if set, is told when a command's tree is signalled and why (a
	// timeout, a kill request, a caller that went away, a leader that left
	// processes behind), with what was signalled: the agent's log, which
	// is how an operator finds out what ended a task.
	Logf func(format string, args ...any)
}

// withDefaults fills in the defaults and checks every field, naming the one
// that is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.Root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return c, fmt.Errorf("local: Root: default to the working directory: %w", err)
		}
		c.Root = wd
	}
	if !filepath.IsAbs(c.Root) {
		return c, fmt.Errorf("local: Root must be an absolute path, got %q", c.Root)
	}
	c.Root = filepath.Clean(c.Root)
	if fi, err := os.Stat(c.Root); err != nil {
		return c, fmt.Errorf("local: Root: %w", err)
	} else if !fi.IsDir() {
		return c, fmt.Errorf("local: Root %s is not a directory", c.Root)
	}
	if c.Home == "" {
		c.Home = c.Root
	}
	if !filepath.IsAbs(c.Home) {
		return c, fmt.Errorf("local: Home must be an absolute path, got %q", c.Home)
	}
	if c.SpillDir == "" {
		c.SpillDir = filepath.Join(os.TempDir(), "shellbox-spill")
	}
	if !filepath.IsAbs(c.SpillDir) {
		return c, fmt.Errorf("local: SpillDir must be an absolute path, got %q", c.SpillDir)
	}
	c.SpillDir = filepath.Clean(c.SpillDir)
	if c.Limits == (executor.Limits{}) {
		c.Limits = executor.DefaultLimits()
	}
	if err := c.Limits.Validate(); err != nil {
		return c, fmt.Errorf("local: Limits: %w", err)
	}
	if c.BaseEnv == nil {
		c.BaseEnv = []string{
			"PATH=" + DefaultPath,
			"HOME=" + c.Home,
			"DSH_HOME=" + c.Home,
			"LANG=C.UTF-8",
		}
	}
	if _, err := executor.MergeEnv(c.BaseEnv, nil); err != nil {
		return c, fmt.Errorf("local: BaseEnv: %w", err)
	}
	switch c.Cgroup {
	case "":
		c.Cgroup = CgroupAuto
	case CgroupAuto, CgroupOff, CgroupV1, CgroupV2:
	default:
		return c, fmt.Errorf("local: Cgroup must be auto, off, v1 or v2, got %q", c.Cgroup)
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "shellbox"
	}
	if p := filepath.Clean(c.CgroupParent); filepath.IsAbs(p) || p == "." || p == ".." || p != c.CgroupParent || len(p) > 2 && p[:3] == "../" {
		return c, fmt.Errorf("local: CgroupParent must be a clean relative path inside the cgroup mount, got %q", c.CgroupParent)
	}
	if c.OOMScoreAdj < -1000 || c.OOMScoreAdj > 1000 {
		return c, fmt.Errorf("local: OOMScoreAdj must be within -1000..1000, got %d", c.OOMScoreAdj)
	}
	if c.MaxFinishedTasks == 0 {
		c.MaxFinishedTasks = DefaultMaxFinishedTasks
	}
	if c.MaxFinishedTasks < 0 {
		return c, fmt.Errorf("local: MaxFinishedTasks must not be negative, got %d", c.MaxFinishedTasks)
	}
	return c, nil
}

// ExecGuard checks the execs of a command's tree (Config.ExecGuard).
type ExecGuard interface {
	// Watch names pid, just started with argv, as a call's leader whose
	// tree's execs rules check; nil rules: none. note writes a line to the
	// call's stderr (it may block briefly; it is safe to call after
	// release, and then does nothing). release is called when the leader
	// has exited.
	Watch(pid int, argv []string, rules *cmdmatch.Set, note func(string)) (release func())
}
