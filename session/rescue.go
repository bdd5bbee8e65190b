package session

// Snapshots of running sessions: at a sandbox's deletion behind shellbox's
// back, and periodically (limits.snapshotEvery).
//
// On Kubernetes a session's workspace is an emptyDir: it dies with its
// pod. A pod someone else deletes (kubectl delete, the Eviction API,
// kubectl drain) gets its termination grace, during which its agent serves
// on, fenced (no new call starts: a call refused there is made again in
// the session's next sandbox). The leader watches the session pods
// (DeletionWatcher); for each pod deleted that way it streams the
// workspace out through the agent into the store, records the session
// suspended ("snapshotted at pod deletion"), and tells the agent to end.
// The session's next call, through any replica, gets a new pod and
// resumes from that snapshot as from any suspend. The leader, because one
// snapshot per deletion is enough, and it is the replica that holds the
// release's other chores; a replica that becomes the leader mid-grace
// (the old one left with the node being drained) finds the pods being
// deleted in its first list and saves them.
//
// Every replica, leader or not, lets go of a sandbox that went
// (watchGone). A replica that served the session holds the pod as its
// sandbox (its Manager's entry, the tenant's cached connection to the
// agent), and would dial the pod's IP at the session's next call: once the
// agent is gone with its pod a blackhole, so the call waited out
// agentapi's connect bound (5 s) before the pod was found gone and the
// call made again in a new one. So every replica runs a GoneWatcher for as
// long as it serves (on Kubernetes one informer of the release's session
// pods per replica, not one watch per session, and no read per pod), and
// for each sandbox told gone that it holds it does at once what the failed
// dial led to: it drops the cached connection and removes the sandbox from
// its Manager (RemoveSandbox: on Kubernetes a pod gone, or one whose
// deletion is ending, is only waited for). The session's next call there
// gets a new sandbox, which resumes from the snapshot the leader took. A
// sandbox is told gone when its agent is (its pod being deleted and its
// container ended: the leader's snapshot is stored, or the grace ran out)
// or it is, not when its deletion starts: through the grace the agent
// serves, fenced, so a call that reaches it is refused at once and made
// again in the next sandbox, and the leader snapshots through it; a
// replica that let go then would hold the session's calls in Remove's
// polls of the pod, through a drain's graces, against the client's QPS
// budget. It drops only the very sandbox told (its ID and creation time):
// a replica whose Manager holds a newer sandbox of the session (a resume
// made it while the old pod's news travelled) keeps it, and RemoveSandbox
// checks that once more under its hold of the session. Only the leader
// snapshots.
//
// Where no snapshot could be taken at the end (the node vanished, the
// grace ran out, the store failed), the session resumes from its last
// snapshot: its record is "running" and names the sandbox it ran in, and
// a new sandbox that is not that one (on a runtime whose workspaces die
// with their sandboxes) restores the record's snapshot; the event says
// which and how old. limits.snapshotEvery bounds what that loses: the
// leader snapshots every running session used since its last snapshot
// that often, without stopping it, and records the session running from
// it. Such a snapshot is not an instant of the workspace: files written
// while it streams may be in it, or half, or not. So a periodic snapshot
// waits for a moment with no foreground call in flight (one that writes is
// likely to be one), up to one more period; background tasks are never
// waited for.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/server"
)

// DeletionWatcher is the ability of a runtime whose sandboxes' workspaces
// die with them (kube.Runtime: an emptyDir per pod) to tell of sandboxes
// deleted behind shellbox's back while their agents still answer, until
// until. WatchDeletions blocks until ctx ends; it calls doomed once per
// sandbox, on goroutines of its own.
type DeletionWatcher interface {
	WatchDeletions(ctx context.Context, owner string, doomed func(sb sandbox.Sandbox, until time.Time)) error
}

// GoneWatcher is the ability of a runtime whose sandboxes several server
// processes share (kube.Runtime: a release's replicas) to tell each of
// them of the sandboxes that went, whoever deleted them: WatchGone calls
// gone once per sandbox, as soon as its agent is gone with it or the
// sandbox is, with the sandbox's ID and creation time. It blocks until
// ctx ends; gone must not block.
type GoneWatcher interface {
	WatchGone(ctx context.Context, owner string, gone func(sb sandbox.Sandbox)) error
}

// deletionWatcher finds rt's DeletionWatcher through its wrappers.
func deletionWatcher(rt sandbox.Runtime) (DeletionWatcher, bool) {
	return ability[DeletionWatcher](rt)
}

// goneWatcher finds rt's GoneWatcher through its wrappers.
func goneWatcher(rt sandbox.Runtime) (GoneWatcher, bool) {
	return ability[GoneWatcher](rt)
}

// ability finds rt's optional ability T through its wrappers.
func ability[T any](rt sandbox.Runtime) (T, bool) {
	for rt != nil {
		if w, ok := rt.(T); ok {
			return w, true
		}
		u, ok := rt.(sandbox.Unwrapper)
		if !ok {
			break
		}
		rt = u.Unwrap()
	}
	var zero T
	return zero, false
}

// Event states of running sessions' snapshots (SessionNotifier).
const (
	// eventSnapshotted: a periodic snapshot; the session runs on.
	eventSnapshotted = "snapshotted"
	// eventSnapshotFailed: a snapshot at deletion or a periodic one was
	// not taken; the message says what the session resumes from.
	eventSnapshotFailed = "snapshot-failed"
)

// deletionMargin is kept of a deleted sandbox's grace for the record and
// the agent's end, after the workspace streamed out.
const deletionMargin = time.Second

// keeper holds what the snapshots of running sessions need across calls:
// one at a time per session, and the leader's memory of each session's
// last snapshot.
type keeper struct {
	mu     sync.Mutex
	busy   map[string]chan struct{} // tenant/session → done, while one is taken
	last   map[string]time.Time     // tenant/session → its last snapshot (periodic)
	waited map[string]time.Time     // tenant/session → since when one is due and waits for a call to end
}

// hold makes the caller the session's one snapshot taker, waiting for
// another's to end (bounded by ctx); release ends it.
func (k *keeper) hold(ctx context.Context, key string) (release func(), err error) {
	for {
		k.mu.Lock()
		if k.busy == nil {
			k.busy = map[string]chan struct{}{}
		}
		done, ok := k.busy[key]
		if !ok {
			done = make(chan struct{})
			k.busy[key] = done
			k.mu.Unlock()
			return func() {
				k.mu.Lock()
				delete(k.busy, key)
				k.mu.Unlock()
				close(done)
			}, nil
		}
		k.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// watchDeletions saves the sessions whose sandboxes w reports deleted
// behind shellbox's back, until ctx ends (the leadership).
func (l *Service) watchDeletions(ctx context.Context, w DeletionWatcher) {
	for {
		err := w.WatchDeletions(ctx, l.cfg.Owner, func(sb sandbox.Sandbox, until time.Time) {
			l.saveDoomed(ctx, sb, until)
		})
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("watching sandboxes deleted behind shellbox's back; trying again in 10s", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Second):
		}
	}
}

// watchGone lets go of the sandboxes w reports gone that this process
// holds (dropGone), until ctx ends (the Service's life, leader or not),
// and waits for the removals it started.
func (l *Service) watchGone(ctx context.Context, w GoneWatcher) {
	var drops sync.WaitGroup
	defer drops.Wait()
	for {
		err := w.WatchGone(ctx, l.cfg.Owner, func(sb sandbox.Sandbox) { l.dropGone(ctx, sb, &drops) })
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("watching sandboxes that go; trying again in 10s (meanwhile a call whose sandbox went waits for its connection to fail)", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Second):
		}
	}
}

// dropGone lets go of sb, a sandbox gone or whose agent is, if it is the
// one this process holds for its session (same ID and creation time): the
// tenant's cached connection to its agent is dropped at once, and the
// Manager's entry by RemoveSandbox on drops, which holds the session's
// calls here until the runtime has no such sandbox; then they get a new
// one. Another sandbox of the session (a newer one a resume made) is
// kept: RemoveSandbox checks that again under its hold. It does not
// block.
func (l *Service) dropGone(ctx context.Context, sb sandbox.Sandbox, drops *sync.WaitGroup) {
	var held sandbox.Sandbox
	for _, s := range l.manager.Sandboxes() {
		if s.Tenant == sb.Tenant && s.Session == sb.Session {
			held = s
			break
		}
	}
	if held.ID == "" || held.ID != sb.ID || !held.Created.Equal(sb.Created) {
		return // not held here, or another sandbox of the session
	}
	l.forgetConn(sb.Tenant, sb.Session)
	drops.Go(func() {
		err := l.manager.RemoveSandbox(ctx, held)
		switch {
		case err == nil:
			l.log.Info("sandbox gone: let go of it; the session's next call here gets a new one", "tenant", sb.Tenant, "session", sb.Session, "id", sb.ID)
		case errors.Is(err, sandbox.ErrNotFound):
			// Replaced already, here.
		case ctx.Err() == nil:
			l.log.Warn("sandbox gone: letting go of it", "tenant", sb.Tenant, "session", sb.Session, "id", sb.ID, "err", err)
		}
	})
}

// saveDoomed snapshots the workspace of sb, a sandbox someone else is
// deleting, through its agent before until (the end of its grace), records
// the session suspended from it, and tells the agent to end. A session
// suspended or being resumed already is left alone. On failure the
// session keeps its record: it resumes from its last snapshot, if any.
func (l *Service) saveDoomed(ctx context.Context, sb sandbox.Sandbox, until time.Time) {
	tenant, session := sb.Tenant, sb.Session
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, until.Add(-deletionMargin))
	defer cancel()
	fail := func(err error) {
		l.changed(tenant, session, eventSnapshotFailed, fmt.Sprintf("its sandbox %s is being deleted (not by shellbox), and no snapshot could be taken in its grace (%s): %v; %s",
			sb.ID, until.Sub(start).Round(time.Second), err, l.fallback(context.WithoutCancel(ctx), tenant, session)))
	}
	release, err := l.keep.hold(ctx, tenant+"/"+session)
	if err != nil {
		fail(fmt.Errorf("waiting for its periodic snapshot to end: %w", err))
		return
	}
	defer release()
	cur, version, ok, err := l.recordAt(ctx, tenant, session)
	if err != nil {
		fail(err)
		return
	}
	if ok && (cur.State == stateSuspended || cur.State == stateResuming || movedOn(cur, sb) != "") {
		// Suspended meanwhile (its own removal would carry shellbox's
		// mark), or resumed into another sandbox: nothing here is newer.
		l.log.Info("sandbox deleted behind shellbox's back: its session is "+cur.State+" already, elsewhere", "tenant", tenant, "session", session, "id", sb.ID)
		return
	}
	taken, err := l.takeSnapshot(ctx, sb)
	if err != nil {
		fail(err)
		return
	}
	r := taken.record(sb, cur, ok)
	r.State, r.Suspended, r.Reason = stateSuspended, taken.info.Created, reasonDeleted
	r.Claim = nil
	if err := l.putRecord(ctx, tenant, session, version, r, runningIn(sb)); err != nil {
		_ = l.cfg.Snapshots.Delete(context.WithoutCancel(ctx), tenant, session, taken.info.ID)
		if errors.Is(err, errMovedOn) {
			l.log.Info("sandbox deleted behind shellbox's back: its session moved on meanwhile", "tenant", tenant, "session", session, "id", sb.ID, "err", err)
			return
		}
		fail(fmt.Errorf("recording it suspended: %w", err))
		return
	}
	l.prune(ctx, tenant, session, taken.info.ID)
	// Done with it: its agent need not serve out the grace, and every
	// connection to it goes (another replica's next call finds it gone,
	// and resumes the session elsewhere).
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	_ = agentapi.ExitEndpoint(ectx, sb.Agent)
	ecancel()
	l.forgetConn(tenant, session)
	l.changed(tenant, session, stateSuspended, fmt.Sprintf("snapshotted at pod deletion: its sandbox %s was deleted by someone else (kubectl delete, an eviction, a drain); %s, %s before its grace ended; its next call resumes it from it",
		sb.ID, taken.summary(start), time.Until(until).Round(100*time.Millisecond)))
}

// reasonDeleted is the record's Reason of a snapshot at deletion.
const reasonDeleted = "snapshotted at pod deletion"

// fallback says what a session whose sandbox is lost without a snapshot
// at its end resumes from: its record's snapshot, and how old, or none.
func (l *Service) fallback(ctx context.Context, tenant, session string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, ok, err := l.readRecord(ctx, tenant, session)
	switch {
	case err != nil:
		return fmt.Sprintf("its record could not be read (%v)", err)
	case !ok || r.Snapshot == "":
		return "it has no snapshot: its next sandbox starts with an empty workspace"
	}
	at := r.snapshotTime()
	return fmt.Sprintf("its next sandbox resumes from its last snapshot, %s of %s (%s old)", r.Snapshot, at.Format(time.RFC3339), time.Since(at).Round(time.Second))
}

// snapshotTime is when the record's snapshot was taken.
func (r record) snapshotTime() time.Time {
	if r.Snapshotted.After(r.Suspended) {
		return r.Snapshotted
	}
	return r.Suspended
}

// taken is a snapshot of a running sandbox's workspace, stored.
type taken struct {
	info  snapshot.Info
	stats agentapi.WorkspaceStats
	// act is what ran in the sandbox once the stream ended.
	act  agentapi.Activity
	took time.Duration
}

// takeSnapshot streams sb's workspace into the store, without stopping
// anything that runs there.
func (l *Service) takeSnapshot(ctx context.Context, sb sandbox.Sandbox) (taken, error) {
	start := time.Now()
	c, err := agentapi.DialEndpoint(ctx, sb.Agent)
	if err != nil {
		return taken{}, err
	}
	defer c.Close()
	exp, err := c.ExportWorkspace(ctx, agentapi.WorkspaceLimits{})
	if err != nil {
		return taken{}, fmt.Errorf("streaming its workspace out: %w", err)
	}
	info, err := l.cfg.Snapshots.Put(ctx, sb.Tenant, sb.Session, exp)
	exp.Close()
	if err != nil {
		return taken{}, fmt.Errorf("storing its workspace: %w", err)
	}
	t := taken{info: info, stats: exp.Stats(), took: time.Since(start)}
	t.act, _ = c.Activity(ctx)
	return t, nil
}

// record is the session's record from t, taken of sb, over cur (ok: the
// session has one), state and reason for the caller to set.
func (t taken) record(sb sandbox.Sandbox, cur record, ok bool) record {
	r := cur
	if !ok {
		r = record{Created: sb.Created}
	}
	r.Snapshot, r.Size, r.Entries = t.info.ID, t.info.Size, t.stats.Entries
	r.Sandbox, r.SandboxCreated = sb.ID, sb.Created
	if sb.Settings != "" {
		var o server.SessionOptions
		if err := json.Unmarshal([]byte(sb.Settings), &o); err == nil {
			r.Settings = &o
		}
	}
	return r
}

// summary says what t holds, for an event.
func (t taken) summary(start time.Time) string {
	msg := fmt.Sprintf("snapshot %s: %d entries, %d bytes of files, %d bytes stored, in %s",
		t.info.ID, t.stats.Entries, t.stats.Bytes, t.info.Size, t.took.Round(time.Millisecond))
	if t.stats.Sockets+t.stats.Devices > 0 {
		msg += fmt.Sprintf("; left out %d socket(s) and %d device(s)", t.stats.Sockets, t.stats.Devices)
	}
	if busy := t.act.Busy(); busy != "" && t.act.Commands != 0 {
		msg += fmt.Sprintf("; taken while %s: files they wrote meanwhile may be in it or not", busy)
	}
	return msg
}

// errMovedOn: the session's record tells of another sandbox of it, newer
// than the one a snapshot or suspend was of (resumed elsewhere, suspended
// from another): that one's record is not to be overwritten.
var errMovedOn = errors.New("the session moved on meanwhile")

// movedOn says how cur, the session's record, tells of a sandbox of the
// session other than sb and newer than it, or "": one it is being resumed
// into, one it was resumed into after sb was made (another runtime
// sharing the store resumed it), or one it was suspended from after sb
// was made.
func movedOn(cur record, sb sandbox.Sandbox) string {
	same := func(id string, created time.Time) bool { return id == sb.ID && created.Equal(sb.Created) }
	if c := cur.Claim; c != nil && !same(c.Sandbox, c.SandboxCreated) &&
		((cur.State == stateResuming && time.Now().Before(c.Until)) || c.Since.After(sb.Created)) {
		return fmt.Sprintf("it was resumed elsewhere, by %s", c)
	}
	if cur.State == stateSuspended && cur.Sandbox != "" && !same(cur.Sandbox, cur.SandboxCreated) && cur.Suspended.After(sb.Created) {
		return fmt.Sprintf("it was suspended from another sandbox, %s, at %s", cur.Sandbox, cur.Suspended.Format(time.RFC3339))
	}
	return ""
}

// runningIn is putRecord's stale of a snapshot of sb, a running session's
// sandbox: its record must still say it runs there.
func runningIn(sb sandbox.Sandbox) func(cur record) string {
	return func(cur record) string {
		if cur.State != stateRunning {
			return "it is " + cur.State + " now"
		}
		return movedOn(cur, sb)
	}
}

// putRecordAttempts bounds putRecord's swaps.
const putRecordAttempts = 4

// putRecord writes r as the session's record by a swap from version (""
// for a session without one), so it never overwrites a record it did not
// read: on a conflict it reads the record again and swaps once more from
// there, unless stale says why that record is not to be overwritten
// (movedOn, say): then nothing is written and the error wraps errMovedOn.
func (l *Service) putRecord(ctx context.Context, tenant, session, version string, r record, stale func(cur record) string) error {
	for attempt := 0; ; attempt++ {
		_, err := l.swapRecord(ctx, tenant, session, version, r)
		if !errors.Is(err, snapshot.ErrConflict) || attempt+1 >= putRecordAttempts {
			return err
		}
		cur, v, ok, rerr := l.recordAt(ctx, tenant, session)
		if rerr != nil {
			return rerr
		}
		if ok {
			if why := stale(cur); why != "" {
				return fmt.Errorf("%w: %s", errMovedOn, why)
			}
		}
		version = v
	}
}

// snapshotTick is how often the leader looks for running sessions whose
// periodic snapshot is due.
var snapshotTick = 15 * time.Second

// snapshotEvery is a tenant's limits.snapshotEvery (0: none).
func (l *Service) snapshotEvery(tenant string) time.Duration {
	if l.cfg.Policies != nil {
		if p, err := l.cfg.Policies.Policy(tenant); err == nil {
			return p.SnapshotEvery
		}
	}
	return 0
}

// anySnapshotEvery says whether a tenant's policy sets limits.snapshotEvery.
func (l *Service) anySnapshotEvery() bool {
	if l.cfg.Policies == nil {
		return false
	}
	for _, tenant := range l.cfg.Policies.Tenants() {
		if l.snapshotEvery(tenant) > 0 {
			return true
		}
	}
	return false
}

// snapshotPeriodically takes the periodic snapshots due every
// snapshotTick until ctx ends (the leadership).
func (l *Service) snapshotPeriodically(ctx context.Context) {
	t := time.NewTicker(snapshotTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := l.snapshotDue(ctx, time.Now()); err != nil && ctx.Err() == nil {
			l.log.Warn("periodic snapshots", "err", err)
		}
	}
}

// snapshotDue snapshots, at now, the running sessions whose tenant sets
// limits.snapshotEvery, that were used since their last snapshot and
// whose last one is that old (a session this process has not seen: its
// record's), one at a time; it returns the sessions snapshotted. One with
// a foreground call in flight waits for a later look, unless its snapshot
// is due for a whole period more.
func (l *Service) snapshotDue(ctx context.Context, now time.Time) ([]string, error) {
	if !l.anySnapshotEvery() {
		return nil, nil // no list of the sandboxes for nothing
	}
	list, err := l.manager.List(ctx)
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, sb := range list {
		every := l.snapshotEvery(sb.Tenant)
		if every <= 0 || sb.State != sandbox.StateRunning || sandbox.IsPooled(sb.Session) || sb.Agent.Address == "" {
			continue
		}
		key := sb.Tenant + "/" + sb.Session
		l.keep.mu.Lock()
		last, seen := l.keep.last[key]
		waited := l.keep.waited[key]
		l.keep.mu.Unlock()
		if !seen {
			r, ok, err := l.readRecord(ctx, sb.Tenant, sb.Session)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok && r.Sandbox == sb.ID && r.SandboxCreated.Equal(sb.Created) {
				last = r.snapshotTime()
			} else {
				last = sb.Created // none of this sandbox: its first is due a period after it was made
			}
			l.keep.note(key, last)
		}
		if now.Sub(last) < every || !sb.LastUsed.After(last) {
			continue // not due, or nothing done since
		}
		ok, err := l.snapshotRunning(ctx, sb, now, waited.IsZero() || now.Sub(waited) < every)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		case ok:
			done = append(done, key)
		}
	}
	return done, errors.Join(errs...)
}

// note records the session's last snapshot (periodic snapshots).
func (k *keeper) note(key string, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last == nil {
		k.last, k.waited = map[string]time.Time{}, map[string]time.Time{}
	}
	k.last[key] = at
	delete(k.waited, key)
}

// snapshotRunning takes a periodic snapshot of sb, a running session's
// sandbox, and records the session running from it; with patient, a
// foreground call in flight puts it off (ok false) to a later look.
func (l *Service) snapshotRunning(ctx context.Context, sb sandbox.Sandbox, now time.Time, patient bool) (ok bool, _ error) {
	tenant, session := sb.Tenant, sb.Session
	key := tenant + "/" + session
	ctx, cancel := context.WithTimeout(ctx, sandbox.DefaultSuspendTimeout)
	defer cancel()
	release, err := l.keep.hold(ctx, key)
	if err != nil {
		return false, err
	}
	defer release()
	if patient {
		c, err := agentapi.DialEndpoint(ctx, sb.Agent)
		if err != nil {
			return false, err
		}
		act, err := c.Activity(ctx)
		c.Close()
		if err != nil {
			return false, err
		}
		if act.Calls > 0 {
			l.keep.mu.Lock()
			if l.keep.waited == nil {
				l.keep.waited = map[string]time.Time{}
			}
			if _, ok := l.keep.waited[key]; !ok {
				l.keep.waited[key] = now
			}
			l.keep.mu.Unlock()
			return false, nil
		}
	}
	cur, version, had, err := l.recordAt(ctx, tenant, session)
	if err != nil {
		return false, err
	}
	if had && (cur.State == stateSuspended || cur.State == stateResuming || movedOn(cur, sb) != "") {
		return false, nil // not this sandbox's to record
	}
	start := time.Now()
	t, err := l.takeSnapshot(ctx, sb)
	if err != nil {
		l.changed(tenant, session, eventSnapshotFailed, fmt.Sprintf("periodic snapshot of sandbox %s: %v; the session runs on, and %s", sb.ID, err,
			l.fallback(ctx, tenant, session)))
		return false, err
	}
	r := t.record(sb, cur, had)
	r.State, r.Snapshotted, r.Reason = stateRunning, t.info.Created, "periodic (limits.snapshotEvery)"
	if err := l.putRecord(ctx, tenant, session, version, r, runningIn(sb)); err != nil {
		_ = l.cfg.Snapshots.Delete(context.WithoutCancel(ctx), tenant, session, t.info.ID)
		if errors.Is(err, errMovedOn) {
			return false, nil
		}
		return false, fmt.Errorf("recording its snapshot: %w", err)
	}
	l.keep.note(key, now) // the looks' clock
	l.prune(ctx, tenant, session, t.info.ID)
	l.changed(tenant, session, eventSnapshotted, "periodic (limits.snapshotEvery), the session running on; "+t.summary(start))
	return true, nil
}

// lostSandbox says, for a running session's record r and sb, a new
// sandbox of the session, whether sb replaces a sandbox lost without a
// snapshot at its end, whose workspace died with it (a runtime with a
// DeletionWatcher): then the session resumes from r's snapshot, and why
// says what was lost.
func (l *Service) lostSandbox(r record, sb sandbox.Sandbox) (why string, lost bool) {
	if !l.loses || r.Snapshot == "" {
		return "", false
	}
	same := func(id string, created time.Time) bool { return id != "" && id == sb.ID && created.Equal(sb.Created) }
	if same(r.Sandbox, r.SandboxCreated) || (r.Claim != nil && same(r.Claim.Sandbox, r.Claim.SandboxCreated)) {
		return "", false
	}
	last := r.Sandbox
	if r.Claim != nil && r.Claim.Since.After(r.snapshotTime()) {
		last = r.Claim.Sandbox
	}
	return fmt.Sprintf("its sandbox %s was lost with no snapshot at its end (its node gone, or its grace too short)", last), true
}
