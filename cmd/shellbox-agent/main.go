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
// SIGTERM or SIGINT stops serving, kills every command and exits.
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go reap(ctx, logger)

	if err := os.MkdirAll(o.spillDir, 0o755); err != nil {
		return fmt.Errorf("spill dir: %w", err)
	}
	if err := os.Chmod(o.spillDir, 0o755); err != nil {
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
	if o.uid != os.Geteuid() || o.gid != os.Getegid() {
		cfg.Credential = &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid)}
		if o.uid != 0 && o.tagCount > 0 {
			cfg.TagGroups = local.GroupRange{First: uint32(o.tagFirst), Count: uint32(o.tagCount)}
		}
	}
	if o.oomScoreAdj != 0 {
		cfg.OOMScoreAdj, cfg.OOMScoreAdjInherit = o.oomScoreAdj, true
	}
	e, err := local.New(cfg)
	if err != nil {
		return err
	}
	if n, err := e.AdoptSpillFiles(); err != nil || n > 0 {
		logger.Printf("spill files of an earlier agent: %d, evicted first when space is needed (%v)", n, err)
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
	scfg := agentapi.ServerConfig{Runner: e, Agent: versionString(), Root: o.root, Home: o.home, SpillDir: o.spillDir, Files: tree}
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
	l, err := agentapi.Listen(o.socket)
	if err != nil {
		return err
	}
	tracking := e.Isolation()
	if cfg.TagGroups.Count > 0 && !strings.HasPrefix(tracking, "cgroup") {
		tracking += fmt.Sprintf(" + tag groups %d+%d", cfg.TagGroups.First, cfg.TagGroups.Count)
	}
	logger.Printf("%s (protocol %d) serving %s: commands as %d:%d in %s, trees: %s, memory cgroup: %q",
		versionString(), agentapi.Protocol, o.socket, o.uid, o.gid, o.root, tracking, e.MemoryCgroup())

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
