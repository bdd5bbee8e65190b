package session

// Durable sessions (DESIGN.md §7): a session outlives its sandbox.
//
// Suspending a session streams its workspace out through its agent (GET
// /v1/workspace: a zstd tar with owners, modes, links, holes and xattrs)
// into the snapshot store (Config.Snapshots), writes the session's record
// there (state suspended, the snapshot, the settings it was created with),
// and only then removes the sandbox and the session's runtime state: a
// store that fails or is full keeps the sandbox, and the session runs on.
// The record, not this process's memory, says a session is suspended, so
// any server sharing the store (a restarted one, another replica) resumes
// it.
//
// Resuming is the sandbox layer's Resume hook: every sandbox a session is
// handed by a creation asks the record; a suspended session is claimed by
// one process (resume.go), and its newest snapshot is streamed into the
// new sandbox (PUT /v1/workspace, which
// swaps the workspace in only once whole and verified) before the call
// that caused the creation runs, and the record says running. The model
// sees nothing but its call's result. A snapshot that fails its checksum is
// refused, and the error names the one before it, which an operator can
// resume from (ResumeSession with a snapshot id).
//
// Who suspends: the idle reaper at the tenant's idle TTL (sandbox.Config.
// Suspend: never while the sandbox is busy), and an operator
// (SuspendSession), which kills the session's running background tasks
// first. Suspended sessions past their tenant's suspendedTTL are deleted
// with their snapshots by the leader (sweepSuspended).
//
// Costs: a new sandbox reads the session's record once (not per call);
// none at all without a store. (A suspended session's settings are read
// from its record before its sandbox is made, and its resume claims from
// that read; a session whose settings this process does not know, and
// that is not suspended, pays a second read.)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/server"
)

// Session states as records and SessionInfo say them.
const (
	stateRunning   = "running"
	stateSuspended = "suspended"
	// stateResuming: a process claimed the session's resume (record.Claim)
	// and is restoring its snapshot (resume.go).
	stateResuming = "resuming"
)

// DefaultSuspendedTTL is how long a suspended session of a tenant without
// a policy is kept (Config.SuspendedTTL's default); a policy sets its
// tenant's (limits.suspendedTTL).
const DefaultSuspendedTTL = 7 * 24 * time.Hour

// keepSnapshots is how many files snapshots of a session are kept: the
// newest, which a resume restores, and the one before, offered when the
// newest is found corrupt. A memory suspend's image is kept beside them
// (pruneKeeping).
const keepSnapshots = 2

// record is a session's record in the snapshot store.
type record struct {
	// State is stateSuspended while the session has no sandbox and
	// resumes from Snapshot; stateRunning once resumed.
	State    string `json:"state"`
	Snapshot string `json:"snapshot,omitempty"`
	// Memory is the snapshot holding the sandbox's memory image
	// (sandbox.suspend: memory, memory.go), restored after Snapshot.
	Memory string `json:"memory,omitempty"`
	// Settings are the options the session was created with (nil: the
	// tenant's defaults), so its next sandbox is made as it asked.
	Settings  *server.SessionOptions `json:"settings,omitempty"`
	Created   time.Time              `json:"created,omitzero"`
	Suspended time.Time              `json:"suspended,omitzero"`
	Resumed   time.Time              `json:"resumed,omitzero"`
	// Reason says why it was suspended ("idle for its TTL", "requested").
	Reason string `json:"reason,omitempty"`
	// Sandbox and SandboxCreated are the sandbox the snapshot was taken
	// of: found running at a resume, it was never removed, and keeps
	// the newest workspace.
	Sandbox        string    `json:"sandbox,omitempty"`
	SandboxCreated time.Time `json:"sandboxCreated,omitzero"`
	// Size is the snapshot's size in bytes; Entries its entries.
	Size    int64 `json:"size,omitempty"`
	Entries int   `json:"entries,omitempty"`
	// Claim is the resume in progress (stateResuming), or, once running,
	// the one that resumed it: which process, into which sandbox.
	Claim *claim `json:"claim,omitempty"`
	// Snapshotted is when Snapshot was taken of the running session
	// (rescue.go: periodic snapshots); Sandbox is then the one it runs
	// in.
	Snapshotted time.Time `json:"snapshotted,omitzero"`

	// lost says, for a resume from a running session's last snapshot,
	// what was lost (rescue.go: lostSandbox); never stored.
	lost string
	// memoryFailed says, for a resume whose memory image the Manager's
	// Restore could not restore (restoreSandbox), why, for the resumed
	// event; never stored.
	memoryFailed string
}

// SessionNotifier hears sessions' state changes (the server's event
// streams): suspended, resumed, not restored, deleted, with why.
type SessionNotifier interface {
	SessionChanged(tenant, session, state, message string)
}

// changed tells Config.Notifier, if it hears state changes, and the log.
func (l *Service) changed(tenant, session, state, message string) {
	l.log.Info("session "+state, "tenant", tenant, "session", session, "detail", message)
	if sn, ok := l.cfg.Notifier.(SessionNotifier); ok {
		sn.SessionChanged(tenant, session, state, message)
	}
}

// readRecord returns the session's record; ok false when it has none.
func (l *Service) readRecord(ctx context.Context, tenant, session string) (record, bool, error) {
	r, _, ok, err := l.recordAt(ctx, tenant, session)
	return r, ok, err
}

// recordAt returns the session's record and its version (for swapRecord);
// ok false when it has none.
func (l *Service) recordAt(ctx context.Context, tenant, session string) (_ record, version string, ok bool, _ error) {
	data, version, err := l.cfg.Snapshots.Record(ctx, tenant, session)
	if errors.Is(err, errdefs.ErrNotFound) {
		return record{}, "", false, nil
	}
	if err != nil {
		return record{}, "", false, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, "", false, fmt.Errorf("session %s/%s: its record in the snapshot store is unreadable: %w", tenant, session, err)
	}
	return r, version, true, nil
}

// swapRecord writes r if the session's record is still at version old
// (snapshot.Store.SwapRecord): snapshot.ErrConflict when it is not.
func (l *Service) swapRecord(ctx context.Context, tenant, session, old string, r record) (string, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	return l.cfg.Snapshots.SwapRecord(ctx, tenant, session, old, data)
}

func (l *Service) writeRecord(ctx context.Context, tenant, session string, r record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return l.cfg.Snapshots.SetRecord(ctx, tenant, session, data)
}

// requestedKey marks the context of an operator's suspend (SuspendSession)
// with its reason; the reaper's has none.
type requestedKey struct{}

// suspendReason says why the suspend of ctx was asked for, and whether an
// operator asked.
func suspendReason(ctx context.Context) (reason string, requested bool) {
	if r, ok := ctx.Value(requestedKey{}).(string); ok {
		return r, true
	}
	return "idle for its TTL", false
}

// saveSandbox is sandbox.Config.Suspend: it snapshots sb's workspace to the
// store and records the session suspended. An operator's suspend kills
// the session's running background tasks first.
func (l *Service) saveSandbox(ctx context.Context, sb sandbox.Sandbox) error {
	tenant, session := sb.Tenant, sb.Session
	reason, requested := suspendReason(ctx)
	memory, memWhy := l.memoryMode(ctx, sb)
	fail := func(err error) error {
		err = fmt.Errorf("suspending session %s: %w; its sandbox is kept and the session runs on", session, err)
		l.changed(tenant, session, "suspend-failed", err.Error())
		return err
	}
	c, err := agentapi.DialEndpoint(ctx, sb.Agent)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	var killed []string
	if requested {
		// A call in flight is not suspended: the operator waits for it.
		n := l.heldCalls(tenant, session)
		if a, err := c.Activity(ctx); err == nil {
			n = max(n, a.Calls)
		}
		if n > 0 {
			return fail(errdefs.Errorf(errdefs.ErrConflict, "%d call(s) in flight; suspend it when they have ended", n))
		}
		if !memory { // (a memory image keeps them)
			if killed, err = killTasks(ctx, c, session); err != nil {
				return fail(err)
			}
		}
	}
	// The record as it is before the snapshot: the suspend's is written
	// over it by a swap from its version (putRecord), never over one
	// another process wrote meanwhile without a look at it. A record of
	// a newer sandbox of the session (resumed elsewhere, by a runtime
	// sharing the store) makes this sandbox a stale one, not suspended.
	cur, version, had, err := l.recordAt(ctx, tenant, session)
	if err != nil {
		return fail(fmt.Errorf("reading its record: %w", err))
	}
	if had {
		if why := movedOn(cur, sb); why != "" {
			return fail(errdefs.Errorf(errdefs.ErrConflict, "this sandbox (%s) is not the session's any more: %s", sb.ID, why))
		}
	}
	start := time.Now()
	exp, err := c.ExportWorkspace(ctx, agentapi.WorkspaceLimits{})
	if err != nil {
		return fail(fmt.Errorf("streaming its workspace out: %w", err))
	}
	info, err := l.cfg.Snapshots.Put(ctx, tenant, session, exp)
	exp.Close()
	if err != nil {
		return fail(fmt.Errorf("storing its workspace: %w", err))
	}
	// A call or command that began while the workspace streamed out
	// (another process's: this one's wait for the suspend) may have
	// written past the snapshot: the suspend is abandoned, the sandbox
	// kept.
	if act, err := c.Activity(ctx); err != nil || act.Calls > 0 || (act.Commands > 0 && !memory) {
		_ = l.cfg.Snapshots.Delete(context.WithoutCancel(ctx), tenant, session, info.ID)
		if err != nil {
			return fail(fmt.Errorf("asking its agent what ran meanwhile: %w", err))
		}
		return fail(errdefs.Errorf(errdefs.ErrConflict, "work began while its workspace was being stored (%s); the snapshot is dropped", act.Busy()))
	}
	var memID string
	if memory {
		if memID, memWhy = l.suspendMemory(ctx, sb); memID == "" {
			// A files suspend then, as any: tasks killed, taken again.
			_ = l.cfg.Snapshots.Delete(context.WithoutCancel(ctx), tenant, session, info.ID)
			return l.saveSandbox(filesOnly(ctx, memWhy), sb)
		}
	}
	st := exp.Stats()
	r := record{Memory: memID, State: stateSuspended, Snapshot: info.ID, Created: sb.Created, Suspended: info.Created,
		Reason: reason, Size: info.Size, Entries: st.Entries, Sandbox: sb.ID, SandboxCreated: sb.Created}
	if sb.Settings != "" {
		var o server.SessionOptions
		if err := json.Unmarshal([]byte(sb.Settings), &o); err == nil {
			r.Settings = &o
		}
	} else if o, ok := l.ownSettings(tenant, session); ok {
		r.Settings = &o
	}
	stale := func(cur record) string { return movedOn(cur, sb) }
	if err := l.putRecord(ctx, tenant, session, version, r, stale); err != nil {
		// The snapshot is nobody's without its record.
		_ = l.cfg.Snapshots.Delete(context.WithoutCancel(ctx), tenant, session, info.ID)
		if errors.Is(err, errMovedOn) {
			return fail(errdefs.Errorf(errdefs.ErrConflict, "this sandbox (%s) is not the session's any more: %v", sb.ID, err))
		}
		return fail(fmt.Errorf("recording it suspended: %w", err))
	}
	var oldImage string
	if had && cur.Memory != memID {
		oldImage = cur.Memory // its session's next resume is from memID or files
	}
	l.pruneKeeping(ctx, tenant, session, info.ID, memID, oldImage)
	l.forgetConn(tenant, session)
	msg := fmt.Sprintf("%s; snapshot %s: %d entries, %d bytes of files, %d bytes stored, in %s",
		reason, info.ID, st.Entries, st.Bytes, info.Size, time.Since(start).Round(time.Millisecond))
	if st.Sockets+st.Devices > 0 {
		msg += fmt.Sprintf("; left out %d socket(s) and %d device(s)", st.Sockets, st.Devices)
	}
	if len(killed) > 0 {
		msg += fmt.Sprintf("; background task(s) killed by the suspend: %s", strings.Join(killed, ", "))
	}
	msg += memoryNote(memID, memWhy)
	l.changed(tenant, session, stateSuspended, msg)
	return nil
}

// HoldCall implements server.CallHolder: the session has a call in this
// server (held for an approval, or on its way to the sandbox) until the
// release; busy reports it to the reaper.
func (l *Service) HoldCall(tenant, session string) func() {
	k := tenant + "/" + session
	l.mu.Lock()
	l.held[k]++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.held[k]--; l.held[k] <= 0 {
				delete(l.held, k)
			}
		})
	}
}

// heldCalls counts the session's calls held in this server.
func (l *Service) heldCalls(tenant, session string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[tenant+"/"+session]
}

// busy is sandbox.Config.Busy: calls this server holds for the session
// (an approval pending: its command has not reached the sandbox), else
// what the sandbox's agent says runs (ask).
func (l *Service) busy(ask func(context.Context, sandbox.Sandbox) (string, error)) func(context.Context, sandbox.Sandbox) (string, error) {
	return func(ctx context.Context, sb sandbox.Sandbox) (string, error) {
		if n := l.heldCalls(sb.Tenant, sb.Session); n > 0 {
			return fmt.Sprintf("%d call(s) held by the server (waiting for an approval, or on their way)", n), nil
		}
		return ask(ctx, sb)
	}
}

// killTasks kills the session's running background tasks (an operator's
// suspend: what runs does not survive it) and returns their ids.
func killTasks(ctx context.Context, c *agentapi.Client, session string) ([]string, error) {
	tasks, err := c.Tasks(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("listing its background tasks: %w", err)
	}
	var killed []string
	for _, ti := range tasks {
		if ti.Status != nil && ti.Status.State != executor.Running {
			continue
		}
		t, err := c.Task(ctx, session, ti.ID)
		if errors.Is(err, executor.ErrNotFound) {
			continue
		}
		if err != nil {
			return killed, fmt.Errorf("background task %s: %w", ti.ID, err)
		}
		res, err := t.Kill(ctx)
		if err != nil {
			return killed, fmt.Errorf("killing background task %s: %w", ti.ID, err)
		}
		if !res.AlreadyDone {
			killed = append(killed, ti.ID)
		}
	}
	return killed, nil
}

// prune deletes the session's snapshots older than the keepSnapshots
// newest; failures are logged (the next suspend prunes again).
func (l *Service) prune(ctx context.Context, tenant, session, newest string) {
	l.pruneKeeping(ctx, tenant, session, newest, "", "")
}

// pruneKeeping is prune after a suspend that took the memory image image
// ("": none) beside its files snapshot newest, replacing the record's
// image oldImage ("": none): image is kept and not counted, so that the
// files snapshot before newest stays too (offered when newest is found
// corrupt), and oldImage goes (it restores no session now).
func (l *Service) pruneKeeping(ctx context.Context, tenant, session, newest, image, oldImage string) {
	infos, err := l.cfg.Snapshots.List(ctx, tenant, session)
	if err != nil {
		l.log.Warn("listing a session's snapshots to prune them", "tenant", tenant, "session", session, "err", err)
		return
	}
	for _, id := range pruned(infos, newest, image, oldImage) {
		if err := l.cfg.Snapshots.Delete(ctx, tenant, session, id); err != nil {
			l.log.Warn("pruning a session's snapshot", "tenant", tenant, "session", session, "snapshot", id, "err", err)
		}
	}
}

// pruned are the snapshots of infos (newest first) that pruneKeeping
// deletes.
func pruned(infos []snapshot.Info, newest, image, oldImage string) []string {
	var drop []string
	kept := 0
	for _, info := range infos {
		switch {
		case info.ID == image && image != "":
		case info.ID == oldImage && oldImage != "":
			drop = append(drop, info.ID)
		case kept < keepSnapshots || info.ID == newest:
			kept++
		default:
			drop = append(drop, info.ID)
		}
	}
	return drop
}

// forgetConn drops the tenant executor's cached connection to the
// session's agent (its sandbox is gone).
func (l *Service) forgetConn(tenant, session string) {
	l.mu.Lock()
	tb := l.tenants[tenant]
	l.mu.Unlock()
	if tb != nil && tb.forget != nil {
		tb.forget(session)
	}
}

// SuspendSession implements server.Suspender: the session's workspace to
// the snapshot store, its background tasks killed, its sandbox removed.
// A session already suspended is returned as it is.
func (l *Service) SuspendSession(ctx context.Context, tenant, session string) (server.SessionInfo, error) {
	if err := l.durable(tenant, session); err != nil {
		return server.SessionInfo{}, err
	}
	k := tenant + "/" + session
	l.mu.Lock()
	if _, ok := l.suspending[k]; ok {
		l.mu.Unlock()
		return server.SessionInfo{}, server.Errorf(server.ErrConflict, "session %s is being suspended already", session)
	}
	l.suspending[k] = "requested"
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.suspending, k)
		l.mu.Unlock()
	}()
	err := l.manager.Suspend(context.WithValue(ctx, requestedKey{}, "requested"), tenant, session)
	if errors.Is(err, sandbox.ErrNotFound) {
		r, ok, rerr := l.readRecord(ctx, tenant, session)
		switch {
		case rerr != nil:
			return server.SessionInfo{}, server.Errorf(server.ErrUnavailable, "session %s: %v", session, rerr)
		case ok && r.State == stateSuspended:
			return suspendedInfo(tenant, session, r), nil
		}
		return server.SessionInfo{}, server.NoSuchSession(session)
	}
	if err != nil {
		return server.SessionInfo{}, serverErr(err)
	}
	r, _, rerr := l.readRecord(ctx, tenant, session)
	if rerr != nil {
		return server.SessionInfo{}, server.Errorf(server.ErrUnavailable, "session %s: %v", session, rerr)
	}
	return suspendedInfo(tenant, session, r), nil
}

// ResumeSession implements server.Suspender: a suspended session gets its
// sandbox back now (from snapshot, when not "": one of its snapshots, say
// the one before a corrupt newest), rather than at its next call. A running
// session is returned as it is.
func (l *Service) ResumeSession(ctx context.Context, tenant, session, snapshotID string) (server.SessionInfo, error) {
	if err := l.durable(tenant, session); err != nil {
		return server.SessionInfo{}, err
	}
	r, ok, err := l.readRecord(ctx, tenant, session)
	if err != nil {
		return server.SessionInfo{}, server.Errorf(server.ErrUnavailable, "session %s: %v", session, err)
	}
	if snapshotID == "" {
		l.mu.Lock()
		delete(l.resumeFrom, tenant+"/"+session)
		l.mu.Unlock()
	}
	if snapshotID != "" {
		if !ok || r.State != stateSuspended {
			return server.SessionInfo{}, server.Errorf(server.ErrInvalid, "session %s is not suspended: only a suspended session resumes from a snapshot of its choice", session)
		}
		infos, err := l.cfg.Snapshots.List(ctx, tenant, session)
		if err != nil {
			return server.SessionInfo{}, server.Errorf(server.ErrUnavailable, "session %s: %v", session, err)
		}
		found := false
		for _, info := range infos {
			found = found || info.ID == snapshotID
		}
		if !found {
			return server.SessionInfo{}, server.Errorf(server.ErrInvalid, "session %s has no snapshot %q (it has %d)", session, snapshotID, len(infos))
		}
		l.mu.Lock()
		l.resumeFrom[tenant+"/"+session] = snapshotID
		l.mu.Unlock()
	}
	if !ok {
		if _, err := l.manager.Inspect(ctx, tenant, session); err != nil {
			if errors.Is(err, sandbox.ErrNotFound) {
				return server.SessionInfo{}, server.NoSuchSession(session)
			}
			return server.SessionInfo{}, serverErr(err)
		}
	}
	spec, err := l.spec(ctx, tenant, session)
	if err != nil {
		return server.SessionInfo{}, err
	}
	sb, err := l.manager.Ensure(ctx, spec)
	if err != nil {
		return server.SessionInfo{}, server.Errorf(server.ErrUnavailable, "sandbox for session %s: %v", session, err)
	}
	return sessionInfo(sb), nil
}

// durable refuses suspend and resume where sessions cannot be suspended,
// and of names no session has (a warm pool's sandboxes are nobody's
// session: suspending one would drain the pool).
func (l *Service) durable(tenant, session string) error {
	if _, err := l.tenant(tenant); err != nil {
		return err
	}
	if sandbox.IsPooled(session) {
		return server.Errorf(server.ErrInvalid, "session %q: names starting with %q are reserved for warm pools", session, sandbox.PoolPrefix)
	}
	if l.manager == nil {
		return server.Errorf(server.ErrInvalid, "the local backend suspends no sessions: they run on this host, not in sandboxes")
	}
	if l.cfg.Snapshots == nil {
		return server.Errorf(server.ErrInvalid, "this server suspends no sessions: it has no snapshot store (snapshots.store)")
	}
	return nil
}

// serverErr maps a sandbox layer's error to the server's classes.
func serverErr(err error) error {
	switch {
	case errors.Is(err, errdefs.ErrConflict):
		return server.Errorf(server.ErrConflict, "%v", err)
	case errors.Is(err, errdefs.ErrNoSpace), errors.Is(err, errdefs.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return server.Errorf(server.ErrUnavailable, "%v", err)
	case errors.Is(err, errdefs.ErrInvalid):
		return server.Errorf(server.ErrInvalid, "%v", err)
	}
	return server.Errorf(server.ErrUnavailable, "%v", err)
}

// suspendedInfo describes a suspended session from its record.
func suspendedInfo(tenant, session string, r record) server.SessionInfo {
	si := server.SessionInfo{ID: session, Tenant: tenant, State: r.State, Created: r.Created,
		Snapshot: r.Snapshot, Suspended: r.Suspended}
	if r.Settings != nil {
		si.Image, si.Runtime = r.Settings.Image, r.Settings.Runtime
	}
	return si
}

// suspendedSessions are the tenant's suspended sessions the store records
// (all tenants: tenant ""), by tenant and session, with those being
// resumed: a resume whose server died leaves its session resuming, with
// no sandbox, until its next call, and it must not vanish from listings.
func (l *Service) suspendedSessions(ctx context.Context, tenant string) (map[string]record, error) {
	recs, err := l.cfg.Snapshots.Records(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := map[string]record{}
	for _, rec := range recs {
		var r record
		if json.Unmarshal(rec.Data, &r) != nil || (r.State != stateSuspended && r.State != stateResuming) {
			continue
		}
		out[rec.Tenant+"/"+rec.Session] = r
	}
	return out, nil
}

// Suspended lists the suspended sessions of every tenant the store
// records (for an operator's listing on this host), by tenant and
// session; none without a store.
func (l *Service) Suspended(ctx context.Context) ([]server.SessionInfo, error) {
	if l.cfg.Snapshots == nil || l.manager == nil {
		return nil, nil
	}
	sus, err := l.suspendedSessions(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make([]server.SessionInfo, 0, len(sus))
	for k, r := range sus {
		tenant, session, _ := strings.Cut(k, "/")
		out = append(out, suspendedInfo(tenant, session, r))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// suspendedTTL is a tenant's: its policy's limits.suspendedTTL, else
// Config.SuspendedTTL.
func (l *Service) suspendedTTL(tenant string) time.Duration {
	if l.cfg.Policies != nil {
		if p, err := l.cfg.Policies.Policy(tenant); err == nil && p.SuspendedTTL > 0 {
			return p.SuspendedTTL
		}
	}
	return l.cfg.SuspendedTTL
}

// sweepSuspended deletes, with their snapshots, the suspended sessions
// past their tenant's suspendedTTL, the records of sessions that ended
// without a suspend (their sandbox gone, no use for a TTL: the reaper
// ended them, a crash) and the store's leftovers of crashed suspends; it
// returns the sessions deleted.
func (l *Service) sweepSuspended(ctx context.Context) ([]string, error) {
	recs, err := l.cfg.Snapshots.Records(ctx, "")
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	if l.manager != nil {
		list, err := l.manager.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			live[sb.Tenant+"/"+sb.Session] = true
		}
	}
	sort.Slice(recs, func(i, j int) bool {
		return recs[i].Tenant+"/"+recs[i].Session < recs[j].Tenant+"/"+recs[j].Session
	})
	now := time.Now()
	var gone []string
	var errs []error
	for _, rec := range recs {
		var r record
		if json.Unmarshal(rec.Data, &r) != nil {
			continue
		}
		k := rec.Tenant + "/" + rec.Session
		ttl := l.suspendedTTL(rec.Tenant)
		since := r.snapshotTime()
		if r.Resumed.After(since) {
			since = r.Resumed
		}
		switch {
		case ttl <= 0 || now.Sub(since) < ttl:
			continue
		case r.State == stateResuming && r.Claim != nil && now.Before(r.Claim.Until):
			// Being resumed, by any server: a resume at the TTL's edge
			// must not lose its snapshot mid-restore. A stale claim is
			// taken over by the next call, or goes at a later sweep.
			continue
		case r.State == stateSuspended:
		case live[k]:
			continue // running
		}
		if err := l.cfg.Snapshots.DeleteSession(ctx, rec.Tenant, rec.Session); err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, k)
		if r.State == stateSuspended {
			l.changed(rec.Tenant, rec.Session, "deleted", fmt.Sprintf("suspended %s ago, past its suspendedTTL of %s: deleted with its snapshots",
				now.Sub(since).Round(time.Second), ttl))
		} else {
			l.log.Info("snapshots of an ended session deleted", "tenant", rec.Tenant, "session", rec.Session, "since", now.Sub(since).Round(time.Second))
		}
	}
	if _, err := l.cfg.Snapshots.Sweep(ctx, now.Add(-time.Hour)); err != nil {
		errs = append(errs, err)
	}
	return gone, errors.Join(errs...)
}

// reconcile brings the records of the sandboxes a start adopted in line
// before any call: a sandbox that was snapshotted and never removed is
// recorded running; one made for a resume that never restored is restored
// (resume); one a memory resume was restoring from its image is kept if
// its agent answers, and removed if not (the session stays suspended).
func (l *Service) reconcile(ctx context.Context, kept []sandbox.Sandbox) {
	for _, sb := range kept {
		if sandbox.IsPooled(sb.Session) {
			continue
		}
		err := l.resume(ctx, sb, true)
		if errors.Is(err, errImageSandboxSilent) {
			// The session is suspended again: its next call restores
			// it into a sandbox of its own.
			err = errors.Join(err, l.manager.RemoveSandbox(ctx, sb))
		}
		if err != nil {
			l.log.Warn("an adopted sandbox's record", "tenant", sb.Tenant, "session", sb.Session, "id", sb.ID, "err", err)
		}
	}
}

// sweepSuspendedEvery runs sweepSuspended until ctx ends.
func (l *Service) sweepSuspendedEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := l.sweepSuspended(ctx); err != nil && ctx.Err() == nil {
			l.log.Warn("deleting suspended sessions past their TTL", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
