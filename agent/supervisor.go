package agent

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agent/egress"
	"github.com/shellbox/shellbox/agent/execguard"
	"github.com/shellbox/shellbox/agent/landlock"
	"github.com/shellbox/shellbox/agent/notrace"
	"github.com/shellbox/shellbox/agent/pid1"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/executor/output"
	"github.com/shellbox/shellbox/internal/clip"
	"github.com/shellbox/shellbox/internal/procscan"
	"github.com/shellbox/shellbox/internal/threads"
)

// Options are what the agent serves with: cmd/shellbox-agent's flags.
type Options struct {
	Socket, SpillDir, Root, Home string
	Listen                       string // TCP address; "" serves the unix socket
	Token                        string // required with Listen
	NoSetuid                     bool
	Nproc                        int64
	UID, GID                     int
	OOMScoreAdj                  int
	TagFirst, TagCount           uint
	Cgroup                       string
	MaxFinished                  int
	EgressListen                 string
	// ServeThroughGrace: SIGTERM does not stop the agent; it fences it
	// (apiserver.Server.Fence: no new call or task starts) and it serves
	// on, so the server can save the workspace through it during a pod's
	// termination grace, until the server says it is done (POST /v1/exit)
	// or the kubelet's SIGKILL at the grace's end.
	ServeThroughGrace bool
	Version           string // reported by the handshake and the log
	// NoExecGuard leaves out the exec guard (agent/execguard): commands'
	// execs are then not checked against the call's rules in the sandbox.
	NoExecGuard bool
	// ExecGuard is the guard StartExecGuard started (nil: none, and
	// ExecGuardErr says why).
	ExecGuard    *execguard.Guard
	ExecGuardErr error
}

// StartExecGuard starts the exec guard (agent/execguard) as o says, into
// o.ExecGuard, or says in o.ExecGuardErr why there is none. Before
// LimitCapabilities: the guard is a process of its own, and a tracer's
// permitted capabilities must hold the traced process's, which an exec
// after the bounding set is emptied would not keep.
func StartExecGuard(o *Options, logf func(string, ...any)) {
	if o.NoExecGuard {
		o.ExecGuardErr = errors.New("--exec-guard=false")
		return
	}
	o.ExecGuard, o.ExecGuardErr = execguard.Start(o.UID, o.GID, logf)
}

// SetUpProcess bounds the process before anything else runs: its Go
// processors, its fd table, its concurrent spill writes and /proc scans,
// and the threads it holds (AgentTasks, reserved up front).
func SetUpProcess() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(maxProcs)
	}
	growFdTable(fdTableSize)
	output.LimitWrites(spillWriters)
	procscan.Limit(procScanners)
	threads.Reserve(agentapi.AgentTasks)
}

// maxProcs caps the Go runtime's processors: the agent moves bytes between
// pipes, files and a socket, and every processor can keep an OS thread busy
// (the garbage collector's workers run on all of them), so on a large host
// the default would raise the agent's threads with the host's cores.
const maxProcs = 2

// spillWriters bounds the spill-file writes in flight (output.LimitWrites):
// each holds a thread while it runs.
const spillWriters = 2

// procScanners bounds the /proc scans in flight (procscan.Limit):
// the searches of commands' trees and of orphans, hundreds of system calls
// each.
const procScanners = 2

// The agent's threads. A runc sandbox's pids cgroup counts them with the
// commands' processes, and the Go runtime dies ("newosproc") when it cannot
// create a thread it needs: under a fork storm that fills the cgroup, it
// could not. So the agent creates all the threads it will ever need at
// start, agentapi.AgentTasks of them, and the runtime adds its commands'
// limit on top (agentapi.PidsCgroupLimit): the commands get what the policy
// names and can never take a thread the agent needs, because the agent
// already holds them.
//
// agentapi.AgentTasks covers: the main thread, the runtime's monitor and
// template threads, one per processor (maxProcs), and spares for system
// calls that block while other work runs. The runtime starts a thread
// whenever a goroutine is stuck in a system call and others wait to run,
// so what could block many goroutines at once is bounded: the descriptor
// table is sized at start (growFdTable), and spill writes and /proc scans
// run at most 2 at a time each. Nothing the agent does keeps a thread per command: output pipes and
// the leaders' exits (pidfds) are waited for in the runtime's poller
// (executor/local). checkThreads logs if the count ever grows past it.

// threadWatch logs once when the agent holds more threads than it reserved
// (agentapi.AgentTasks): its commands could then fill the pids cgroup while
// it needs one more. The number, for the operator who sizes AgentTasks.
type threadWatch struct{ peak int }

func (w *threadWatch) check(logger *log.Logger) {
	n := threads.Count()
	if n > agentapi.AgentTasks && n > w.peak {
		w.peak = n
		logger.Printf("the agent holds %d threads, more than the %d it reserved (agentapi.AgentTasks)", n, agentapi.AgentTasks)
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

// fatalSignals are the signals on which the Go runtime ends the process (it
// has handlers for them, so the kernel delivers them even to a pid
// namespace's init), and which a command of the agent's own uid could send
// it. SIGKILL and SIGSTOP are not here: the kernel drops them for init when
// they come from inside its namespace. (A SIGSEGV, SIGBUS or SIGFPE sent
// with kill(2) is ignored by the runtime already: only the kernel's own
// make it panic.)
var fatalSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
	syscall.SIGABRT, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE,
	syscall.SIGALRM, syscall.SIGSTKFLT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
	syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGSYS,
	syscall.SIGPWR,
}

// Serve runs the agent until a stop signal (SIGTERM, SIGINT; none with
// NoSetuid): it starts the local executor as o says, serves the protocol on
// o.Socket or o.Listen, the egress proxy on o.EgressListen, and reaps the
// orphans it adopts. recent serves GET /v1/log.
func Serve(o Options, logger *log.Logger, recent func() string) error {
	if os.Getpid() != 1 {
		// Not a sandbox's init (a test, a developer): adopt the orphans
		// anyway, so they are reaped here as they would be in a sandbox.
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	stopSignals := []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	var term chan os.Signal // SIGTERM fences instead (ServeThroughGrace)
	if o.ServeThroughGrace && !o.NoSetuid {
		stopSignals = []os.Signal{syscall.SIGINT}
		term = make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		defer signal.Stop(term)
	}
	if o.NoSetuid {
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
	// POST /v1/exit ends the agent as a stop signal does.
	ctx, exit := context.WithCancel(ctx)
	defer exit()
	// Each call in a Landlock domain of its own, so that one call cannot
	// open another's /proc/<pid>/mem (agent/landlock). Where it
	// cannot be (gVisor has no Landlock, and its sentry refuses that open
	// anyway), commands start directly and the log says why. Before the
	// reaper starts: Shim runs the shim once and waits for it; and before
	// the exec filter, which would hold that run's exec for a call's rules.
	shim, shimErr := landlock.Shim()
	// The exec guard (StartExecGuard), a process of its own that traces
	// this one, so that every exec of every command stops in it.
	guard, guardErr := o.ExecGuard, o.ExecGuardErr
	if guard == nil && guardErr == nil {
		guardErr = errors.New("not started")
	}
	// Before any command: one call's commands may not trace, or read or
	// write the memory of, another call's (same uid); strace and gdb fail
	// with EPERM in sandboxes; and clone3 fails with ENOSYS, so that libc
	// falls back to clone where the runtime's profile answers EPERM
	// (gVisor).
	if err := notrace.ConfineCommands(); err != nil {
		return err
	}
	if guard != nil {
		if guardErr = execguard.InstallFilter(); guardErr != nil {
			guard.Close()
			guard = nil
		}
	}
	if guardErr != nil {
		logger.Printf("no exec guard: %v: command rules are checked before a call runs, not at exec", guardErr)
	}
	go reap(ctx, logger)

	if err := os.MkdirAll(o.SpillDir, 0o755); err != nil {
		return fmt.Errorf("spill dir: %w", err)
	}
	if err := os.Chmod(o.SpillDir, 0o755); err != nil && !(o.NoSetuid && errors.Is(err, os.ErrPermission)) {
		// (Without setuid the commands are the agent's uid: no mode keeps
		// them out, and a non-root agent cannot chmod a root-owned
		// emptyDir.)
		return fmt.Errorf("spill dir: %w", err)
	}
	cfg := pid1.Config{
		Config: local.Config{
			Root:             o.Root,
			Home:             o.Home,
			SpillDir:         o.SpillDir,
			BaseEnv:          baseEnv(os.Environ(), o.Home),
			Cgroup:           local.CgroupMode(o.Cgroup),
			MaxFinishedTasks: o.MaxFinished,
			Logf:             logger.Printf,
		},
		MemoryCgroup: "auto",
	}
	if guard != nil {
		cfg.ExecGuard = guard
	}
	if shimErr != nil {
		logger.Printf("no Landlock domain per call: %v", shimErr)
	} else {
		defer shim.Close()
		cfg.ExecShim = shim
	}
	if !o.NoSetuid && (o.UID != os.Geteuid() || o.GID != os.Getegid()) {
		cfg.Credential = &syscall.Credential{Uid: uint32(o.UID), Gid: uint32(o.GID)}
		if o.UID != 0 && o.TagCount > 0 {
			cfg.TagGroups = pid1.GroupRange{First: uint32(o.TagFirst), Count: uint32(o.TagCount)}
		}
	}
	if o.OOMScoreAdj != 0 {
		cfg.OOMScoreAdj, cfg.OOMScoreAdjInherit = o.OOMScoreAdj, true
	}
	if o.Nproc > 0 {
		// Set on the agent, inherited by every command. The agent's own
		// threads were made at start (reserveThreads), and root is exempt.
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: uint64(o.Nproc), Max: uint64(o.Nproc)}); err != nil {
			return fmt.Errorf("--nproc: %w", err)
		}
	}
	e, err := pid1.New(cfg)
	if err != nil {
		return err
	}
	if n, err := e.AdoptSpillFiles(); err != nil || n > 0 {
		logger.Printf("spill files of an earlier agent: %d, evicted first when space is needed (%v)", n, err)
	}
	if o.Token != "" || o.NoSetuid {
		// Non-dumpable: no process without CAP_SYS_PTRACE may ptrace the
		// agent or read its /proc/<pid>/{mem,environ,fd,...} (they become
		// root's), so a command of the agent's own uid (--no-setuid)
		// cannot lift the token from its memory. After pid1.New, which
		// opens this process's oom_score_adj while it still may; before
		// serving: no command exists yet.
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
		}
	}
	if n, err := local.Cleanup(""); err != nil || n > 0 {
		logger.Printf("cleanup of leftover cgroups: %d removed, %v", n, err)
	}
	// Uploads and downloads, and the workspace's export and import, act
	// as the commands' user (setfsuid, which CAP_SETUID and CAP_SETGID
	// allow): what they create is the user's, and they can reach nothing
	// the commands could not.
	tree := &files.Tree{Root: filepath.Clean(o.Root), UID: -1, GID: -1}
	if o.UID != os.Geteuid() || o.GID != os.Getegid() {
		tree.UID, tree.GID = o.UID, o.GID
	}
	scfg := apiserver.ServerConfig{Runner: e, Agent: o.Version, Root: o.Root, Home: o.Home, SpillDir: o.SpillDir, Files: tree, Workspace: tree, Token: o.Token, Log: recent,
		Exit: func() {
			logger.Print("the server is done with this sandbox (POST /v1/exit)")
			exit()
		}}
	if guardErr != nil {
		// The server learns it at the handshake and warns.
		scfg.NoExecGuard = clip.To(guardErr.Error(), 512)
	}
	if o.EgressListen != "" {
		pl, err := net.Listen("tcp", o.EgressListen)
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		// The relay's CA goes into a bundle in the agent's directory,
		// which commands read and cannot write.
		pcfg := egress.ProxyConfig{Logger: logger, CAFile: egresswire.CAFile}
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
			uid, gid := o.UID, o.GID
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
		scfg.Egress, scfg.EgressOpen = p, p.Open
		logger.Printf("egress proxy on %s", pl.Addr())
	}
	srv, err := apiserver.NewServer(scfg)
	if err != nil {
		return err
	}
	// The checkpoint hook's signals (agent/checkpoint.go): only for the
	// host socket, and not with --no-setuid, where every signal that
	// would end the agent is ignored (these two among them). Before the
	// socket is made: a sandbox is checkpointable once it answers there.
	hookc := make(chan os.Signal, 1)
	if o.Listen == "" && !o.NoSetuid {
		signal.Notify(hookc, SigCloseHost, SigListenHost)
		defer signal.Stop(hookc)
	}
	newHTTP := func() *http.Server {
		return &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Minute}
	}
	errc := make(chan error, 1)
	var (
		host  *hostServer
		hs    *http.Server
		where = o.Socket
	)
	if o.Listen != "" {
		// No unix socket beside it: under --no-setuid a command could
		// connect to one (same uid); the token is the only key.
		l, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		where = "tcp " + l.Addr().String() + " (token required)"
		hs = newHTTP()
		go func() { errc <- hs.Serve(l) }()
	} else {
		host = &hostServer{socket: o.Socket, newHTTP: newHTTP, errc: errc, logf: logger.Printf}
		if err := host.listen(); err != nil {
			return err
		}
	}
	tracking := e.Isolation()
	if cfg.TagGroups.Count > 0 && !strings.HasPrefix(tracking, "cgroup") {
		tracking += fmt.Sprintf(" + tag groups %d+%d", cfg.TagGroups.First, cfg.TagGroups.Count)
	}
	if cfg.ExecShim != nil {
		tracking += ", a Landlock domain per call"
	}
	if cfg.ExecGuard != nil {
		tracking += ", execs checked by the exec guard"
	}
	logger.Printf("%s (protocol %d) serving %s: commands as %d:%d in %s, trees: %s, memory cgroup: %q",
		o.Version, agentapi.Protocol, where, o.UID, o.GID, o.Root, tracking, e.MemoryCgroup())

serving:
	for {
		select {
		case err := <-errc:
			return fmt.Errorf("serve: %w", err)
		case sig := <-hookc:
			host.handle(sig)
		case <-ctx.Done():
			break serving
		}
	}
	if host != nil {
		hs = host.hs
	}
	logger.Print("stopping")
	// The sandbox is going away: stop taking calls, end what runs, go.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if hs != nil {
		hs.Shutdown(sctx)
		hs.Close()
	}
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
		if _, err := pid1.ReapOrphans(); err != nil {
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
