// Command shellbox-agent is the agent inside every sandbox: a static binary
// (CGO_ENABLED=0) bind-mounted read-only at /.shellbox/agent and run as the
// sandbox's PID 1, as root with only CAP_SETUID, CAP_SETGID and CAP_KILL.
//
// It serves the agentapi protocol on a unix socket in the session's host
// directory (mode 0600: the commands, which run as --uid, cannot connect)
// over a local.Executor configured for a sandbox:
//
//   - commands run as --uid/--gid (no capabilities left after the switch),
//     each in its own process group and, where the cgroupfs is writable, its
//     own cgroup; where it is not (a container), each gets a unique
//     supplementary "tag" group from --tag-gid-first/--tag-gid-count, which it
//     cannot drop, so timeouts and kills reach setsid'd and daemonized
//     descendants too;
//   - commands are born with oom_score_adj --oom-score-adj (inherited from
//     the agent around each fork), so the OOM killer takes a command, not the
//     agent, and an OOM kill is reported in the result;
//   - timeouts are enforced here, whatever becomes of the server's connection;
//     background tasks and their bounded output live here, so a restarted
//     server re-adopts them;
//   - as PID 1 it reaps every orphan that is not a command leader.
//
// The commands' base environment is the agent's own (the image's ENV) minus
// SHELLBOX_* variables, with HOME and DSH_HOME set to --home. Spill files go
// to --spill-dir (root's, 0755: commands read them, cannot write them), and
// the agent serves them (GET /v1/spill), so a server without a host path to
// them (Kubernetes) reads them through the agent.
//
// With --egress-listen it also runs the sandbox's egress proxy there
// (sandbox/egress): an HTTP proxy with no way out but the server's relay,
// which polls it over the socket.
//
// In a Kubernetes pod (sandbox/kube; pod.go) an init container delivers it
// (--install copies the binary into an emptyDir), and it serves on TCP
// instead of a socket (--listen :7070), requiring on every request the
// per-session token it reads once from $SHELLBOX_AGENT_TOKEN and unsets.
// With a token it makes itself non-dumpable, so no process without
// CAP_SYS_PTRACE can read its memory or /proc/1/environ. With --no-setuid
// (the restricted Pod Security profile: no root, no capabilities) commands
// run as the agent's own uid; it then also ignores every signal the Go
// runtime would die of (as PID 1 the kernel drops SIGKILL and SIGSTOP from
// inside the namespace), and trees are process groups only (no tag groups
// without CAP_SETGID): see sandbox/kube's package doc for what that costs.
// --nproc sets the commands' RLIMIT_NPROC (a pod under gVisor, whose spec
// has no pids limit).
//
// SIGTERM or SIGINT stops serving, kills every command and exits (not with
// --no-setuid: there the pod's deletion ends it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor/agentapi"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/sandbox/egress"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

func versionString() string {
	v := version
	if v == "" {
		v = "devel"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	return v
}

type options struct {
	socket, spillDir, root, home string
	listen                       string // TCP address; "" serves the unix socket
	token                        string // from EnvToken, with listen
	noSetuid                     bool
	install, own                 string
	nproc                        int64
	uid, gid                     int
	oomScoreAdj                  int
	tagFirst, tagCount           uint
	cgroup                       string
	maxFinished                  int
	egressListen                 string
}

func main() {
	reserveThreads(reservedThreads)
	os.Exit(run(os.Args[1:], os.Stderr))
}

// reservedThreads is how many OS threads the agent creates at start: enough
// for every concurrent command's blocking wait plus the server's own.
const reservedThreads = 96

// reserveThreads makes the Go runtime create n OS threads now, while it can.
// The pids limit counts the agent's threads with the commands' processes:
// under a fork storm inside the sandbox the runtime could not create one
// later and would die ("newosproc"), taking the sandbox with it. The
// goroutines unlock before they end, so the threads stay, idle, in the
// runtime's pool.
func reserveThreads(n int) {
	var ready, release sync.WaitGroup
	ready.Add(n)
	release.Add(1)
	for range n {
		go func() {
			runtime.LockOSThread()
			ready.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	release.Done()
}

func run(args []string, stderr io.Writer) int {
	logger := log.New(stderr, "shellbox-agent: ", 0)
	var o options
	fs := flag.NewFlagSet("shellbox-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.socket, "socket", "/run/shellbox/agent.sock", "unix socket to serve the protocol on (mode 0600)")
	fs.StringVar(&o.spillDir, "spill-dir", "/run/shellbox/spill", "directory of spill files (made 0755, root's)")
	fs.StringVar(&o.root, "root", "/workspace", "session root: the cwd of commands, and what workdirs must stay inside")
	fs.StringVar(&o.home, "home", "/workspace", "HOME of commands")
	fs.IntVar(&o.uid, "uid", 1000, "user commands run as")
	fs.IntVar(&o.gid, "gid", 1000, "group commands run as")
	fs.IntVar(&o.oomScoreAdj, "oom-score-adj", 1000, "oom_score_adj commands are born with (0: leave it)")
	fs.UintVar(&o.tagFirst, "tag-gid-first", 2000000000, "first gid of the per-command tag groups")
	fs.UintVar(&o.tagCount, "tag-gid-count", 65536, "number of tag gids (0: no tags; trees without a cgroup are then process groups)")
	fs.StringVar(&o.cgroup, "cgroup", "auto", "per-command cgroups: auto, off, v1 or v2")
	fs.IntVar(&o.maxFinished, "max-finished-tasks", local.DefaultMaxFinishedTasks, "finished background tasks kept per session")
	fs.StringVar(&o.listen, "listen", "", "TCP address to serve the protocol on instead of --socket, e.g. :7070 (Kubernetes: the pod IP); every request must carry the token in $"+EnvToken)
	fs.BoolVar(&o.noSetuid, "no-setuid", false, "commands run as the agent's own uid/gid (a non-root pod under the restricted Pod Security profile): --uid/--gid must be the agent's; the agent makes itself non-dumpable and ignores the signals that would end it (see below)")
	fs.StringVar(&o.install, "install", "", "copy this binary to the given path (mode 0555) and exit: an init container delivering the agent")
	fs.StringVar(&o.own, "own", "", "with --install: also give this directory to --uid:--gid, mode 0755 (needs CAP_CHOWN)")
	fs.Int64Var(&o.nproc, "nproc", 0, "RLIMIT_NPROC of commands (0: leave it): the workload's process limit under gVisor, which counts it per uid inside the sandbox (on runc the kernel counts the uid's processes host-wide: do not use it there); a root agent is exempt")
	fs.StringVar(&o.egressListen, "egress-listen", "", "address of the egress proxy, e.g. "+egress.DefaultListen+" (empty: none; the server relays its connections to the policy's allowlist)")
	showVersion := fs.Bool("version", false, "print the version and protocol, and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
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
	if o.own != "" {
		logger.Print("--own goes with --install")
		return 2
	}
	if o.listen != "" {
		// Read once and dropped from the environment, so no command's
		// environment can inherit it (baseEnv drops SHELLBOX_* anyway).
		o.token = os.Getenv(EnvToken)
		os.Unsetenv(EnvToken)
		if len(o.token) < minTokenLen {
			logger.Printf("--listen needs a per-session token of at least %d bytes in $%s", minTokenLen, EnvToken)
			return 2
		}
	}
	if o.noSetuid && (o.uid != os.Geteuid() || o.gid != os.Getegid()) {
		logger.Printf("--no-setuid: --uid/--gid %d:%d must be the agent's own, %d:%d", o.uid, o.gid, os.Geteuid(), os.Getegid())
		return 2
	}
	if err := serve(o, logger); err != nil {
		logger.Print(err)
		return 1
	}
	return 0
}

func serve(o options, logger *log.Logger) error {
	if os.Getpid() != 1 {
		// Not a sandbox's init (a test, a developer): adopt the orphans
		// anyway, so they are reaped here as they would be in a sandbox.
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	stopSignals := []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	if o.noSetuid {
		// Commands of the agent's uid may signal it. As PID 1 of its pid
		// namespace the kernel already drops SIGKILL and SIGSTOP from
		// inside it, and every signal without a handler; the Go runtime
		// has handlers for the rest, and would exit on them. So the agent
		// ignores every signal that would end it, SIGTERM included: the
		// kubelet's SIGKILL after the (short) grace period ends the pod.
		signal.Ignore(fatalSignals...)
		stopSignals = nil
	}
	var (
		ctx  context.Context
		stop context.CancelFunc
	)
	if len(stopSignals) > 0 {
		ctx, stop = signal.NotifyContext(context.Background(), stopSignals...)
	} else {
		// (NotifyContext with no signals would relay every signal.)
		ctx, stop = context.WithCancel(context.Background())
	}
	defer stop()
	go reap(ctx, logger)

	if err := os.MkdirAll(o.spillDir, 0o755); err != nil {
		return fmt.Errorf("spill dir: %w", err)
	}
	if err := os.Chmod(o.spillDir, 0o755); err != nil && !(o.noSetuid && errors.Is(err, os.ErrPermission)) {
		// (Without setuid the commands are the agent's uid: no mode keeps
		// them out, and a non-root agent cannot chmod a root-owned
		// emptyDir.)
		return fmt.Errorf("spill dir: %w", err)
	}
	cfg := local.Config{
		Root:             o.root,
		Home:             o.home,
		SpillDir:         o.spillDir,
		BaseEnv:          baseEnv(os.Environ(), o.home),
		Cgroup:           local.CgroupMode(o.cgroup),
		MaxFinishedTasks: o.maxFinished,
		MemoryCgroup:     "auto",
	}
	if !o.noSetuid && (o.uid != os.Geteuid() || o.gid != os.Getegid()) {
		cfg.Credential = &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid)}
		if o.uid != 0 && o.tagCount > 0 {
			cfg.TagGroups = local.GroupRange{First: uint32(o.tagFirst), Count: uint32(o.tagCount)}
		}
	}
	if o.oomScoreAdj != 0 {
		cfg.OOMScoreAdj, cfg.OOMScoreAdjInherit = o.oomScoreAdj, true
	}
	if o.nproc > 0 {
		// Set on the agent, inherited by every command. The agent's own
		// threads were made at start (reserveThreads), and root is exempt.
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: uint64(o.nproc), Max: uint64(o.nproc)}); err != nil {
			return fmt.Errorf("--nproc: %w", err)
		}
	}
	e, err := local.New(cfg)
	if err != nil {
		return err
	}
	if o.token != "" || o.noSetuid {
		// Non-dumpable: no process without CAP_SYS_PTRACE may ptrace the
		// agent or read its /proc/<pid>/{mem,environ,fd,...} (they become
		// root's), so a command of the agent's own uid (--no-setuid)
		// cannot lift the token from its memory. After local.New, which
		// opens this process's oom_score_adj while it still may; before
		// serving: no command exists yet.
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
		}
	}
	if n, err := local.Cleanup(""); err != nil || n > 0 {
		logger.Printf("cleanup of leftover cgroups: %d removed, %v", n, err)
	}
	scfg := agentapi.ServerConfig{Runner: e, Agent: versionString(), Root: o.root, Home: o.home, SpillDir: o.spillDir, Token: o.token}
	if o.egressListen != "" {
		pl, err := net.Listen("tcp", o.egressListen)
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		p := egress.NewProxy(egress.ProxyConfig{Logger: logger})
		go func() {
			if err := p.Serve(ctx, pl); err != nil {
				logger.Print(err)
			}
		}()
		scfg.Egress = p
		logger.Printf("egress proxy on %s", pl.Addr())
	}
	srv, err := agentapi.NewServer(scfg)
	if err != nil {
		return err
	}
	var l net.Listener
	where := o.socket
	if o.listen != "" {
		// No unix socket beside it: under --no-setuid a command could
		// connect to one (same uid); the token is the only key.
		if l, err = net.Listen("tcp", o.listen); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		where = "tcp " + l.Addr().String() + " (token required)"
	} else if l, err = agentapi.Listen(o.socket); err != nil {
		return err
	}
	tracking := e.Isolation()
	if cfg.TagGroups.Count > 0 && !strings.HasPrefix(tracking, "cgroup") {
		tracking += fmt.Sprintf(" + tag groups %d+%d", cfg.TagGroups.First, cfg.TagGroups.Count)
	}
	logger.Printf("%s (protocol %d) serving %s: commands as %d:%d in %s, trees: %s, memory cgroup: %q",
		versionString(), agentapi.Protocol, where, o.uid, o.gid, o.root, tracking, e.MemoryCgroup())

	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Print("stopping")
	// The sandbox is going away: stop taking calls, end what runs, go.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	hs.Close()
	cctx, cancel2 := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel2()
	return e.Close(cctx)
}

// reap reaps orphaned zombies on every SIGCHLD, and every second in case
// signals were coalesced, until ctx ends.
func reap(ctx context.Context, logger *log.Logger) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-tick.C:
		}
		if _, err := local.ReapOrphans(); err != nil {
			logger.Printf("reap: %v", err)
		}
	}
}

// baseEnv is the commands' base environment: the agent's own minus its
// SHELLBOX_* settings, with HOME and DSH_HOME set, and PATH and LANG
// defaulted.
func baseEnv(environ []string, home string) []string {
	var out []string
	have := map[string]bool{}
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(k, "SHELLBOX_") || k == "HOME" || k == "DSH_HOME" {
			continue
		}
		have[k] = true
		out = append(out, kv)
	}
	if !have["PATH"] {
		out = append(out, "PATH="+local.DefaultPath)
	}
	if !have["LANG"] {
		out = append(out, "LANG=C.UTF-8")
	}
	return append(out, "HOME="+home, "DSH_HOME="+home)
}
