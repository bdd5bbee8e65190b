// Package sandboxed is the BashExecutor that runs every session's commands in
// that session's own sandbox, through the agent inside it.
//
// It owns no processes and no sandboxes. Resolve is pure (the same
// executor.Limits rules as every executor, against the sandbox root,
// /workspace by default); Run, Start, Task and Has take the session's
// connection from Config.Connections — which makes sure the session's
// sandbox exists and is alive, and decides, when a connection breaks,
// what became of the sandbox (session/sandboxconn) — and hand the resolved
// Spec to the sandbox's agent over it. The agent runs the command as the
// sandbox user, enforces the timeout inside the sandbox (so a lost
// connection cannot leave a command running), kills whole trees, writes
// spill files into the session's host directory (mounted in the sandbox,
// so paths in markers are paths the model can read), and keeps background
// tasks: a restarted server dials the same agent and finds them.
//
// An answer of the agent (an error with a class) keeps the connection; a
// transport failure is reported to Connections.Broken, which drops it and
// removes a dead sandbox. A call or task start that never reached the
// agent (agentapi.ErrNotSent) is made once more, in the session's new
// sandbox if the old one was dead. A
// foreground call whose sandbox died of its memory limit ends as a result
// (SIGKILL, OOMKilled, executor.Result.SandboxOOM), not an error. Tasks of
// a sandbox that died are gone with it: their ids answer "no such task".
package sandboxed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
)

// Agent is what this executor needs of a connection to a sandbox's agent:
// the BashExecutor methods after Resolve. agentapi.Client implements it.
type Agent interface {
	Run(ctx context.Context, spec executor.Spec) (executor.Result, error)
	Start(ctx context.Context, spec executor.Spec) (executor.Task, error)
	Task(ctx context.Context, session, id string) (executor.Task, error)
	Has(ctx context.Context, session string, shell executor.Shell) bool
	Close() error
}

// Conn is a connection to the agent of a session's sandbox, as
// Connections hands it out.
type Conn interface {
	// Agent is the connection's agent. Its optional abilities (FileAgent,
	// the agent's log, its task list) are found on it by type assertion.
	Agent() Agent
	// Egress readies spec for the egress of the connection's sandbox: its
	// proxy's environment and, for a call holding the network permission,
	// a network grant of its own (spec.EgressGrant). release, nil without
	// a grant, ends the grant; the caller calls it once the command (or
	// background task) has ended. An error (ErrInvalid) refuses the call.
	Egress(spec executor.Spec) (_ executor.Spec, release func(), _ error)
}

// Connections owns the connections to the sessions' sandboxes, and the
// verdict on what a failure on one means. session/sandboxconn implements
// it; its methods are safe for concurrent use.
type Connections interface {
	// Conn returns the session's connection, making sure first that the
	// session has a live sandbox (creating it, or replacing a dead one).
	// Its errors are ErrInvalid (the session name) or ErrUnavailable.
	Conn(ctx context.Context, session string) (Conn, error)
	// Exists reports whether the session may have a sandbox. It creates
	// none; only a definite "no sandbox" says false.
	Exists(ctx context.Context, session string) bool
	// Broken is told that a call on c failed with err, a transport
	// failure rather than an answer of the agent. It drops c, removes the
	// sandbox if it is dead (so that the session's next Conn gets a new
	// one), and returns the call's error (ErrUnavailable), saying which.
	// It bounds its own work whatever ctx does.
	Broken(ctx context.Context, session string, c Conn, err error) error
	// DiedOfOOM reports, after a foreground call's connection broke,
	// whether the session's sandbox died of its memory limit, waiting
	// (within ctx, and a bound of its own) for the runtime to see it exit.
	DiedOfOOM(ctx context.Context, session string) (*executor.SandboxOOM, bool)
}

// Config configures an Executor. One Executor serves one tenant.
type Config struct {
	// Connections hands out the sessions' connections. Required.
	Connections Connections
	// Limits are the timeout and output defaults and caps.
	Limits executor.Limits
	// Root is the session cwd inside the sandbox (default /workspace).
	Root string
	// BaseEnv is the commands' base environment (default PATH, HOME=Root,
	// LANG=C.UTF-8). The server's own environment never reaches a sandbox.
	BaseEnv []string
}

// Executor runs commands in per-session sandboxes.
type Executor struct {
	cfg Config

	// life bounds the watchers of background tasks holding a network
	// grant; Close ends it and waits for them. closed (under mu) stops new
	// ones.
	mu     sync.Mutex
	life   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool
}

var _ executor.BashExecutor = (*Executor)(nil)

// DefaultPath is the PATH of the default base environment.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// New checks cfg and returns an Executor. It dials nothing until the first
// call of a session.
func New(cfg Config) (*Executor, error) {
	if cfg.Connections == nil {
		return nil, errors.New("sandboxed: Config.Connections is required")
	}
	if cfg.Limits == (executor.Limits{}) {
		cfg.Limits = executor.DefaultLimits()
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("sandboxed: Limits: %w", err)
	}
	if cfg.Root == "" {
		cfg.Root = "/workspace"
	}
	if cfg.BaseEnv == nil {
		cfg.BaseEnv = []string{"PATH=" + DefaultPath, "HOME=" + cfg.Root, "LANG=C.UTF-8"}
	}
	life, cancel := context.WithCancel(context.Background())
	return &Executor{cfg: cfg, life: life, cancel: cancel}, nil
}

// Resolve applies the defaults and caps; workdirs are checked lexically here
// and confined inside the sandbox when the command starts.
func (e *Executor) Resolve(ctx context.Context, req executor.Request) (executor.Spec, error) {
	return e.cfg.Limits.Resolve(ctx, req, e.cfg.Root, e.cfg.BaseEnv)
}

// Run runs spec in the session's sandbox. Cancelling ctx closes the call's
// connection; the agent then kills the command's tree.
//
// A call that could not reach the session's agent at all
// (agentapi.ErrNotSent: nothing started) is run once more, after
// Connections.Broken has judged the sandbox and replaced it if it is dead:
// the call that finds a sandbox dead runs in a new one. A call whose agent
// went away while it ran, or stopped answering, ends with Broken's error:
// whether its command started cannot be known.
func (e *Executor) Run(ctx context.Context, spec executor.Spec) (executor.Result, error) {
	res, err, again := e.run(ctx, spec)
	if again {
		res, err, _ = e.run(ctx, spec)
	}
	return res, err
}

// run is one attempt of Run; again: it reached no agent, and may be made
// again.
func (e *Executor) run(ctx context.Context, spec executor.Spec) (_ executor.Result, _ error, again bool) {
	c, err := e.cfg.Connections.Conn(ctx, spec.Session)
	if err != nil {
		if ctx.Err() != nil {
			return executor.Result{}, executor.Aborted(), false
		}
		return executor.Result{}, err, false
	}
	spec, release, err := c.Egress(spec)
	if err != nil {
		return executor.Result{}, err, false
	}
	if release != nil {
		defer release()
	}
	res, err := c.Agent().Run(ctx, spec)
	if err != nil && ctx.Err() != nil {
		return executor.Result{}, executor.Aborted(), false
	}
	if err != nil && !classified(err) {
		if errors.Is(err, agentapi.ErrNotSent) {
			return executor.Result{}, e.check(ctx, spec.Session, c, err), true
		}
		// The call ended with its sandbox: killed by SIGKILL, OOMKilled.
		// Also when its agent stopped answering: a pod killed whole on
		// Kubernetes (gVisor over its memory limit) leaves the call's
		// connection without an answer, not broken.
		// A call without an answer waited seconds already: the engine
		// has seen such a death by now, so one look, not oomWait's.
		octx := ctx
		if errors.Is(err, agentapi.ErrNoAnswer) {
			var cancel context.CancelFunc
			octx, cancel = context.WithTimeout(ctx, noAnswerLook)
			defer cancel()
		}
		if death, ok := e.cfg.Connections.DiedOfOOM(octx, spec.Session); ok {
			e.check(ctx, spec.Session, c, err)
			return executor.Result{Signal: "SIGKILL", OOMKilled: true, TimeoutMs: spec.Timeout.Milliseconds(), SandboxOOM: death}, nil, false
		}
	}
	return res, e.check(ctx, spec.Session, c, err), false
}

// noAnswerLook bounds the look for an OOM death after a call got no
// answer.
const noAnswerLook = 300 * time.Millisecond

// Start starts a background task in the session's sandbox; the task lives
// in the agent, not in this process. A start that reached no agent is made
// once more, as Run's call.
func (e *Executor) Start(ctx context.Context, spec executor.Spec) (executor.Task, error) {
	t, err, again := e.start(ctx, spec)
	if again {
		t, err, _ = e.start(ctx, spec)
	}
	return t, err
}

// start is one attempt of Start; again as run's.
func (e *Executor) start(ctx context.Context, spec executor.Spec) (_ executor.Task, _ error, again bool) {
	c, err := e.cfg.Connections.Conn(ctx, spec.Session)
	if err != nil {
		return nil, err, false
	}
	spec, release, err := c.Egress(spec)
	if err != nil {
		return nil, err, false
	}
	t, err := c.Agent().Start(ctx, spec)
	if err != nil {
		if release != nil {
			release()
		}
		return nil, e.check(ctx, spec.Session, c, err), errors.Is(err, agentapi.ErrNotSent) && ctx.Err() == nil
	}
	if release != nil {
		// A network grant lasts as long as the task (or this executor).
		if !e.spawn(func() {
			defer release()
			t.Wait(e.life)
		}) {
			release()
		}
	}
	return t, nil, false
}

// Task finds a task in the session's sandbox. The sandbox is looked up (and
// taken over, after a restart) like for any call; a session without a
// sandbox has no tasks, and asking for one creates no sandbox.
func (e *Executor) Task(ctx context.Context, session, id string) (executor.Task, error) {
	if err := executor.ValidSession(session); err != nil {
		return nil, executor.NoSuchTask(id)
	}
	if !e.cfg.Connections.Exists(ctx, session) {
		return nil, executor.NoSuchTask(id)
	}
	c, err := e.cfg.Connections.Conn(ctx, session)
	if err != nil {
		return nil, err
	}
	t, err := c.Agent().Task(ctx, session, id)
	if err != nil && errors.Is(err, agentapi.ErrNotSent) && ctx.Err() == nil {
		// The sandbox may be dead (Broken removes it then, and its tasks
		// with it): ask again, which answers "no such task" for a
		// session left without a sandbox.
		e.check(ctx, session, c, err)
		if !e.cfg.Connections.Exists(ctx, session) {
			return nil, executor.NoSuchTask(id)
		}
		if c, err = e.cfg.Connections.Conn(ctx, session); err != nil {
			return nil, err
		}
		t, err = c.Agent().Task(ctx, session, id)
	}
	return t, e.check(ctx, session, c, err)
}

// Running returns the session's running background tasks, for a server
// that re-adopted the sandbox and wants their completion notices. A session
// without a sandbox has none (and gets none).
func (e *Executor) Running(ctx context.Context, session string) ([]executor.Task, error) {
	if err := executor.ValidSession(session); err != nil {
		return nil, err
	}
	if !e.cfg.Connections.Exists(ctx, session) {
		return nil, nil
	}
	c, err := e.cfg.Connections.Conn(ctx, session)
	if err != nil {
		return nil, err
	}
	a := c.Agent()
	lister, ok := a.(interface {
		Tasks(ctx context.Context, session string) ([]agentapi.TaskInfo, error)
	})
	if !ok {
		return nil, nil
	}
	infos, err := lister.Tasks(ctx, session)
	if err != nil {
		return nil, e.check(ctx, session, c, err)
	}
	var out []executor.Task
	for _, info := range infos {
		if info.Status == nil || info.Status.State != executor.Running {
			continue
		}
		t, err := a.Task(ctx, session, info.ID)
		if err != nil {
			continue // ended meanwhile
		}
		out = append(out, t)
	}
	return out, nil
}

// Has reports whether the session's image has shell. It creates the
// session's sandbox if needed: only the image can tell.
func (e *Executor) Has(ctx context.Context, session string, shell executor.Shell) bool {
	if shell == executor.Bash {
		return true
	}
	c, err := e.cfg.Connections.Conn(ctx, session)
	if err != nil {
		return false
	}
	return c.Agent().Has(ctx, session, shell)
}

// Close ends the watchers of background tasks holding a network grant
// (which ends their grants) and waits for them. The connections are
// Connections' to close; sandboxes and their tasks stay.
func (e *Executor) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
	return nil
}

// check passes err through, reporting the connection broken when err is
// a transport failure rather than an answer of the agent.
func (e *Executor) check(ctx context.Context, session string, c Conn, err error) error {
	if err == nil || classified(err) {
		return err
	}
	return e.cfg.Connections.Broken(ctx, session, c, err)
}

// classified reports an error the agent answered with (it carries a class),
// as opposed to a broken connection.
func classified(err error) bool {
	for _, c := range []error{executor.ErrInvalid, executor.ErrNotFound, executor.ErrAborted, executor.ErrLimit} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// spawn runs fn in a goroutine Close waits for; false (fn not run) once the
// executor is closed.
func (e *Executor) spawn(fn func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		fn()
	}()
	return true
}
