// Command shellbox-agent is the agent inside every sandbox: a static binary
// (CGO_ENABLED=0) bind-mounted read-only at /.shellbox/agent and run as the
// sandbox's PID 1, as root with only CAP_SETUID, CAP_SETGID and CAP_KILL
// (and CAP_SETPCAP, which it uses at start to empty the capability bounding
// set that its commands inherit, and then drops: caps.go; under gVisor also
// CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, permitted only, raised on one
// thread for the egress proxy's lookups).
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
//   - as PID 1 it reaps every orphan that is not a command leader;
//   - it costs 18 OS threads (sandbox.AgentTasks: 16, and 2 for file
//     transfers), created at start and never
//     exceeded, and about 7.3 MiB RSS idle (measured by TestDockerAgentCost);
//     a runc sandbox's pids cgroup is the policy's pids plus those threads
//     (sandbox.PidsCgroupLimit), see reserveThreads;
//   - when the spill space is full, the oldest spill files of finished calls
//     are deleted to make room for new ones (output.Space).
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
// It serves uploads and downloads in --root (PUT and GET /v1/files),
// confined to it and done as --uid/--gid (package executor/files).
//
// In a Kubernetes pod (kube/; pod.go) an init container delivers it
// (--install copies the binary into an emptyDir), and it serves on TCP
// instead of a socket (--listen :7070), requiring on every request the
// per-session token it reads once from $SHELLBOX_AGENT_TOKEN and unsets, or
// from --token-file (then removed where it may be): the initial environment
// block stays in the agent's memory, readable as /proc/1/environ wherever
// non-dumpability is not honoured, so a file keeps the token out of it.
// With a token it makes itself non-dumpable, so no process without
// CAP_SYS_PTRACE can read its memory or /proc/1/environ. With --no-setuid
// (the restricted Pod Security profile: no root, no capabilities) commands
// run as the agent's own uid; it then also ignores every signal the Go
// runtime would die of (as PID 1 the kernel drops SIGKILL and SIGSTOP from
// inside the namespace), and trees are process groups only (no tag groups
// without CAP_SETGID): see kube's package doc for what that costs.
// --nproc sets the commands' RLIMIT_NPROC (a pod under gVisor, whose spec
// has no pids limit).
//
// SIGTERM or SIGINT stops serving, kills every command and exits (not with
// --no-setuid: there the pod's deletion ends it).
package main

import (
	"bytes"
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
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor/agentapi"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/executor/local/landlock"
	"github.com/shellbox/shellbox/executor/output"
	sbx "github.com/shellbox/shellbox/sandbox"
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
	token                        string // from EnvToken or tokenFile, with listen
	tokenFile                    string
	noSetuid                     bool
	install, own, tokenOut       string
	nproc                        int64
	uid, gid                     int
	oomScoreAdj                  int
	tagFirst, tagCount           uint
	cgroup                       string
	maxFinished                  int
	egressListen                 string
}

func main() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(maxProcs)
	}
	growFdTable(fdTableSize)
	output.LimitWrites(spillWriters)
	local.LimitProcScans(procScanners)
	reserveThreads(sbx.AgentTasks)
	os.Exit(run(os.Args[1:], os.Stderr))
}

// maxProcs caps the Go runtime's processors: the agent moves bytes between
// pipes, files and a socket, and every processor can keep an OS thread busy
// (the garbage collector's workers run on all of them), so on a large host
// the default would raise the agent's threads with the host's cores.
const maxProcs = 2

// spillWriters bounds the spill-file writes in flight (output.LimitWrites):
// each holds a thread while it runs.
const spillWriters = 2

// procScanners bounds the /proc scans in flight (local.LimitProcScans):
// the searches of commands' trees and of orphans, hundreds of system calls
// each.
const procScanners = 2

// The agent's threads. A runc sandbox's pids cgroup counts them with the
// commands' processes, and the Go runtime dies ("newosproc") when it cannot
// create a thread it needs: under a fork storm that fills the cgroup, it
// could not. So the agent creates all the threads it will ever need at
// start, sandbox.AgentTasks of them, and the runtime adds its commands'
// limit on top (sandbox.PidsCgroupLimit): the commands get what the policy
// names and can never take a thread the agent needs, because the agent
// already holds them.
//
// sandbox.AgentTasks covers: the main thread, the runtime's monitor and
// template threads, one per processor (maxProcs), and spares for system
// calls that block while other work runs. The runtime starts a thread
// whenever a goroutine is stuck in a system call and others wait to run,
// so what could block many goroutines at once is bounded: the descriptor
// table is sized at start (growFdTable), and spill writes and /proc scans
// run at most 2 at a time each. Nothing the agent does keeps a thread per command: output pipes and
// the leaders' exits (pidfds) are waited for in the runtime's poller
// (executor/local). checkThreads logs if the count ever grows past it.

// reserveThreads makes the Go runtime create OS threads now, while it can,
// until the process has total of them (as near as the runtime allows). The goroutines unlock before they
// end, so the threads stay, idle, in the runtime's pool.
func reserveThreads(total int) {
	var release sync.WaitGroup
	release.Add(1)
	var held sync.WaitGroup
	for i := 0; i < total && threadCount() < total; i++ {
		ready := make(chan struct{})
		held.Add(1)
		go func() {
			defer held.Done()
			runtime.LockOSThread()
			close(ready)
			release.Wait()
			runtime.UnlockOSThread()
		}()
		<-ready
	}
	release.Done()
	held.Wait()
	// Waking goroutines can make the runtime start a thread more than the
	// locked ones needed: a goroutine that ends locked to its thread ends
	// the thread, so end the extra ones (the main thread is never ended;
	// a try that lands on it changes nothing).
	for i := 0; i < 2*total && threadCount() > total; i++ {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
		}()
		<-done
		time.Sleep(time.Millisecond)
	}
}

// fdTableSize is how many descriptors the agent's table holds from the
// start (growFdTable): each running call takes a handful (pipes, pidfd,
// spill file, connection), so this covers hundreds of concurrent calls.
const fdTableSize = 4096

// growFdTable makes the kernel size this process's descriptor table for n
// descriptors now, while the process has one thread. Growing it later, in a
// multithreaded process, waits for an RCU grace period (milliseconds) with
// the table locked: every thread that opens a file meanwhile blocks in the
// kernel, and the Go runtime starts new threads for the goroutines that wait
// for them (measured: 25 threads blocked in expand_files under 30
// concurrent calls and a fork bomb). The table never shrinks.
func growFdTable(n int) {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(n) {
		n = int(lim.Cur)
	}
	if n < 2 {
		return
	}
	if err := unix.Dup3(2, n-1, unix.O_CLOEXEC); err == nil {
		unix.Close(n - 1)
	}
}

// threadCount is the number of threads of this process, 0 if unknown.
func threadCount() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// threadWatch logs once when the agent holds more threads than it reserved
// (sandbox.AgentTasks): its commands could then fill the pids cgroup while
// it needs one more. The number, for the operator who sizes AgentTasks.
type threadWatch struct{ peak int }

func (w *threadWatch) check(logger *log.Logger) {
	n := threadCount()
	if n > sbx.AgentTasks && n > w.peak {
		w.peak = n
		logger.Printf("the agent holds %d threads, more than the %d it reserved (sandbox.AgentTasks)", n, sbx.AgentTasks)
	}
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
	fs.StringVar(&o.tokenFile, "token-file", "", "with --listen: read the token from this file (then removed, where the agent may) instead of $"+EnvToken+", so that the agent's initial environment, which /proc/1/environ shows, holds no secret")
	fs.BoolVar(&o.noSetuid, "no-setuid", false, "commands run as the agent's own uid/gid (a non-root pod under the restricted Pod Security profile): --uid/--gid must be the agent's; the agent makes itself non-dumpable and ignores the signals that would end it (see below)")
	fs.StringVar(&o.install, "install", "", "copy this binary to the given path (mode 0555) and exit: an init container delivering the agent")
	fs.StringVar(&o.tokenOut, "token-out", "", "with --install: write $"+EnvToken+" to this file (mode 0400) for the agent's --token-file")
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
	if o.own != "" || o.tokenOut != "" {
		logger.Print("--own and --token-out go with --install")
		return 2
	}
	if o.listen != "" {
		// Read once and dropped from the environment, so no command's
		// environment can inherit it (baseEnv drops SHELLBOX_* anyway).
		o.token = os.Getenv(EnvToken)
		os.Unsetenv(EnvToken)
		if o.tokenFile != "" {
			tok, err := tokenFromFile(o.tokenFile)
			if err != nil {
				logger.Print(err)
				return 2
			}
			o.token = tok
		}
		if len(o.token) < minTokenLen {
			logger.Printf("--listen needs a per-session token of at least %d bytes in $%s or --token-file", minTokenLen, EnvToken)
			return 2
		}
	}
	if o.noSetuid && (o.uid != os.Geteuid() || o.gid != os.Getegid()) {
		logger.Printf("--no-setuid: --uid/--gid %d:%d must be the agent's own, %d:%d", o.uid, o.gid, os.Geteuid(), os.Getegid())
		return 2
	}
	// Before any command: they inherit the bounding set (caps.go).
	if err := dropBoundingSet(); err != nil && !errors.Is(err, errNoSetpcap) {
		logger.Print(err)
		return 1
	}
	if err := lowerTracerCaps(); err != nil {
		logger.Print(err)
		return 1
	}
	if err := serve(o, logger, recentLog(recent)); err != nil {
		logger.Print(err)
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

func serve(o options, logger *log.Logger, recent func() string) error {
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
	// Before any command: one call's commands may not trace, or read or
	// write the memory of, another call's (same uid); strace and gdb fail
	// with EPERM in sandboxes.
	if err := local.DenyTracing(); err != nil {
		return err
	}
	// Each call in a Landlock domain of its own, so that one call cannot
	// open another's /proc/<pid>/mem (executor/local/landlock). Where it
	// cannot be (gVisor has no Landlock, and its sentry refuses that open
	// anyway), commands start directly and the log says why. Before the
	// reaper starts: Shim runs the shim once and waits for it.
	shim, shimErr := landlock.Shim()
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
		Logf:             logger.Printf,
	}
	if shimErr != nil {
		logger.Printf("no Landlock domain per call: %v", shimErr)
	} else {
		defer shim.Close()
		cfg.ExecShim = shim
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
	if n, err := e.AdoptSpillFiles(); err != nil || n > 0 {
		logger.Printf("spill files of an earlier agent: %d, evicted first when space is needed (%v)", n, err)
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
	// Uploads and downloads act as the commands' user (setfsuid, which
	// CAP_SETUID and CAP_SETGID allow): what they create is the user's,
	// and they can reach nothing the commands could not.
	tree := &files.Tree{Root: filepath.Clean(o.root), UID: -1, GID: -1}
	if o.uid != os.Geteuid() || o.gid != os.Getegid() {
		tree.UID, tree.GID = o.uid, o.gid
	}
	scfg := agentapi.ServerConfig{Runner: e, Agent: versionString(), Root: o.root, Home: o.home, SpillDir: o.spillDir, Files: tree, Token: o.token, Log: recent}
	if o.egressListen != "" {
		pl, err := net.Listen("tcp", o.egressListen)
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		pcfg := egress.ProxyConfig{Logger: logger}
		if cfg.TagGroups.Count > 0 || strings.HasPrefix(e.Isolation(), "cgroup") {
			// A call's network grant holds for its own tree only: the
			// proxy finds the processes holding a connection's socket
			// (reading their fds as the commands' user, or under gVisor,
			// whose runtime gives the agent CAP_SYS_PTRACE and
			// CAP_DAC_READ_SEARCH for it, with those raised on the
			// lookup's thread) and the executor says which grant their
			// tag or cgroup (gVisor's cgroupfs is writable: there each
			// command gets a cgroup, and no tag) carries. Without either
			// no connection carries a grant.
			uid, gid := o.uid, o.gid
			read := func(fn func() error) error { return files.AsUser(uid, gid, fn) }
			if files.TracerCaps() {
				read = files.AsTracer
			}
			grantOf := func(h egress.Holder) string { return e.Grant(h.Groups, h.Cgroups) }
			pcfg.Grant = func(c net.Conn) (string, error) { return egress.TreeGrant(c, read, grantOf) }
		}
		p := egress.NewProxy(pcfg)
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
	if cfg.ExecShim != nil {
		tracking += ", a Landlock domain per call"
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
	var threads threadWatch
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-tick.C:
			threads.check(logger)
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
