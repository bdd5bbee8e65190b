package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/output"
)

// Executor runs commands as host processes. It is safe for concurrent use.
type Executor struct {
	cfg Config
	// hier is where per-command cgroups go (nil: process group only). It only
	// ever moves from v2 to fallback, when clone3 into a cgroup is refused.
	hier     atomic.Pointer[hierarchy]
	primary  *hierarchy // what hier started as, for Close to drain its pool
	fallback *hierarchy
	// space evicts the oldest finished spill files when a new one needs
	// room (output.Space).
	space *output.Space

	mu       sync.Mutex
	closed   bool
	running  map[*proc]struct{}
	tasks    map[string]*task
	finished map[string][]string // session → ids of finished tasks, oldest first
}

var _ executor.BashExecutor = (*Executor)(nil)

// AdoptSpillFiles makes the files already in SpillDir (left by an earlier
// process over the same spill space: a restarted agent) the first to be
// evicted when a new spill needs room. It returns how many there were.
func (e *Executor) AdoptSpillFiles() (int, error) {
	return e.space.Adopt(e.cfg.SpillDir)
}

// New validates cfg, fills in its defaults and finds how process trees can be
// tracked on this host (see CgroupMode). Errors name the Config field.
func New(cfg Config) (*Executor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	primary, fallback, err := detect(cfg.Cgroup, cfg.CgroupParent)
	if err != nil {
		return nil, err
	}
	e := &Executor{
		cfg:      cfg,
		primary:  primary,
		fallback: fallback,
		running:  map[*proc]struct{}{},
		tasks:    map[string]*task{},
		finished: map[string][]string{},
		space:    output.NewSpace(),
	}
	e.hier.Store(primary)
	return e, nil
}

// Running is the commands running now, foreground and background, each
// until its tree is gone (agentapi.ActivityCounter: the idle reaper's
// "busy").
func (e *Executor) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.running)
}

// Isolation describes how process trees are tracked, for logs: "cgroup2
// <dir>", "cgroup1 <controller> <dir>" or "process group".
func (e *Executor) Isolation() string {
	if h := e.hier.Load(); h != nil {
		return h.String()
	}
	return "process group"
}

// CgroupParents returns the directories (Config.CgroupParent in each
// hierarchy: the one New found, its fallback, the one in use) below which e
// makes its commands' cgroups; none without cgroups. After Close they hold
// no cgroup of e's, which is what tests check (executor/local/localtest).
func (e *Executor) CgroupParents() []string {
	var out []string
	for _, h := range []*hierarchy{e.primary, e.fallback, e.hier.Load()} {
		if h != nil && !slices.Contains(out, h.parent) {
			out = append(out, h.parent)
		}
	}
	return out
}

// Resolve applies the executor's limits, Root and BaseEnv to req.
func (e *Executor) Resolve(ctx context.Context, req executor.Request) (executor.Spec, error) {
	return e.cfg.Limits.Resolve(ctx, req, e.cfg.Root, e.cfg.BaseEnv)
}

// Has reports whether shell's interpreter is on the commands' PATH.
func (e *Executor) Has(_ context.Context, _ string, shell executor.Shell) bool {
	_, err := lookPath(shell.Argv("")[0], e.cfg.BaseEnv)
	return err == nil
}

// Run runs spec in the foreground. ctx belongs to the caller: cancelling it
// ends the command's whole tree (SIGTERM, grace, SIGKILL) and Run returns
// executor.Aborted() once the tree is gone.
func (e *Executor) Run(ctx context.Context, spec executor.Spec) (executor.Result, error) {
	if spec.Background {
		return executor.Result{}, executor.Errorf(executor.ErrInvalid, "a background spec is started with Start, not Run")
	}
	if err := checkSpec(spec); err != nil {
		return executor.Result{}, err
	}
	if ctx.Err() != nil {
		return executor.Result{}, executor.Aborted()
	}
	id := newID()
	p, err := e.spawn(spec, id, newOutputs(spec, e.space, e.cfg.SpillDir, id, false), spec.Timeout, nil)
	if err != nil {
		return executor.Result{}, err
	}
	select {
	case <-p.done:
		return p.result(), nil
	case <-ctx.Done():
		if p.kill() {
			// It ended on its own as the caller gave up: that is its result.
			return p.result(), nil
		}
		<-p.done
		return executor.Result{}, executor.Aborted()
	}
}

// Start starts spec as a background task. ctx bounds the start only: the task
// belongs to the Executor, runs without a timeout, and ends when its command
// does, when it is killed, or at Close.
func (e *Executor) Start(ctx context.Context, spec executor.Spec) (executor.Task, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	if spec.BufferBytes <= 0 {
		return nil, executor.Errorf(executor.ErrInvalid, "invalid spec: bufferBytes must be positive, got %d", spec.BufferBytes)
	}
	if ctx.Err() != nil {
		return nil, executor.Aborted()
	}
	id := newID()
	t := &task{id: id, session: spec.Session, out: newOutputs(spec, e.space, e.cfg.SpillDir, id, true)}
	if _, err := e.spawn(spec, id, t.out, 0, t); err != nil {
		return nil, err
	}
	return t, nil
}

// Task finds a task of session by id; another session's task is as unknown
// as an id never issued.
func (e *Executor) Task(_ context.Context, session, id string) (executor.Task, error) {
	e.mu.Lock()
	t, ok := e.tasks[id]
	e.mu.Unlock()
	if !ok || t.session != session {
		return nil, executor.NoSuchTask(id)
	}
	return t, nil
}

// Close kills every running command, foreground and background, removes
// their cgroups and the idle ones kept for reuse, and refuses new commands.
// It waits for the trees to be gone until ctx is done; the kills finish
// regardless, and the cgroups of commands still being killed are removed
// when they are gone.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	procs := make([]*proc, 0, len(e.running))
	for p := range e.running {
		procs = append(procs, p)
	}
	e.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	var err error
wait:
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			err = fmt.Errorf("local: close: %d commands still being killed: %w", len(procs), ctx.Err())
			break wait
		}
	}
	// Closed pools remove what is released to them from now on.
	var errs []error
	for _, h := range []*hierarchy{e.primary, e.fallback, e.hier.Load()} {
		if h != nil {
			if err := h.pool.drain(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(err, fmt.Errorf("local: close: remove idle cgroups: %w", errors.Join(errs...)))
	}
	return err
}

// checkSpec rejects a spec that cannot be run as given.
func checkSpec(s executor.Spec) error {
	if err := executor.ValidSession(s.Session); err != nil {
		return err
	}
	switch {
	case s.Shell != "" && s.Shell != executor.Bash && s.Shell != executor.Pwsh:
		return executor.Errorf(executor.ErrInvalid, "unknown shell %q", s.Shell)
	case !filepath.IsAbs(s.Root) || filepath.Clean(s.Root) != s.Root:
		return executor.Errorf(executor.ErrInvalid, "invalid spec: root must be a clean absolute path, got %q", s.Root)
	case !filepath.IsAbs(s.Workdir) || filepath.Clean(s.Workdir) != s.Workdir:
		return executor.Errorf(executor.ErrInvalid, "invalid spec: workdir must be a clean absolute path, got %q", s.Workdir)
	case s.TailBytes <= 0:
		return executor.Errorf(executor.ErrInvalid, "invalid spec: tailBytes must be positive, got %d", s.TailBytes)
	case s.Timeout < 0 || s.Grace < 0 || s.SpillLimit < 0:
		return executor.Errorf(executor.ErrInvalid, "invalid spec: negative timeout, grace or spillLimit")
	}
	return nil
}

// spawn starts spec and its supervisor. t is the background task the command
// belongs to, nil for a foreground call.
func (e *Executor) spawn(spec executor.Spec, id string, out *outputs, timeout time.Duration, t *task) (*proc, error) {
	argv := spec.Shell.Argv(spec.Command)
	path, err := lookPath(argv[0], spec.Env)
	if err != nil {
		return nil, err
	}
	wd, err := openWorkdir(spec.Root, spec.Workdir)
	if err != nil {
		return nil, err
	}
	defer wd.Close()

	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, executor.Errorf(executor.ErrUnavailable, "executor is closed")
	}

	var pipes, ends []*os.File
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(pipes, ends)
			return nil, executor.Errorf(executor.ErrUnavailable, "start %s: %w", argv[0], err)
		}
		pipes, ends = append(pipes, r), append(ends, w)
	}
	p := &proc{
		id:      id,
		grace:   spec.Grace,
		timeout: timeout,
		out:     out,
		pipes:   pipes,
		eof:     make(chan struct{}, len(pipes)),
		exited:  make(chan struct{}),
		killCh:  make(chan struct{}),
		done:    make(chan struct{}),
		logf:    e.cfg.Logf,
		// Sampled before the first fork (PID1.WatchOOM).
		oomVerdict: e.watchOOM(),
	}
	newCmd := func() *exec.Cmd {
		c := &exec.Cmd{
			Path:   path,
			Args:   argv,
			Env:    withPWD(spec.Env, wd.real),
			Dir:    wd.procPath(),
			Stdout: ends[0],
			Stderr: ends[1],
		}
		if shim := e.cfg.ExecShim; shim != nil {
			c.Path = "/proc/self/fd/3"
			c.Args = append([]string{filepath.Base(shim.Name()), path}, argv...)
			c.ExtraFiles = []*os.File{shim}
		}
		return c
	}
	h := e.hier.Load()
	err = e.launchRetrying(p, newCmd, h)
	if err != nil && h != nil && h.v2 && e.cfg.Cgroup == CgroupAuto && !errors.Is(err, syscall.EAGAIN) {
		// clone3 into a cgroup can be refused where mkdir was not (gVisor,
		// seccomp, a cgroup namespace). If the command starts without it, that
		// was the reason: fall back for good.
		if err2 := e.launch(p, newCmd(), e.fallback); err2 == nil {
			e.hier.CompareAndSwap(h, e.fallback)
			err = nil
		}
	}
	var notes *noteWriter
	if err == nil && e.cfg.ExecGuard != nil {
		// The exec guard's refusals go into the call's stderr through a
		// write end of its own, kept until the leader exits. Without one
		// (no fd left) they are only in the guard's log.
		notes, _ = newNoteWriter(ends[1])
	}
	closeAll(ends)
	if err != nil {
		closeAll(pipes)
		return nil, executor.Errorf(executor.ErrUnavailable, "start %s: %w", argv[0], err)
	}
	if g := e.cfg.ExecGuard; g != nil {
		// Before waitLeader: the pid cannot have been reused yet.
		release := g.Watch(p.pid, argv, spec.ExecRules, notes.write)
		go func() {
			<-p.exited
			release()
			notes.close()
		}()
	}

	var live executor.Live
	if t == nil {
		// Background tasks are read with bash_output, not streamed.
		live = spec.Live
	}
	go p.pump(pipes[0], sink{out.outTail, out.outRing, out.spill, live, executor.Stdout})
	go p.pump(pipes[1], sink{out.errTail, out.errRing, out.spill, live, executor.Stderr})
	go p.waitLeader()

	var oomErr error
	if e.cfg.OOMScoreAdj != 0 && !e.inheritsOOMScore() {
		err := os.WriteFile("/proc/"+strconv.Itoa(p.pid)+"/oom_score_adj", []byte(strconv.Itoa(e.cfg.OOMScoreAdj)), 0)
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			oomErr = executor.Errorf(executor.ErrUnavailable, "set oom_score_adj of %s: %w", argv[0], err)
			p.kill()
		}
	}

	e.mu.Lock()
	p.grantTree(spec.EgressGrant)
	e.running[p] = struct{}{}
	if t != nil && oomErr == nil {
		t.p = p
		e.tasks[id] = t
	}
	if e.closed {
		// Close ran after the check above and did not see this command.
		p.kill()
	}
	e.mu.Unlock()
	p.treeGone = func() { e.forgetGrant(p) }
	p.beforeFinish = func() { e.afterExit(p) }
	p.onDone = func() { e.retire(p, t) }
	go p.supervise()
	if oomErr != nil {
		<-p.done
		return nil, oomErr
	}
	return p, nil
}

// launch starts c as p's leader, in its own process group and, with h, its
// own cgroup.
func (e *Executor) launch(p *proc, c *exec.Cmd, h *hierarchy) error {
	// Held from before the fork until the leader is registered, so that
	// no reaper can take its zombie (leaders.go).
	starting.RLock()
	defer starting.RUnlock()
	attr := &syscall.SysProcAttr{Setpgid: true, Credential: e.cfg.Credential}
	var tag uint32
	if h == nil {
		// No cgroup: the tree is tracked by a supplementary group, if
		// Config.PID1 hands one out (tagtree.go).
		var err error
		if tag, err = e.tag(); err != nil {
			return err
		}
		if tag != 0 {
			attr.Credential = withTag(e.cfg.Credential, tag)
		}
	}
	var cg *cgroup
	if h != nil {
		var err error
		if cg, err = h.get(); err != nil {
			return err
		}
		if h.v2 {
			// CLONE_INTO_CGROUP: the child is born in the cgroup; there is no
			// moment at which it or anything it forks is outside it.
			attr.UseCgroupFD = true
			attr.CgroupFD = cg.dir
		}
	}
	c.SysProcAttr = attr
	var err error
	bornInside := cg != nil
	if cg != nil && !h.v2 {
		var started bool
		err = e.fork(func() (err error) {
			started, err = cg.startInside(c)
			return err
		})
		if errors.Is(err, errNoThreadHome) {
			bornInside = false
			// The thread's own cgroup is not visible under the mount: move
			// the leader after it started, racing bash's ~1 ms start-up
			// (see the package doc for what that can let escape).
			if err = e.fork(c.Start); err != nil && c.Process != nil {
				started = true
			} else if err == nil {
				if err = cg.add(c.Process.Pid); err != nil {
					err = fmt.Errorf("move into %s: %w", cg.path, err)
					started = true
				}
			}
		}
		if err != nil && started {
			unix.Kill(-c.Process.Pid, unix.SIGKILL)
			unix.Kill(c.Process.Pid, unix.SIGKILL)
			c.Wait()
		}
	} else {
		if err = e.fork(c.Start); err != nil && c.Process != nil {
			// Started, but the OOM score could not be restored.
			killStarted(c.Process.Pid)
			c.Wait()
		}
	}
	if err != nil {
		if cg != nil {
			// Whatever started in it was killed, but not through the cgroup:
			// its state is not known, so it is not reused.
			cg.remove()
		}
		if tag != 0 {
			e.cfg.PID1.Untag(tag)
		}
		return err
	}
	pid := c.Process.Pid
	registerLeader(pid)
	p.tag = tag
	p.cmd, p.pid, p.cg, p.bornInside = c, pid, cg, bornInside
	return nil
}

// retire forgets a finished command; a finished background task stays
// readable until its session has more than MaxFinishedTasks finished ones.
func (e *Executor) retire(p *proc, t *task) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.running, p)
	if t == nil || e.tasks[t.id] != t {
		return
	}
	ids := append(e.finished[t.session], t.id)
	for len(ids) > e.cfg.MaxFinishedTasks {
		delete(e.tasks, ids[0])
		ids = ids[1:]
	}
	e.finished[t.session] = ids
}

func closeAll(fss ...[]*os.File) {
	for _, fs := range fss {
		for _, f := range fs {
			f.Close()
		}
	}
}
