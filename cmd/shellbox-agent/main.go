// Command shellbox-agent is the agent inside every sandbox: a static binary
// (CGO_ENABLED=0) bind-mounted read-only at /.shellbox/agent (on Kubernetes,
// copied into an emptyDir by an init container with --install) and run as the
// sandbox's PID 1. This command is its flags and wiring (main.go; pod.go for
// a Kubernetes pod); what it does is package agent's: it serves the agentapi
// protocol (a unix socket of mode 0600 in the session's host directory, or
// TCP with a per-session token with --listen) over a local.Executor set up
// for a sandbox, runs the egress proxy with --egress-listen, and serves files
// in --root as --uid/--gid.
//
// SIGTERM or SIGINT stops serving, kills every command and exits (not with
// --no-setuid: there the pod's deletion ends it; with --serve-through-grace
// SIGTERM only fences the agent, which serves on until POST /v1/exit or the
// kubelet's SIGKILL, so the server can save the workspace of a deleted pod).
//
// What it runs as, what it promises its commands, its cost, and each flag's
// reason: docs/architecture.md#the-agent-pid-1-cmdshellbox-agent-and-agent.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"syscall"

	"github.com/shellbox/shellbox/agent"
	"github.com/shellbox/shellbox/agent/execguard"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/executor/output"
	buildversion "github.com/shellbox/shellbox/internal/version"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

func versionString() string {
	return buildversion.Of(version)
}

// options are the flags: what the agent serves with, and the modes that
// deliver it (--install) and hand it its token (--token-file).
type options struct {
	agent.Options
	tokenFile              string
	install, own, tokenOut string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == execguard.Arg {
		// The exec guard the agent starts as a process of its own.
		os.Exit(execguard.Main(os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == agent.HookArg {
		// The checkpoint hook, run as root inside the sandbox around a
		// gVisor checkpoint (agent/checkpoint.go).
		os.Exit(hook(os.Args[2:], os.Getenv(agent.EnvHookMode), func(s syscall.Signal) error { return syscall.Kill(1, s) }, os.Stderr))
	}
	agent.SetUpProcess()
	os.Exit(run(os.Args[1:], os.Stderr))
}

// logTailBytes bounds the log the agent keeps for GET /v1/log.
const logTailBytes = 64 << 10

func run(args []string, stderr io.Writer) int {
	// The log goes to stderr (which the runtimes may discard) and into a
	// bounded tail served at GET /v1/log (`shellbox sessions logs`).
	recent := output.NewTail(logTailBytes)
	logger := log.New(io.MultiWriter(stderr, recent), "shellbox-agent: ", log.LUTC|log.Ldate|log.Ltime|log.Lmicroseconds|log.Lmsgprefix)
	var o options
	fs := flag.NewFlagSet("shellbox-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Socket, "socket", "/run/shellbox/agent.sock", "unix socket to serve the protocol on (mode 0600)")
	fs.StringVar(&o.SpillDir, "spill-dir", "/run/shellbox/spill", "directory of spill files (made 0755, root's)")
	fs.StringVar(&o.Root, "root", "/workspace", "session root: the cwd of commands, and what workdirs must stay inside")
	fs.StringVar(&o.Home, "home", "/workspace", "HOME of commands")
	fs.IntVar(&o.UID, "uid", 1000, "user commands run as")
	fs.IntVar(&o.GID, "gid", 1000, "group commands run as")
	fs.IntVar(&o.OOMScoreAdj, "oom-score-adj", 1000, "oom_score_adj commands are born with (0: leave it)")
	fs.UintVar(&o.TagFirst, "tag-gid-first", 2000000000, "first gid of the per-command tag groups")
	fs.UintVar(&o.TagCount, "tag-gid-count", 65536, "number of tag gids (0: no tags; trees without a cgroup are then process groups)")
	fs.StringVar(&o.Cgroup, "cgroup", "auto", "per-command cgroups: auto, off, v1 or v2")
	fs.IntVar(&o.MaxFinished, "max-finished-tasks", local.DefaultMaxFinishedTasks, "finished background tasks kept per session")
	fs.StringVar(&o.Listen, "listen", "", "TCP address to serve the protocol on instead of --socket, e.g. :7070 (Kubernetes: the pod IP); every request must carry the token in $"+EnvToken)
	fs.StringVar(&o.tokenFile, "token-file", "", "with --listen: read the token from this file (then removed, where the agent may) instead of $"+EnvToken+", so that the agent's initial environment, which /proc/1/environ shows, holds no secret")
	execGuard := fs.Bool("exec-guard", true, "check every exec of a command against its call's deny and ask rules, in a tracer process (agent/execguard); false: the rules are checked only before a call runs")
	fs.BoolVar(&o.NoSetuid, "no-setuid", false, "commands run as the agent's own uid/gid (a non-root pod under the restricted Pod Security profile): --uid/--gid must be the agent's; the agent makes itself non-dumpable and ignores the signals that would end it (see below)")
	fs.StringVar(&o.install, "install", "", "copy this binary to the given path (mode 0555) and exit: an init container delivering the agent")
	fs.StringVar(&o.tokenOut, "token-out", "", "with --install: write $"+EnvToken+" to this file (mode 0400) for the agent's --token-file")
	fs.StringVar(&o.own, "own", "", "with --install: also give this directory to --uid:--gid, mode 0755 (needs CAP_CHOWN)")
	fs.Int64Var(&o.Nproc, "nproc", 0, "RLIMIT_NPROC of commands (0: leave it): the workload's process limit under gVisor, which counts it per uid inside the sandbox (on runc the kernel counts the uid's processes host-wide: do not use it there); a root agent is exempt")
	fs.BoolVar(&o.ServeThroughGrace, "serve-through-grace", false, "SIGTERM does not stop the agent: it starts no new calls or tasks and serves on (the server saves the workspace through it during a pod's termination grace) until POST /v1/exit or SIGKILL (not with --no-setuid, where SIGTERM is ignored anyway)")
	fs.StringVar(&o.EgressListen, "egress-listen", "", "address of the egress proxy, e.g. "+egresswire.DefaultListen+" (empty: none; the server relays its connections to the policy's allowlist)")
	showVersion := fs.Bool("version", false, "print the version and protocol, and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o.NoExecGuard = !*execGuard
	if fs.NArg() > 0 {
		logger.Printf("unexpected arguments: %q", fs.Args())
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stderr, "shellbox-agent %s (protocol %d, %s, %s/%s)\n", versionString(), agentapi.Protocol, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}
	if o.install != "" {
		if err := install(o); err != nil {
			logger.Print(err)
			return 1
		}
		return 0
	}
	if o.own != "" || o.tokenOut != "" {
		logger.Print("--own and --token-out go with --install")
		return 2
	}
	if o.Listen != "" {
		// Read once and dropped from the environment, so no command's
		// environment can inherit it (baseEnv drops SHELLBOX_* anyway).
		o.Token = os.Getenv(EnvToken)
		os.Unsetenv(EnvToken)
		if o.tokenFile != "" {
			tok, err := tokenFromFile(o.tokenFile)
			if err != nil {
				logger.Print(err)
				return 2
			}
			o.Token = tok
		}
		if len(o.Token) < minTokenLen {
			logger.Printf("--listen needs a per-session token of at least %d bytes in $%s or --token-file", minTokenLen, EnvToken)
			return 2
		}
	}
	if o.NoSetuid && (o.UID != os.Geteuid() || o.GID != os.Getegid()) {
		logger.Printf("--no-setuid: --uid/--gid %d:%d must be the agent's own, %d:%d", o.UID, o.GID, os.Geteuid(), os.Getegid())
		return 2
	}
	// Before the bounding set is emptied: the guard must keep the agent's
	// capabilities to trace it.
	agent.StartExecGuard(&o.Options, logger.Printf)
	// Before any command: they inherit the bounding set (agent/capabilities.go).
	if err := agent.LimitCapabilities(); err != nil {
		logger.Print(err)
		return 1
	}
	o.Version = versionString()
	if err := agent.Serve(o.Options, logger, recentLog(recent)); err != nil {
		logger.Print(err)
		return 1
	}
	return 0
}

// hook is the checkpoint hook: `shellbox-agent checkpoint-hook [--socket
// path]` with $GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE save, restore or resume
// has the agent serving --socket close it or listen again (agent.Hook).
func hook(args []string, mode string, signal func(syscall.Signal) error, stderr io.Writer) int {
	fs := flag.NewFlagSet("shellbox-agent "+agent.HookArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "/run/shellbox/agent.sock", "the agent's --socket")
	timeout := fs.Duration("timeout", agent.HookTimeout, "how long to wait for the agent")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "shellbox-agent %s: unexpected arguments %q\n", agent.HookArg, fs.Args())
		return 2
	}
	if err := agent.Hook(mode, *socket, signal, *timeout); err != nil {
		fmt.Fprintf(stderr, "shellbox-agent: %v\n", err)
		return 1
	}
	return 0
}

// recentLog returns the tail's text from its first whole line.
func recentLog(t *output.Tail) func() string {
	return func() string {
		b := t.Bytes()
		if t.Truncated() {
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				b = b[i+1:]
			}
		}
		return string(b)
	}
}
