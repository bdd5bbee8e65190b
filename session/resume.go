package session

// Resuming a suspended session, once, whatever the number of servers.
//
// Every server sharing the snapshot store may be handed a new sandbox for
// the same suspended session at the same moment (Kubernetes replicas
// serving its calls; a replica taking over the pod another is restoring),
// and both would read the record "suspended" and restore into their
// sandbox. So a resume first claims the session: it swaps the record from
// the version it read (suspended) to "resuming, by this process, into this
// sandbox, until T" (snapshot.Store.SwapRecord; exactly one swap from a
// version wins, in every process). Only the winner restores; it renews
// its claim while it restores, and ends it by swapping the record to
// running, or back to suspended when the restore fails.
//
// A loser waits (looking again after claimPoll, less often after that,
// until its context ends) for the winner's outcome:
//   - running, in the loser's own sandbox (replicas sharing one pod): the
//     sandbox is restored, and the loser's call runs in it;
//   - running in another sandbox (servers on runtimes of their own, sharing
//     an S3 store): the loser fails with ErrUnavailable, naming the process
//     and sandbox the session runs in; its new sandbox is removed, and the
//     call, sent again to that server, runs there;
//   - suspended again (the winner's restore failed): it claims the session
//     itself and tries the restore, which reports its own error.
//
// A claim not renewed by its Until (the process died mid-restore, or lost
// the store for longer than claimTTL) is stale: the next resume swaps it
// for its own and restores from the start (a restore replaces the whole
// workspace, so one cut short leaves nothing behind). A holder whose final
// swap finds its claim taken over fails, and its sandbox is removed. Until
// is compared with the reader's clock: servers' clocks must agree to well
// within claimTTL.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/snapshot"
)

// claim is a process's claim on a session's resume (record.Claim).
type claim struct {
	// Owner names the process for people (host name and pid); Token is
	// the claim's own, random, so two claims' records never read equal.
	Owner string `json:"owner"`
	Token string `json:"token"`
	// Sandbox is where the session is restored (and, once running, runs).
	Sandbox string `json:"sandbox"`
	// SandboxOwner is the Owner of the servers whose runtime holds
	// Sandbox (sandbox.Config.Owner): a server finding the claim's
	// sandbox among its own after a restart knows its predecessor made it.
	SandboxOwner string `json:"sandboxOwner,omitempty"`
	// Image, for a memory resume (restoreSandbox), is the memory image the
	// claim restores from. Its sandbox is made by the restore, and named
	// (Sandbox) as soon as the runtime returns it, before its agent is
	// probed: a server that stops meanwhile leaves a sandbox its next
	// start knows for the image's (imageSandbox).
	Image          string    `json:"image,omitempty"`
	SandboxCreated time.Time `json:"sandboxCreated,omitzero"`
	Since          time.Time `json:"since"`
	// Until: a claim not renewed by then is stale.
	Until time.Time `json:"until"`
}

func (c *claim) String() string {
	if c.Sandbox == "" {
		return fmt.Sprintf("%s (from memory image %s, since %s)", c.Owner, c.Image, c.Since.Format(time.RFC3339))
	}
	return fmt.Sprintf("%s (into sandbox %s, since %s)", c.Owner, c.Sandbox, c.Since.Format(time.RFC3339))
}

// DefaultClaimTTL is how long a resume's claim holds unrenewed: the bound
// on how long a session waits when the process resuming it died. The
// holder renews it every third of that.
const DefaultClaimTTL = time.Minute

// claimPoll is how soon a loser looks at the record again; each look
// doubles it, up to claimPollMax.
const (
	claimPoll    = 100 * time.Millisecond
	claimPollMax = 2 * time.Second
)

// processName names this process in claims: host name (a pod's name on
// Kubernetes) and pid.
func processName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errClaimLost: another process swapped the record first.
var errClaimLost = errors.New("another server claimed the session's resume first")

// resumeSandbox is sandbox.Config.Resume: a suspended session's newest
// snapshot (or the one ResumeSession chose) is restored into sb, its new
// sandbox, by this process alone (the claim above), and the session
// recorded running.
func (l *Service) resumeSandbox(ctx context.Context, sb sandbox.Sandbox) error {
	return l.resume(ctx, sb, false)
}

// resume is resumeSandbox; adopted says that sb is one this server's
// start adopted (reconcile): made by its previous run, so a memory
// resume's claim (Image) that made it is that run's, dead, and is taken
// over at once rather than at its Until (predecessorsClaim).
func (l *Service) resume(ctx context.Context, sb sandbox.Sandbox, adopted bool) error {
	tenant, session := sb.Tenant, sb.Session
	if sandbox.IsPooled(session) {
		return nil
	}
	lost := false
	r, version, ok := l.takeRecord(tenant, session)
	for wait := claimPoll; ; wait = min(2*wait, claimPollMax) {
		if !ok {
			var err error
			r, version, ok, err = l.recordAt(ctx, tenant, session)
			if err != nil {
				return fmt.Errorf("session %s: cannot tell whether it was suspended: %w", session, err)
			}
			if !ok {
				return nil
			}
		}
		ok = false // each look after this one reads the record
		switch {
		case r.State == stateRunning && lost:
			return resumedElsewhere(session, r, sb)
		case r.State == stateResuming && r.Claim != nil && time.Now().Before(r.Claim.Until) &&
			!(adopted && l.predecessorsClaim(r, sb)):
			lost = true
			select {
			case <-ctx.Done():
				return errdefs.Errorf(errdefs.ErrUnavailable, "session %s is being resumed by %s, and was not running when this call's time ran out: %w",
					session, r.Claim, ctx.Err())
			case <-time.After(wait):
			}
			continue
		case r.State == stateRunning:
			why, gone := l.lostSandbox(r, sb)
			if !gone {
				return nil // running: nothing to restore
			}
			// Its sandbox died with its workspace and no snapshot at
			// its end: it resumes from its last one.
			r.lost = why
		case r.State != stateSuspended && r.State != stateResuming:
			return nil
		}
		// Suspended, or a stale claim's: this process claims it.
		err := l.claimAndRestore(ctx, sb, r, version, adopted)
		if !errors.Is(err, errClaimLost) {
			return err
		}
		lost = true
	}
}

// recentRecord is a suspended session's record as settings read it, and
// its version.
type recentRecord struct {
	r       record
	version string
	at      time.Time
}

// recentFor bounds how long a record settings read is offered to the
// session's Resume.
const recentFor = time.Minute

// noteRecord keeps the record settings read for a session about to get a
// sandbox, for its Resume (takeRecord) to start from instead of reading it
// again. Only a suspended or resuming record is kept: whatever Resume does
// from one is a claim (SwapRecord from its version, which a stale copy
// loses) or a wait that reads again, so a copy that went stale costs a
// read, never a restore skipped. A running record, or none, is not kept:
// acting on a stale one would skip a restore the session needs.
func (l *Service) noteRecord(tenant, session string, r record, version string) {
	if r.State != stateSuspended && r.State != stateResuming {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.recent == nil {
		l.recent = map[string]recentRecord{}
	}
	for k, e := range l.recent {
		if now.Sub(e.at) > recentFor {
			delete(l.recent, k) // its sandbox was never made
		}
	}
	l.recent[tenant+"/"+session] = recentRecord{r: r, version: version, at: now}
}

// takeRecord returns, once, the record noteRecord kept for the session, if
// it is recent.
func (l *Service) takeRecord(tenant, session string) (record, string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.recent[tenant+"/"+session]
	delete(l.recent, tenant+"/"+session)
	if !ok || time.Since(e.at) > recentFor {
		return record{}, "", false
	}
	return e.r, e.version, true
}

// peekRecord is takeRecord, or, take false, the same look that leaves
// the record kept.
func (l *Service) peekRecord(tenant, session string, take bool) (record, string, bool) {
	if take {
		return l.takeRecord(tenant, session)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.recent[tenant+"/"+session]
	if !ok || time.Since(e.at) > recentFor {
		return record{}, "", false
	}
	return e.r, e.version, true
}

// resumedElsewhere is what a loser does with a session the winner resumed:
// its own sandbox restored, it runs there; in another, it fails.
func resumedElsewhere(session string, r record, sb sandbox.Sandbox) error {
	if r.Claim == nil || (r.Claim.Sandbox == sb.ID && r.Claim.SandboxCreated.Equal(sb.Created)) {
		return nil
	}
	return errdefs.Errorf(errdefs.ErrUnavailable,
		"session %s was resumed meanwhile by %s and runs in that sandbox, not in this server's (%s, removed): send the call to that server",
		session, r.Claim, sb.ID)
}

// claimAndRestore claims the session's resume from the record r at
// version, then restores into sb (restore). errClaimLost when another
// process claimed first.
func (l *Service) claimAndRestore(ctx context.Context, sb sandbox.Sandbox, r record, version string, adopted bool) error {
	tenant, session := sb.Tenant, sb.Session
	h, stale, err := l.claim(ctx, tenant, session, sb, r, version, "")
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	renewed := h.renewEvery(rctx, cancel)
	id, msg, err := l.restore(rctx, sb, r, stale, adopted)
	cancel(nil)
	<-renewed
	if cause := context.Cause(rctx); errors.Is(cause, errClaimTaken) {
		err = cause
	}
	if err != nil {
		if !errors.Is(err, errClaimTaken) {
			h.release(ctx)
		}
		err = fmt.Errorf("session %s: resuming from snapshot %s: %w", session, id, err)
		l.changed(tenant, session, "resume-failed", err.Error())
		return err
	}
	if err := h.finish(ctx, id, sb); err != nil {
		err = fmt.Errorf("session %s: recording it running: %w", session, err)
		l.changed(tenant, session, "resume-failed", err.Error())
		return err
	}
	l.changed(tenant, session, "resumed", msg)
	return nil
}

// claim claims the session's resume from the record r at version, into
// sb (zero: a sandbox not made yet, named once made), restoring from the
// memory image image (""; a files snapshot), and returns the claim held
// and the stale claim it took over, if any. errClaimLost when another
// process claimed first.
func (l *Service) claim(ctx context.Context, tenant, session string, sb sandbox.Sandbox, r record, version, image string) (*heldClaim, *claim, error) {
	now := time.Now().UTC()
	stale := r.Claim // a stale claim this one takes over, if any
	if r.State != stateResuming {
		stale = nil
	}
	r.State = stateResuming
	r.Claim = &claim{Owner: l.process, Token: newToken(), Sandbox: sb.ID, SandboxCreated: sb.Created,
		SandboxOwner: l.cfg.Owner, Image: image, Since: now, Until: now.Add(l.claimTTL)}
	v, err := l.swapRecord(ctx, tenant, session, version, r)
	if errors.Is(err, snapshot.ErrConflict) {
		return nil, nil, errClaimLost
	}
	if err != nil {
		return nil, nil, fmt.Errorf("session %s: claiming its resume: %w", session, err)
	}
	if stale != nil {
		l.log.Warn("a stale resume claim taken over", "tenant", tenant, "session", session,
			"claim", stale.String(), "until", stale.Until)
	}
	return &heldClaim{l: l, tenant: tenant, session: session, r: r, version: v}, stale, nil
}

// recordWriteTimeout bounds the writes that end a claim, which run under
// contexts of their own.
const recordWriteTimeout = 30 * time.Second

// errClaimTaken: the claim went stale under its holder and another process
// took it over.
var errClaimTaken = errors.New("this server's claim on the resume went stale and another server took it over")

// heldClaim is the claim a restore holds: the record as this process last
// wrote it, and its version.
type heldClaim struct {
	l               *Service
	tenant, session string

	mu      sync.Mutex
	r       record
	version string
}

// swap writes the held record changed by change, from the held version.
func (h *heldClaim) swap(ctx context.Context, change func(*record)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.r
	c := *r.Claim
	r.Claim = &c
	change(&r)
	v, err := h.l.swapRecord(ctx, h.tenant, h.session, h.version, r)
	if errors.Is(err, snapshot.ErrConflict) {
		return fmt.Errorf("%w: %w", errClaimTaken, err)
	}
	if err != nil {
		return err
	}
	h.r, h.version = r, v
	return nil
}

// renewEvery moves the claim's Until forward every third of claimTTL
// until ctx ends; if the claim was taken over, it cancels with
// errClaimTaken. The channel is closed when it has returned.
func (h *heldClaim) renewEvery(ctx context.Context, cancel context.CancelCauseFunc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(h.l.claimTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := h.swap(ctx, func(r *record) { r.Claim.Until = time.Now().UTC().Add(h.l.claimTTL) })
			if errors.Is(err, errClaimTaken) {
				cancel(err)
				return
			}
			if err != nil && ctx.Err() == nil {
				// The store may answer the next renewal: the claim holds
				// until Until whatever this one did.
				h.l.log.Warn("renewing a resume's claim", "tenant", h.tenant, "session", h.session, "err", err)
			}
		}
	}()
	return done
}

// finish records the session running in sb, restored from snapshot id,
// under a context of its own: the restore is done, and a caller gone
// meanwhile must not leave the claim to go stale.
func (h *heldClaim) finish(ctx context.Context, id string, sb sandbox.Sandbox) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordWriteTimeout)
	defer cancel()
	return h.swap(ctx, func(r *record) {
		r.State, r.Resumed, r.Snapshot = stateRunning, time.Now().UTC(), id
		r.Claim.Sandbox, r.Claim.SandboxCreated = sb.ID, sb.Created
	})
}

// release puts the session back to suspended after a failed restore, so
// the next resume need not wait for the claim to go stale; if it cannot,
// the claim goes stale at its Until.
func (h *heldClaim) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordWriteTimeout)
	defer cancel()
	err := h.swap(ctx, func(r *record) { r.State = stateSuspended })
	if err != nil {
		h.l.log.Warn("releasing a failed resume's claim; it goes stale at its end", "tenant", h.tenant, "session", h.session,
			"until", h.r.Claim.Until, "err", err)
	}
}

// restore streams the claimed session's snapshot into sb (r is its
// record as claimed) and returns the snapshot's id and what the resumed
// event says. A sandbox that is the very one the snapshot was taken of
// (never removed) is kept as it is, not rolled back; one a dead process's
// memory resume made from the image (stale, adopted: imageSandbox) is
// kept as the image's, once its agent answers.
func (l *Service) restore(ctx context.Context, sb sandbox.Sandbox, r record, stale *claim, adopted bool) (id, msg string, _ error) {
	tenant, session := sb.Tenant, sb.Session
	id = r.Snapshot
	l.mu.Lock()
	// An operator's choice serves one resume, whatever its outcome.
	if chosen, ok := l.resumeFrom[tenant+"/"+session]; ok {
		id = chosen
		delete(l.resumeFrom, tenant+"/"+session)
	}
	l.mu.Unlock()
	var after string
	if stale != nil {
		after = fmt.Sprintf("; after a stale claim of %s, not renewed since %s", stale, stale.Until.Format(time.RFC3339))
	}
	if r.Sandbox != "" && sb.ID == r.Sandbox && sb.Created.Equal(r.SandboxCreated) {
		// The very sandbox that was snapshotted runs on (its removal
		// failed, or a process died between the record and the
		// removal): its workspace is the newest.
		return r.Snapshot, fmt.Sprintf("its sandbox %s was never removed: kept as it is, snapshot %s not restored%s", sb.ID, id, after), nil
	}
	memory := id == r.Snapshot && r.Memory != "" && r.memoryFailed == ""
	if memory && l.imageSandbox(r, stale, sb, adopted) {
		msg, err := l.keepImageSandbox(ctx, sb, r, stale)
		return id, msg, err
	}
	start := time.Now()
	rc, info, err := l.cfg.Snapshots.Get(ctx, tenant, session, id)
	if err != nil {
		return id, "", l.offerPrevious(ctx, tenant, session, id, err)
	}
	defer rc.Close()
	c, err := agentapi.DialEndpoint(ctx, sb.Agent)
	if err != nil {
		return id, "", err
	}
	defer c.Close()
	st, err := c.ImportWorkspace(ctx, rc, agentapi.WorkspaceLimits{})
	if err != nil {
		// The store's verifier ends a stream that fails its check with
		// ErrCorrupt; the agent reports the cut stream as invalid.
		if _, verr := rc.Read(make([]byte, 1)); errors.Is(verr, snapshot.ErrCorrupt) {
			err = fmt.Errorf("%w (%w)", verr, err)
		}
		return id, "", l.offerPrevious(ctx, tenant, session, id, err)
	}
	switch {
	case id != r.Snapshot || r.Memory == "":
	case r.memoryFailed != "":
		after += r.memoryFailed // restoreSandbox tried the image
	default:
		// A sandbox made before the image could go into it: the files
		// snapshot, and why (never a second sandbox from the image).
		after += fmt.Sprintf("; its memory image %s not restored (%s): resumed from its files snapshot %s, its processes and background tasks lost",
			r.Memory, l.notFromImage(sb, adopted), r.Snapshot)
	}
	var lost string
	if r.lost != "" {
		lost = r.lost + "; resumed from its last snapshot, "
	}
	return id, fmt.Sprintf("%sfrom snapshot %s of %s (%s ago%s): %d entries, %d bytes, in %s%s",
		lost, id, info.Created.Format(time.RFC3339), time.Since(info.Created).Round(time.Second), snapshotReason(r), st.Entries, st.Bytes,
		time.Since(start).Round(time.Millisecond), after), nil
}

// snapshotReason says why the record's snapshot was taken, for the
// resumed event: ", snapshotted at pod deletion", or "".
func snapshotReason(r record) string {
	if r.Reason == "" {
		return ""
	}
	return ", " + r.Reason
}

// offerPrevious adds to err, a resume from snapshot id that failed, the
// snapshot before it, if there is one.
func (l *Service) offerPrevious(ctx context.Context, tenant, session, id string, err error) error {
	if !errors.Is(err, snapshot.ErrCorrupt) && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	infos, lerr := l.cfg.Snapshots.List(ctx, tenant, session)
	if lerr != nil {
		return err
	}
	// List is newest first: the one before id is the entry after it.
	for i, info := range infos {
		if i > 0 && infos[i-1].ID == id {
			return fmt.Errorf("%w; the session stays suspended: resume it from the snapshot before, %s of %s (shellbox sessions resume %s --snapshot %s), or delete it",
				err, info.ID, info.Created.Format(time.RFC3339), session, info.ID)
		}
	}
	return fmt.Errorf("%w; the session stays suspended, and has no earlier snapshot", err)
}
