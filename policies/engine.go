package policies

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/internal/clip"
	"github.com/shellbox/shellbox/tools"
)

// ErrNoPolicy: the tenant has no usable policy (no file and no default.yaml,
// or a file that never loaded).
var ErrNoPolicy = errors.New("no policy")

// ErrDenied: the policy denied the call. Errors returned by Check wrap it.
var ErrDenied = errors.New("denied by policy")

// DeniedError is a denial; its text is the model-facing message.
type DeniedError struct {
	Tenant, Rule, Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("denied by policy %s/%s: %s", e.Tenant, e.Rule, e.Reason)
}

func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// DefaultTenant is the tenant whose policy applies to tenants without a file.
const DefaultTenant = "default"

// Options configure an Engine.
type Options struct {
	// Logger receives reloads, rejected edits and audit failures. Nil
	// discards.
	Logger *slog.Logger
	// Audit, if set, receives every decision.
	Audit *Audit
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
	// NoWatch turns off hot reload (one-shot use); Reload still works.
	NoWatch bool
	// NoApprover denies every ask at once: nobody could answer it (the
	// one-shot CLI).
	NoApprover bool
	// MaxPending bounds the pending approvals per tenant (default 64); an
	// ask beyond it is denied. MaxHistory bounds the decided approvals kept
	// per tenant (default 256). They configure the default store; a store
	// given as Approvals has bounds of its own.
	MaxPending, MaxHistory int
	// Approvals holds the asks; nil is NewMemoryApprovals(MaxPending,
	// MaxHistory), this process's memory. The Engine does not close it.
	Approvals ApprovalStore
	// Debounce is the quiet time after a change in the directory before it
	// is reloaded (default 100ms): editors write in several steps.
	Debounce time.Duration
}

// Engine holds the policies of every tenant of one directory, decides calls
// (it is a tools.Gate), holds asks for approval, and audits. It is safe for
// concurrent use.
type Engine struct {
	dir  string
	opts Options
	log  *slog.Logger
	now  func() time.Time
	ap   ApprovalStore

	mu      sync.RWMutex
	tenants map[string]*tenantState

	reloadMu sync.Mutex // one reload at a time
	watcher  *fsnotify.Watcher
	stop     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

// tenantState is one file's state: the policy in force (the last good one)
// and, if the file's current content is bad, why.
type tenantState struct {
	file string
	good *Policy
	err  error
	sum  [32]byte // of the content last read, to skip unchanged files
}

var _ tools.Gate = (*Engine)(nil)

// Open loads every <tenant>.yaml of dir and, unless opts.NoWatch, watches
// dir and reloads what changes. A file that does not load is logged and
// reported by Ready; its tenant has no policy until it loads. Open fails
// only when dir cannot be read.
func Open(dir string, opts Options) (*Engine, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 64
	}
	if opts.MaxHistory <= 0 {
		opts.MaxHistory = 256
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.Approvals == nil {
		opts.Approvals = NewMemoryApprovals(opts.MaxPending, opts.MaxHistory)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	e := &Engine{dir: abs, opts: opts, log: opts.Logger, now: opts.Now,
		ap: opts.Approvals, tenants: map[string]*tenantState{}, stop: make(chan struct{})}
	if err := e.Reload(); err != nil {
		return nil, err
	}
	if !opts.NoWatch {
		if err := e.watch(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Dir is the policies directory.
func (e *Engine) Dir() string { return e.dir }

// Reload rereads the directory: changed files are loaded, a file that no
// longer loads keeps its last good policy in force (and is logged and
// reported by Ready), a removed file removes its tenant's policy.
func (e *Engine) Reload() error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	files, err := policyFiles(e.dir)
	if err != nil {
		e.log.Error("policies: cannot read the directory; keeping every policy in force", "dir", e.dir, "err", err)
		return err
	}
	e.mu.RLock()
	old := e.tenants
	e.mu.RUnlock()
	next := make(map[string]*tenantState, len(files))
	for _, f := range files {
		tenant := TenantOf(f)
		prev := old[tenant]
		src, rerr := readPolicy(f)
		sum := sha256.Sum256(src)
		if rerr == nil && prev != nil && prev.sum == sum {
			next[tenant] = prev
			continue
		}
		st := &tenantState{file: f, sum: sum}
		if prev != nil {
			st.good = prev.good
		}
		var p *Policy
		if rerr == nil {
			p, rerr = Parse(f, src)
		}
		if rerr != nil {
			st.err = rerr
			if st.good != nil {
				e.log.Error("policies: edit rejected; the last good policy stays in force", "tenant", tenant, "file", f, "err", rerr)
			} else {
				e.log.Error("policies: policy does not load; the tenant has no policy", "tenant", tenant, "file", f, "err", rerr)
			}
		} else {
			st.good = p
			e.log.Info("policies: policy loaded", "tenant", tenant, "file", f, "rules", len(p.rules))
		}
		next[tenant] = st
	}
	for t := range old {
		if next[t] == nil {
			e.log.Info("policies: policy removed", "tenant", t)
		}
	}
	e.mu.Lock()
	e.tenants = next
	e.mu.Unlock()
	return nil
}

func readPolicy(file string) ([]byte, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, &LoadError{File: file, Problems: []Problem{{File: file, Msg: err.Error()}}}
	}
	if len(src) > maxFileBytes {
		return nil, &LoadError{File: file, Problems: []Problem{{File: file, Msg: fmt.Sprintf("larger than %d bytes", maxFileBytes)}}}
	}
	return src, nil
}

// watch reloads the directory after changes settle. The directory is
// watched, not the files: editors and Kubernetes ConfigMaps replace files
// by rename.
func (e *Engine) watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("policies: watch: %w", err)
	}
	if err := w.Add(e.dir); err != nil {
		w.Close()
		return fmt.Errorf("policies: watch %s: %w", e.dir, err)
	}
	e.watcher = w
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-e.stop:
				if timer != nil {
					timer.Stop()
				}
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				if timer == nil {
					timer = time.NewTimer(e.opts.Debounce)
				} else {
					timer.Reset(e.opts.Debounce)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				// Overflow: events were lost; a full reload catches up.
				e.log.Warn("policies: watch error; reloading everything", "err", err)
				_ = e.Reload()
			case <-fire:
				fire = nil
				_ = e.Reload()
			}
		}
	}()
	return nil
}

// Close stops watching. Pending asks are not touched: their callers'
// contexts and timeouts end them.
func (e *Engine) Close() error {
	var err error
	e.once.Do(func() {
		close(e.stop)
		if e.watcher != nil {
			err = e.watcher.Close()
		}
		e.wg.Wait()
	})
	return err
}

// Ready is nil when every tenant file has its current content loaded, else
// it joins the problems of those that do not.
func (e *Engine) Ready() error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var errs []error
	for _, t := range slices.Sorted(mapsKeys(e.tenants)) {
		if st := e.tenants[t]; st.err != nil {
			errs = append(errs, st.err)
		}
	}
	return errors.Join(errs...)
}

// Problems lists, by tenant, the policy files that do not load as they
// are, each with what is in force instead: the last good policy, or none
// (the tenant's calls are refused). Nil when every file is loaded.
func (e *Engine) Problems() []TenantProblem {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var out []TenantProblem
	for _, t := range slices.Sorted(mapsKeys(e.tenants)) {
		st := e.tenants[t]
		switch {
		case st.err == nil:
		case st.good != nil:
			out = append(out, TenantProblem{t, fmt.Sprintf("tenant %s: edit rejected, the last good policy stays in force: %v", t, st.err)})
		default:
			out = append(out, TenantProblem{t, fmt.Sprintf("tenant %s: no policy in force, its calls are refused: %v", t, st.err)})
		}
	}
	return out
}

// TenantProblem is one tenant's policy file that does not load: Tenant is
// whose file it is (DefaultTenant for default.yaml), Text what is wrong
// and what is in force instead. It names the file and may quote it, so it
// is for that tenant's and the operators' eyes only.
type TenantProblem struct {
	Tenant string
	Text   string
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Tenants lists the tenants with a policy file of their own that loads
// (DefaultTenant's included), sorted.
func (e *Engine) Tenants() []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var out []string
	for _, t := range slices.Sorted(mapsKeys(e.tenants)) {
		if e.tenants[t].good != nil {
			out = append(out, t)
		}
	}
	return out
}

// Policy returns the policy in force for tenant: its own file's last good
// policy, else (no file) the default tenant's.
func (e *Engine) Policy(tenant string) (*Policy, error) {
	if err := confine.CheckID("tenant", tenant); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoPolicy, err)
	}
	e.mu.RLock()
	st, own := e.tenants[tenant]
	if !own {
		st = e.tenants[DefaultTenant]
	}
	e.mu.RUnlock()
	switch {
	case st == nil:
		return nil, fmt.Errorf("%w for tenant %s: no %s.yaml and no %s.yaml in %s", ErrNoPolicy, tenant, tenant, DefaultTenant, e.dir)
	case st.good == nil:
		return nil, fmt.Errorf("%w for tenant %s: %s does not load: %w", ErrNoPolicy, tenant, st.file, st.err)
	}
	return st.good, nil
}

// Explanation is a decision and what made it.
type Explanation struct {
	Tenant   string   `json:"tenant"`
	Policy   string   `json:"policy"` // the file
	Decision Decision `json:"decision"`
	Rule     string   `json:"rule"`
	Reason   string   `json:"reason"`
	// SimpleCommand is the simple command (or the permission) that decided.
	SimpleCommand string `json:"simpleCommand"`
}

// Explain decides without running, holding or auditing anything.
func (e *Engine) Explain(tenant, tool, command, workdir string, background bool) (Explanation, error) {
	p, err := e.Policy(tenant)
	if err != nil {
		return Explanation{}, err
	}
	v := p.safeEvaluate(call{tool: tool, command: command, workdir: workdir, background: background})
	return Explanation{Tenant: tenant, Policy: p.File, Decision: v.Decision, Rule: v.Rule, Reason: v.Reason, SimpleCommand: v.Command}, nil
}

// ExplainCall is Explain with sandbox permissions asked for.
func (e *Engine) ExplainCall(tenant, tool, command, workdir string, background bool, permissions []string) (Explanation, error) {
	p, err := e.Policy(tenant)
	if err != nil {
		return Explanation{}, err
	}
	v := p.safeEvaluate(call{tool: tool, command: command, workdir: workdir, background: background, permissions: permissions})
	return Explanation{Tenant: tenant, Policy: p.File, Decision: v.Decision, Rule: v.Rule, Reason: v.Reason, SimpleCommand: v.Command}, nil
}

// safeEvaluate is evaluate with no panic escaping: a matcher bug denies.
func (p *Policy) safeEvaluate(c call) (v verdict) {
	defer func() {
		if r := recover(); r != nil {
			v = verdict{Decision: Deny, Rule: RuleUnparseable, Reason: fmt.Sprintf("internal error while deciding: %v", r), Command: clip.To(c.command, maxTextBytes)}
		}
	}()
	return p.evaluate(c)
}

// Check is the tools.Gate: it decides c under its tenant's policy, applies
// the policy's timeout default and cap, adds the policy's env to the
// request's Env (over what is there; tools lays DSH_* over both), and
// audits. An ask blocks until an
// approver decides (Decide), ctx is done, or the tenant's ask timeout
// passes; only an approval lets the call run. A granted escalation
// (sandbox_permissions) applies to this call only: it travels in the
// returned request and nowhere else.
func (e *Engine) Check(ctx context.Context, c tools.Call) (executor.Request, error) {
	req := c.Request
	p, err := e.Policy(c.Tenant)
	if err != nil {
		return req, err
	}
	pc := call{tool: c.Tool, command: req.Command, workdir: req.Workdir,
		background: req.Background, permissions: req.Permissions}
	v := p.safeEvaluate(pc)
	if req.Background && v.Decision != Deny {
		if err := p.CheckBackgroundTasks(c.RunningTasks); err != nil {
			v = verdict{Decision: Deny, Rule: RuleLimit, Command: v.Command, Reason: err.Error()}
		}
	}
	rec := Record{Tenant: c.Tenant, Session: c.Session, Tool: c.Tool, Command: req.Command,
		Workdir: req.Workdir, Background: req.Background, Escalation: req.Permissions,
		Justification: c.Justification}

	asked := v.Decision == Ask
	if asked {
		v, rec = e.ask(ctx, p, c, v, rec)
		if ctx.Err() != nil && v.Decision != Allow {
			e.audit(rec, v)
			return req, fmt.Errorf("%w: waiting for approval: %w", executor.ErrAborted, ctx.Err())
		}
	}
	if err := e.audit(rec, v); err != nil && v.Decision == Allow {
		// A decision that cannot be recorded is not made.
		v = verdict{Decision: Deny, Rule: "audit", Reason: "the audit log cannot be written"}
	}
	if v.Decision != Allow {
		return req, &DeniedError{Tenant: p.Tenant, Rule: v.Rule, Reason: v.Reason}
	}
	if !req.Background {
		req.Timeout = p.Limits.ClampTimeout(req.Timeout)
	}
	// What the reader decided is checked again where commands start.
	req.ExecRules = p.execRules(pc, asked)
	if len(p.Env) > 0 {
		// A copy: the caller's map is not the policy's to change.
		env := make(map[string]string, len(req.Env)+len(p.Env))
		maps.Copy(env, req.Env)
		maps.Copy(env, p.Env)
		req.Env = env
	}
	return req, nil
}

// ask holds the call for an approver and returns the final verdict.
func (e *Engine) ask(ctx context.Context, p *Policy, c tools.Call, v verdict, rec Record) (verdict, Record) {
	if e.opts.NoApprover {
		v.Decision = Deny
		v.Reason = "approval required (no approver in a one-shot call): " + v.Reason
		return v, rec
	}
	now := e.now()
	// The approver decides on exactly what runs: the call is held whole,
	// or, too long to show in full, not held at all.
	held := Approval{Tenant: c.Tenant, Session: c.Session, Tool: c.Tool,
		Command: c.Request.Command, Workdir: c.Request.Workdir,
		Rule: v.Rule, Reason: v.Reason, Justification: c.Justification,
		Permissions: slices.Clone(c.Request.Permissions), Background: c.Request.Background,
		Created: now, Deadline: now.Add(p.AskTimeout)}
	if !held.Background {
		// What Check applies once the call is allowed.
		held.TimeoutMs = p.Limits.ClampTimeout(c.Request.Timeout).Milliseconds()
	}
	if err := held.Whole(); err != nil {
		v.Decision, v.Reason = Deny, "approval required, but "+err.Error()
		return v, rec
	}
	a, err := e.ap.Add(ctx, held)
	if err != nil {
		v.Decision, v.Reason = Deny, "approval required, but "+err.Error()
		return v, rec
	}
	id := a.ID
	rec.Approval = id
	// The ask itself is a decision: the log shows the call held even if
	// nothing ever decides it (a crash).
	_ = e.audit(rec, v)
	wait, cancel := context.WithTimeout(ctx, p.AskTimeout)
	a, err = e.ap.Wait(wait, c.Tenant, id)
	cancel()
	if err != nil {
		reason := fmt.Sprintf("no approver answered within %s (askTimeout)", p.AskTimeout)
		switch {
		case ctx.Err() != nil:
			reason = "the call was aborted"
		case !errors.Is(err, context.DeadlineExceeded):
			reason = "waiting for a decision failed: " + err.Error()
		}
		// The expiry is recorded although the caller may be gone: with a
		// context of its own, bounded.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), expireTimeout)
		a, err = e.ap.Finish(fctx, c.Tenant, id, Expired, "", reason, e.now())
		cancel()
		if err != nil && !errors.Is(err, ErrAlreadyDecided) {
			e.log.Error("policies: expiring an approval", "tenant", c.Tenant, "approval", id, "err", err)
			a = Approval{State: Expired, DecisionReason: reason}
		}
	}
	// Whoever finished first (an approver, the timer, the caller) decided.
	rec.Approver = a.Approver
	switch a.State {
	case Approved:
		reason := "approved by " + a.Approver
		if a.DecisionReason != "" {
			reason += ": " + a.DecisionReason
		}
		return verdict{Decision: Allow, Rule: v.Rule, Reason: reason, Command: v.Command}, rec
	case Denied:
		reason := "denied by approver " + a.Approver
		if a.DecisionReason != "" {
			reason += ": " + a.DecisionReason
		}
		return verdict{Decision: Deny, Rule: v.Rule, Reason: reason, Command: v.Command}, rec
	}
	return verdict{Decision: Deny, Rule: v.Rule, Reason: "approval required: " + a.DecisionReason, Command: v.Command}, rec
}

func (e *Engine) audit(rec Record, v verdict) error {
	if e.opts.Audit == nil {
		return nil
	}
	rec.Time = e.now().UTC()
	rec.Decision, rec.Rule, rec.Reason, rec.SimpleCommand = v.Decision, v.Rule, v.Reason, v.Command
	if err := e.opts.Audit.Write(rec); err != nil {
		e.log.Error("policies: audit write failed", "tenant", rec.Tenant, "err", err)
		return err
	}
	return nil
}

// AuditEgress writes the record of one HTTP request of tenant's session
// relayed on a terminated connection: allowed, or denied with reason when
// the relay answered it itself. The record's rule is the HTTP rule that
// decided (r.Rule), else sandbox.network. Without an audit log it does
// nothing.
func (e *Engine) AuditEgress(tenant, session string, r EgressRequest, refused string) error {
	rule := "sandbox.network"
	if r.Rule != "" {
		rule = r.Rule
	}
	v := verdict{Decision: Allow, Rule: rule}
	if refused != "" {
		v = verdict{Decision: Deny, Rule: rule, Reason: clip.To(refused, maxAuditText)}
	}
	rec := Record{Tenant: tenant, Session: session, Tool: ToolEgress, Command: r.Method + " " + r.Host + r.Path, Egress: &r}
	return e.audit(rec, v)
}

// Approvals lists tenant's pending approvals (oldest first) and its recently
// decided ones (newest first, bounded).
func (e *Engine) Approvals(tenant string) []Approval { return e.ap.List(tenant) }

// Decide approves or denies tenant's pending approval id. An unknown id, or
// one of another tenant, is ErrNoSuchApproval ("no such approval: <id>");
// one decided before is ErrAlreadyDecided, with the approval as decided.
func (e *Engine) Decide(tenant, id string, approve bool, approver, reason string) (Approval, error) {
	state := Denied
	if approve {
		state = Approved
	}
	ctx, cancel := context.WithTimeout(context.Background(), expireTimeout)
	defer cancel()
	return e.ap.Finish(ctx, tenant, id, state, clip.To(approver, maxAuditField), clip.To(reason, maxAuditText), e.now())
}

// Subscribe calls fn with every approval that becomes pending or is
// decided (or expires). fn must not block; it runs on the goroutine that
// made the change (the store's: with the memory store, the one that
// asked or decided). cancel stops the calls.
func (e *Engine) Subscribe(fn func(Approval)) (cancel func()) { return e.ap.Subscribe(fn) }

// expireTimeout bounds a decision's or an expiry's write to the store.
const expireTimeout = 30 * time.Second
