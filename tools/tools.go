package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/shellbox/shellbox/executor"
)

// Config configures a Toolset.
type Config struct {
	// DisableRunInBackground removes run_in_background from the schemas and
	// rejects calls that force it (config key enableRunInBackground: false).
	DisableRunInBackground bool
	// Home is DSH_HOME: the home directory as the command sees it.
	Home string
	// Facts are extra DSH_* variables every call gets. Keys must start with
	// "DSH_" and may not replace DSH_SHELL, DSH_SESSION_ID or DSH_HOME.
	Facts map[string]string
	// Gate is the permissions seam: it sees every bash and pwsh call before it
	// runs, and may deny it or adjust the request. Nil allows everything.
	Gate Gate
	// OnNotice, if set, is called (from the task's watcher goroutine) with
	// each background completion notice, for event streams. It must not block.
	OnNotice func(session string, n Notice)
	// OnReported, if set, is called once per task when this Toolset reports
	// its end to the model (a notice in a result, bash_output's final
	// status, bash_kill), so other replicas drop their copy of its notice
	// (Forget). It must not block.
	OnReported func(session, taskID string)
	// MaxNotices bounds the pending notices per session (default 64); the
	// oldest are dropped first.
	MaxNotices int
}

// Call is one shell call as the permissions Gate sees it.
type Call struct {
	Tenant        string
	Session       string
	Tool          string
	Description   string
	Justification string
	Request       executor.Request
	// RunningTasks is how many background tasks of the session this
	// Toolset started that are still running (for a per-session quota).
	// Tasks it did not start (a previous server process's) are not counted.
	RunningTasks int
}

// Gate decides on a call before it runs. It returns the request to run (it may
// add plain environment variables, permissions granted, or a lower timeout),
// or an error whose text is the model-facing denial, e.g.
// "denied by policy acme/no-rm: deleting files is not allowed".
type Gate interface {
	Check(ctx context.Context, c Call) (executor.Request, error)
}

// Notice is a background completion notice.
type Notice struct {
	TaskID string          `json:"taskId"`
	Status executor.Status `json:"status"`
	Text   string          `json:"text"`
	// SpillBytes is the size of the task's spill file (its Wait's
	// executor.Result.SpillBytes), for usage metering; never rendered.
	SpillBytes int64 `json:"spillBytes,omitempty"`
}

// Result is a tool call's outcome: the text the model reads and the same
// facts typed.
type Result struct {
	Text    string `json:"text"`
	IsError bool   `json:"isError"`
	// Value is one of *Foreground, *Background, *TaskOutput, *TaskKill or
	// *ErrorValue.
	Value any `json:"result"`
	// Notices are the session's background completion notices that arrived
	// since its previous call: context for the model, apart from Text.
	Notices []Notice `json:"notices,omitempty"`
}

// Foreground is the typed result of a finished foreground call.
type Foreground struct {
	Kind string `json:"kind"` // "foreground"
	executor.Result
}

// Background is the typed result of a started background task.
type Background struct {
	Kind   string `json:"kind"` // "background"
	TaskID string `json:"taskId"`
}

// TaskOutput is the typed result of bash_output.
type TaskOutput struct {
	Kind   string `json:"kind"` // "output"
	TaskID string `json:"taskId"`
	executor.Output
}

// TaskKill is the typed result of bash_kill.
type TaskKill struct {
	Kind        string          `json:"kind"` // "kill"
	TaskID      string          `json:"taskId"`
	AlreadyDone bool            `json:"alreadyDone"`
	Status      executor.Status `json:"status"`
	// SpillBytes is executor.KillResult.SpillBytes; never rendered.
	SpillBytes int64 `json:"spillBytes,omitempty"`
}

// ErrorValue is the typed result of a failed call.
type ErrorValue struct {
	Kind    string `json:"kind"` // "error"
	Message string `json:"message"`
}

// Toolset serves the tools over one executor. It is safe for concurrent use.
type Toolset struct {
	exec executor.BashExecutor
	cfg  Config

	// life bounds the task watchers; Close cancels it.
	life   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	notices map[string][]Notice // session → pending, oldest first
	// watching holds the tasks whose watcher has not finished; seen, a subset
	// of it, those whose end the model saw before their watcher queued it.
	watching map[string]bool
	seen     map[string]bool
	// reported are the tasks whose end the model saw here (bash_output,
	// bash_kill), the newest maxReported, so a notice of one that another
	// replica delivers is dropped.
	reported *RecentKeys
}

// Bounds of what a Toolset keeps for notices delivered by other replicas.
const (
	maxReported       = 4096
	maxNoticeSessions = 4096
)

// New returns a Toolset over exec.
func New(exec executor.BashExecutor, cfg Config) (*Toolset, error) {
	for k := range cfg.Facts {
		if !strings.HasPrefix(k, "DSH_") {
			return nil, fmt.Errorf("tools: fact %q: keys must start with DSH_", k)
		}
		switch k {
		case "DSH_SHELL", "DSH_SESSION_ID", "DSH_HOME":
			return nil, fmt.Errorf("tools: fact %q: managed by shellbox and cannot be configured", k)
		}
	}
	if cfg.MaxNotices <= 0 {
		cfg.MaxNotices = 64
	}
	life, cancel := context.WithCancel(context.Background())
	return &Toolset{exec: exec, cfg: cfg, life: life, cancel: cancel,
		notices: map[string][]Notice{}, watching: map[string]bool{}, seen: map[string]bool{},
		reported: NewRecentKeys(maxReported)}, nil
}

// Close stops watching background tasks (it does not kill them: tasks belong
// to the executor) and waits for the watchers to return.
func (t *Toolset) Close() {
	t.cancel()
	t.wg.Wait()
}

// Definitions lists the tools offered to session: pwsh only where the
// executor has it.
func (t *Toolset) Definitions(ctx context.Context, session string) []Definition {
	return t.definitions(t.exec.Has(ctx, session, executor.Pwsh))
}

// AllDefinitions lists every tool regardless of the session image, for
// documentation and `shellbox tools --schema`.
func (t *Toolset) AllDefinitions() []Definition { return t.definitions(true) }

func (t *Toolset) definitions(pwsh bool) []Definition {
	bg := !t.cfg.DisableRunInBackground
	defs := []Definition{{Name: ToolBash, Description: shellDescription(ToolBash, bg), InputSchema: shellSchema(true, bg)}}
	if bg {
		defs = append(defs,
			Definition{Name: ToolBashOutput, Description: bashOutputDescription, InputSchema: taskSchema()},
			Definition{Name: ToolBashKill, Description: bashKillDescription, InputSchema: taskSchema()},
		)
	}
	if pwsh {
		defs = append(defs, Definition{Name: ToolPwsh, Description: shellDescription(ToolPwsh, bg), InputSchema: shellSchema(false, bg)})
	}
	return defs
}

// Invocation names who calls which tool with what.
type Invocation struct {
	Tenant  string
	Session string
	Tool    string
	Args    json.RawMessage
	// Live, if set, receives the output of a foreground bash or pwsh call
	// as it arrives (executor.Spec.Live: it must not block). The result is
	// the same with or without it. A background start, bash_output and
	// bash_kill never call it: a task's output is read with bash_output.
	Live executor.Live
}

// Call runs one tool call. It never returns a Go error: every failure is a
// Result with IsError and the "Error: <message>" text. ctx belongs to the
// caller; cancelling it aborts a foreground command (killing its tree) but
// not a background task.
func (t *Toolset) Call(ctx context.Context, inv Invocation) Result {
	var r Result
	switch inv.Tool {
	case ToolBash, ToolPwsh:
		r = t.shell(ctx, inv)
	case ToolBashOutput:
		r = t.output(ctx, inv)
	case ToolBashKill:
		r = t.kill(ctx, inv)
	default:
		r = errorResult(fmt.Sprintf("unknown tool: %s", clip(inv.Tool)))
	}
	// A task that ended before its own start was answered keeps its notice
	// for the session's next result: the model has not seen its id yet.
	keep := ""
	if bg, ok := r.Value.(*Background); ok {
		keep = bg.TaskID
	}
	r.Notices = t.drain(inv.Session, keep)
	return r
}

func (t *Toolset) shell(ctx context.Context, inv Invocation) Result {
	bg := !t.cfg.DisableRunInBackground
	sandbox := inv.Tool == ToolBash
	a, err := parseShellArgs(inv.Args, sandbox, bg)
	if err != nil {
		return errorOf(err)
	}
	shell := executor.Bash
	if inv.Tool == ToolPwsh {
		shell = executor.Pwsh
		if !t.exec.Has(ctx, inv.Session, executor.Pwsh) {
			return errorResult("pwsh is not available in this session's image")
		}
	}
	req := executor.Request{
		Session:     inv.Session,
		Shell:       shell,
		Command:     a.Command,
		Workdir:     a.Workdir,
		Timeout:     a.Timeout,
		Background:  a.Background,
		Env:         map[string]string{},
		Permissions: a.Permissions,
	}
	if t.cfg.Gate != nil {
		req, err = t.cfg.Gate.Check(ctx, Call{Tenant: inv.Tenant, Session: inv.Session, Tool: inv.Tool,
			Description: a.Description, Justification: a.Justification, Request: req, RunningTasks: t.running(inv.Session)})
		if err != nil {
			return errorOf(err)
		}
	}
	// The managed variables are applied last: a policy may add plain
	// variables but never replace DSH_*.
	req.Env = t.managedEnv(inv.Session, req.Env)
	spec, err := t.exec.Resolve(ctx, req)
	if err != nil {
		return errorOf(err)
	}
	if spec.Background {
		task, err := t.exec.Start(ctx, spec)
		if err != nil {
			return errorOf(err)
		}
		t.watch(inv.Session, task)
		return Result{Text: RenderBackground(task.ID()), Value: &Background{Kind: "background", TaskID: task.ID()}}
	}
	spec.Live = inv.Live
	res, err := t.exec.Run(ctx, spec)
	if err != nil {
		return errorOf(err)
	}
	res = withSandboxOOM(res)
	return Result{Text: RenderForeground(res), Value: &Foreground{Kind: "foreground", Result: res}}
}

// task finds the background task that a task tool (output, kill) names;
// when there is none to act on, fail is the tool's result.
func (t *Toolset) task(ctx context.Context, inv Invocation) (id string, task executor.Task, fail *Result) {
	if t.cfg.DisableRunInBackground {
		r := errorResult("unknown tool: " + inv.Tool)
		return "", nil, &r
	}
	id, err := parseTaskID(inv.Args)
	if err != nil {
		r := errorOf(err)
		return "", nil, &r
	}
	task, err = t.exec.Task(ctx, inv.Session, id)
	if err != nil {
		r := errorOf(err)
		return "", nil, &r
	}
	return id, task, nil
}

func (t *Toolset) output(ctx context.Context, inv Invocation) Result {
	id, task, fail := t.task(ctx, inv)
	if fail != nil {
		return *fail
	}
	o, err := task.Read(ctx)
	if err != nil {
		return errorOf(err)
	}
	if o.Status.State != executor.Running {
		t.saw(inv.Session, id)
	}
	return Result{Text: RenderOutput(o), Value: &TaskOutput{Kind: "output", TaskID: id, Output: o}}
}

func (t *Toolset) kill(ctx context.Context, inv Invocation) Result {
	id, task, fail := t.task(ctx, inv)
	if fail != nil {
		return *fail
	}
	k, err := task.Kill(ctx)
	if err != nil {
		return errorOf(err)
	}
	t.saw(inv.Session, id)
	return Result{Text: RenderKill(id, k), Value: &TaskKill{Kind: "kill", TaskID: id, AlreadyDone: k.AlreadyDone, Status: k.Status, SpillBytes: k.SpillBytes}}
}

// managedEnv returns extra with the DSH_* contract laid over it.
func (t *Toolset) managedEnv(session string, extra map[string]string) map[string]string {
	env := make(map[string]string, len(extra)+len(t.cfg.Facts)+3)
	for k, v := range extra {
		if !strings.HasPrefix(k, "DSH_") {
			env[k] = v
		}
	}
	for k, v := range t.cfg.Facts {
		env[k] = v
	}
	env["DSH_SHELL"] = "1"
	env["DSH_SESSION_ID"] = session
	if t.cfg.Home != "" {
		env["DSH_HOME"] = t.cfg.Home
	}
	return env
}

// ManagedEnv is the DSH_* environment a call of session gets, for
// documentation and tests.
func (t *Toolset) ManagedEnv(session string) map[string]string { return t.managedEnv(session, nil) }

// Watch queues a completion notice for a running task this Toolset did not
// start: one a previous server process started, found in a re-adopted
// sandbox. A task already watched is left alone.
func (t *Toolset) Watch(session string, task executor.Task) {
	t.watch(session, task)
}

// watch queues a notice when task ends. The watcher lives as long as the
// Toolset, not the call that started the task.
func (t *Toolset) watch(session string, task executor.Task) {
	key := session + "\x00" + task.ID()
	t.mu.Lock()
	if t.watching[key] {
		t.mu.Unlock()
		return
	}
	t.watching[key] = true
	t.mu.Unlock()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		res, err := task.Wait(t.life)
		t.mu.Lock()
		seen := t.seen[key]
		delete(t.watching, key)
		delete(t.seen, key)
		if err != nil || seen {
			// Closing, the executor lost the task, or the model already saw
			// its end through bash_output or bash_kill.
			t.mu.Unlock()
			return
		}
		st := statusOf(res)
		n := Notice{TaskID: task.ID(), Status: st, Text: RenderNotice(task.ID(), st), SpillBytes: res.SpillBytes}
		t.queue(session, n)
		t.mu.Unlock()
		if t.cfg.OnNotice != nil {
			t.cfg.OnNotice(session, n)
		}
	}()
}

// Watched returns the sessions with a task this Toolset watches (one it
// started or was handed, not ended yet), in no order.
func (t *Toolset) Watched() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for key := range t.watching {
		session, _, _ := strings.Cut(key, "\x00")
		if !seen[session] {
			seen[session] = true
			out = append(out, session)
		}
	}
	return out
}

// running counts the session's watched tasks: started here, not ended.
func (t *Toolset) running(session string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	prefix := session + "\x00"
	for key := range t.watching {
		if strings.HasPrefix(key, prefix) {
			n++
		}
	}
	return n
}

// queue adds n to session's pending notices, unless one of its task is
// pending already (another replica's copy came first). t.mu is held.
func (t *Toolset) queue(session string, n Notice) {
	q := t.notices[session]
	for _, p := range q {
		if p.TaskID == n.TaskID {
			return
		}
	}
	q = append(q, n)
	if len(q) > t.cfg.MaxNotices {
		q = q[len(q)-t.cfg.MaxNotices:]
	}
	t.notices[session] = q
}

// Deliver queues, for the session's next tool result, the completion notice
// of a task another process watched (a replica of the same release, whose
// event reached this one). It is dropped when this Toolset is watching the
// task itself (its own notice follows), has one of it pending, or reported
// its end already (bash_output, bash_kill here). At most maxNoticeSessions
// sessions have notices pending: past that, a delivered notice of another
// session is dropped (the model still reads the end with bash_output).
func (t *Toolset) Deliver(session string, n Notice) {
	if n.TaskID == "" {
		return
	}
	key := session + "\x00" + n.TaskID
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.watching[key] || t.reported.Has(key) {
		return
	}
	if _, ok := t.notices[session]; !ok && len(t.notices) >= maxNoticeSessions {
		return
	}
	t.queue(session, n)
}

// saw records that the model has seen task's end, so its notice is not
// repeated, here or (OnReported) on another replica.
func (t *Toolset) saw(session, id string) {
	if t.forget(session, id) && t.cfg.OnReported != nil {
		t.cfg.OnReported(session, id)
	}
}

// Forget drops the notice of a task whose end the model saw through
// another replica (its OnReported), pending here or still to come from
// this Toolset's watcher.
func (t *Toolset) Forget(session, id string) {
	if id != "" {
		t.forget(session, id)
	}
}

// forget records that task's end was reported and drops its notice; it
// reports whether that is news.
func (t *Toolset) forget(session, id string) (first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := session + "\x00" + id
	first = t.reported.Add(key)
	q := t.notices[session]
	for i, n := range q {
		if n.TaskID == id {
			t.notices[session] = append(q[:i:i], q[i+1:]...)
			if len(t.notices[session]) == 0 {
				delete(t.notices, session)
			}
			return
		}
	}
	// The watcher has not queued it yet: tell it not to.
	if t.watching[key] {
		t.seen[key] = true
	}
	return
}

// drain returns and forgets session's pending notices, but for the one of
// task keep (if queued), which stays pending.
func (t *Toolset) drain(session, keep string) []Notice {
	t.mu.Lock()
	q := t.notices[session]
	delete(t.notices, session)
	out := q[:0:0]
	var news []string
	for _, n := range q {
		if n.TaskID == keep {
			t.notices[session] = []Notice{n}
			continue
		}
		// Reported now: a copy another replica delivers later is dropped.
		if t.reported.Add(session + "\x00" + n.TaskID) {
			news = append(news, n.TaskID)
		}
		out = append(out, n)
	}
	t.mu.Unlock()
	if t.cfg.OnReported != nil {
		for _, id := range news {
			t.cfg.OnReported(session, id)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// statusOf is the task status a final Result implies.
func statusOf(r executor.Result) executor.Status {
	if r.Signal != "" {
		return executor.Status{State: executor.Killed, Signal: r.Signal}
	}
	return executor.Status{State: executor.Completed, ExitCode: r.ExitCode}
}

func errorResult(msg string) Result {
	return Result{Text: RenderError(msg), IsError: true, Value: &ErrorValue{Kind: "error", Message: msg}}
}

// errorOf normalises any error into the model-facing form. Messages of
// executor errors and argument errors are already the contract's text;
// anything else is an infrastructure failure and keeps its (wrapped) text.
func errorOf(err error) Result {
	msg := err.Error()
	if errors.Is(err, executor.ErrAborted) {
		msg = "tool call aborted"
	}
	if msg == "" {
		msg = "unknown failure"
	}
	return errorResult(msg)
}
