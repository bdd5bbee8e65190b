package session

// Memory suspends (issue 28, docs/checkpoint.md): a tenant whose policy
// says sandbox.suspend: memory has its sessions' sandboxes checkpointed
// whole where the runtime can (sandbox.Checkpointer: gVisor on
// containerd), so that their processes and background tasks go on after
// the resume, and bash_output reads their output across the gap (a task's
// output and cursor are the agent's memory, its spill files the host
// directory's, both in the image).
//
// Suspend (suspendMemory, from saveSandbox): the workspace is streamed to
// the store first, as for every suspend (it is what the restored sandbox's
// workspace is made of, and the fallback); then the runtime checkpoints
// the sandbox and its image goes into the store as a snapshot of its own,
// named by the record (record.Memory). The operator's suspend does not
// kill the background tasks: they are what the image keeps. Where no
// image can be taken (runc, Docker, a pod, a pooled sandbox, a host
// socket bound in /workspace: "Cannot save endpoint with bound host
// socket", any failure of the checkpoint) the suspend goes on as a files
// suspend, and its event says why.
//
// Resume (restoreSandbox, the Manager's Restore): the session's one new
// sandbox is made from the image, streamed from the store into the
// runtime's restore (which reads it whole, checked, before anything
// starts: a corrupt image is found before any sandbox exists), under this
// process's claim on the resume; the image holds the workspace as of its
// instant, which the runtime puts back, so the files snapshot is not
// read. Where the image cannot be restored, nothing is made: the Manager
// creates a fresh sandbox, and Resume (restore) streams the files
// snapshot into it, its event saying why the image was not restored.
//
// One sandbox, whatever happens: a session to be restored from its image
// is passed over by the warm pools (restorable, the Manager's
// Restorable: a pooled sandbox already runs a fresh process tree, and no
// image goes into it); any sandbox handed to Resume that was not made
// from the image gets the files snapshot and an event saying why
// (notFromImage), never a second sandbox from the image. The claim on a
// memory resume names its image and, once the runtime has made it and
// before it is probed, its sandbox: a server that stops during the
// resume leaves one sandbox its next start adopts and knows for the
// image's (imageSandbox). That start takes the dead claim over at once
// (predecessorsClaim), keeps the sandbox if its agent answers, and
// otherwise removes it and leaves the session suspended, for its next
// call to restore. A claim of this server's own whose sandbox is gone
// (the server stopped before the restore had one running) is taken over by
// the next cold creation at once (ownImageClaim), which restores the image.
//
// Limits, said in docs/checkpoint.md: the idle reaper does not suspend a
// session while its background tasks run (the server's watch of its tasks
// keeps it used), so only the operator's suspend takes tasks along; a
// session running in a warm pool's sandbox is suspended to files only
// ("the sandbox came from a warm pool").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/snapshot"
)

// memoryWanted says whether the tenant's policy asks for memory suspends.
func (l *Service) memoryWanted(tenant string) bool {
	if l.cfg.Policies == nil {
		return false
	}
	p, err := l.cfg.Policies.Policy(tenant)
	return err == nil && p.Suspend == policies.SuspendMemory
}

// checkpointer is the runtime's checkpoint ability, or why there is none.
func (l *Service) checkpointer(sb sandbox.Sandbox) (sandbox.Checkpointer, string) {
	cp, ok := l.cfg.Runtime.(sandbox.Checkpointer)
	switch {
	case sb.Runtime != sandbox.RuntimeRunsc:
		return nil, fmt.Sprintf("runtime %s: only gVisor (runsc) sandboxes are checkpointed", sb.Runtime)
	case !ok:
		return nil, "this backend cannot checkpoint a sandbox (only containerd with gVisor can)"
	case sb.PoolName != "":
		return nil, "the sandbox came from a warm pool"
	}
	return cp, ""
}

// suspendMemory checkpoints sb into the store after its files snapshot
// (files, the snapshot's id): it returns the image's snapshot id, or ""
// and why none was taken. sb is gone when an id is returned, running as
// it was otherwise.
func (l *Service) suspendMemory(ctx context.Context, sb sandbox.Sandbox) (id, why string) {
	cp, why := l.checkpointer(sb)
	if cp == nil {
		return "", why
	}
	start := time.Now()
	err := cp.Checkpoint(ctx, sb, func(ctx context.Context, image io.Reader) error {
		info, err := l.cfg.Snapshots.Put(ctx, sb.Tenant, sb.Session, image)
		id = info.ID
		return err
	})
	if err != nil {
		if id != "" {
			_ = l.cfg.Snapshots.Delete(context.WithoutCancel(ctx), sb.Tenant, sb.Session, id)
		}
		return "", err.Error()
	}
	l.log.Info("session checkpointed", "tenant", sb.Tenant, "session", sb.Session, "image", id,
		"took", time.Since(start).Round(time.Millisecond))
	return id, ""
}

// imageToRestore returns the session's record and its version when its
// sandbox is to be made from its memory image: a Checkpointer runtime, a
// gVisor spec, not a pooled sandbox, and a record suspended (or resuming
// under a stale claim) with an image, no snapshot chosen by an operator.
// take: the record noteRecord kept is taken (restoreSandbox acts on it),
// and noted again when the image is not to be restored, for Resume;
// otherwise it is only looked at (restorable), and a record read from the
// store is noted for the Restore or Resume that follows.
func (l *Service) imageToRestore(ctx context.Context, spec sandbox.Spec, take bool) (sandbox.Checkpointer, record, string, bool) {
	tenant, session := spec.Tenant, spec.Session
	cp, ok := l.cfg.Runtime.(sandbox.Checkpointer)
	if !ok || spec.Runtime != sandbox.RuntimeRunsc || sandbox.IsPooled(session) {
		return nil, record{}, "", false
	}
	r, version, ok := l.peekRecord(tenant, session, take)
	if !ok && !take && !l.memoryWanted(tenant) {
		// Not worth a store read on every pool claim: a tenant that
		// takes no images has none but from before a policy change,
		// and a pooled sandbox's files resume says why.
		return nil, record{}, "", false
	}
	if !ok {
		var err error
		if r, version, ok, err = l.recordAt(ctx, tenant, session); err != nil || !ok {
			return nil, record{}, "", false
		}
		if !take {
			l.noteRecord(tenant, session, r, version)
		}
	}
	l.mu.Lock()
	_, chosen := l.resumeFrom[tenant+"/"+session]
	l.mu.Unlock()
	stale := r.State == stateResuming && r.Claim != nil && (!time.Now().Before(r.Claim.Until) || l.ownImageClaim(r))
	if r.Memory == "" || chosen || (r.State != stateSuspended && !stale) {
		if take {
			l.noteRecord(tenant, session, r, version) // Resume's to act on
		}
		return nil, record{}, "", false
	}
	return cp, r, version, true
}

// restorable is sandbox.Config.Restorable: whether restoreSandbox is to
// make spec's sandbox from a memory image (the warm pool is then passed
// over). The Manager asks only where a pool of spec's template exists; it
// reads the record from the store only for a tenant whose policy takes
// memory images (noted for the Resume that reads it next).
func (l *Service) restorable(ctx context.Context, spec sandbox.Spec) bool {
	_, _, _, ok := l.imageToRestore(ctx, spec, false)
	return ok
}

// restoreSandbox is sandbox.Config.Restore: a suspended session with a
// memory image has its sandbox made from the image, straight from the
// store (the one sandbox of its resume), under this process's claim,
// and is recorded running in it. Where it cannot be (no image, another
// runtime, another server's claim, a corrupt image, a failed restore,
// an agent that does not answer) it makes nothing and returns false: the
// Manager makes a fresh sandbox and Resume restores the files snapshot
// into it; the record it hands Resume says why the image was not restored
// (record.memoryFailed), for the resumed event.
func (l *Service) restoreSandbox(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, bool) {
	tenant, session := spec.Tenant, spec.Session
	cp, r, version, ok := l.imageToRestore(ctx, spec, true)
	if !ok {
		return sandbox.Sandbox{}, false
	}
	h, _, err := l.claim(ctx, tenant, session, sandbox.Sandbox{}, r, version, r.Memory)
	if err != nil {
		return sandbox.Sandbox{}, false // Resume reads the record again
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	renewed := h.renewEvery(rctx, cancel)
	start := time.Now()
	sb, info, err := l.restoreImage(rctx, cp, spec, r.Memory, func(sb sandbox.Sandbox) error {
		// Named before the probe: a server stopping from here on leaves
		// a sandbox its next start knows for the image's.
		return h.swap(rctx, func(r *record) { r.Claim.Sandbox, r.Claim.SandboxCreated = sb.ID, sb.Created })
	})
	cancel(nil)
	<-renewed
	if cause := context.Cause(rctx); errors.Is(cause, errClaimTaken) {
		err = cause
	}
	if err == nil {
		if err = h.finish(ctx, r.Snapshot, sb); err != nil {
			err = fmt.Errorf("recording the session running: %w", err)
		}
	}
	if err != nil {
		if sb.ID != "" {
			_ = l.cfg.Runtime.Remove(context.WithoutCancel(ctx), sb.ID)
		}
		if errors.Is(err, errClaimTaken) {
			return sandbox.Sandbox{}, false // another server restores it
		}
		h.release(ctx)
		h.mu.Lock()
		r, version = h.r, h.version
		h.mu.Unlock()
		read := "failed to restore"
		if errors.Is(err, snapshot.ErrCorrupt) || errors.Is(err, sandbox.ErrInvalid) || errors.Is(err, errdefs.ErrNotFound) {
			read = "could not be read"
		}
		r.memoryFailed = fmt.Sprintf("; its memory image %s %s (%v): resumed from its files snapshot %s, its processes and background tasks lost",
			r.Memory, read, err, r.Snapshot)
		l.log.Warn("memory image not restored: a fresh sandbox and the files snapshot", "tenant", tenant, "session", session, "image", r.Memory, "err", err)
		l.noteRecord(tenant, session, r, version)
		return sandbox.Sandbox{}, false
	}
	l.changed(tenant, session, "resumed", fmt.Sprintf("its processes and background tasks restored from memory image %s of %s (%s ago%s), its workspace with them: %d bytes, in %s; files snapshot %s kept for a fallback",
		r.Memory, info.Created.Format(time.RFC3339), time.Since(info.Created).Round(time.Second), snapshotReason(r), info.Size,
		time.Since(start).Round(time.Millisecond), r.Snapshot))
	return sb, true
}

// restoreImage makes spec's sandbox from the memory image id, streamed
// from the store into the runtime (which reads it to its end, checked,
// before anything starts), has made name it, and probes its agent; on a
// failure after the restore, the sandbox is removed.
func (l *Service) restoreImage(ctx context.Context, cp sandbox.Checkpointer, spec sandbox.Spec, id string, made func(sandbox.Sandbox) error) (sandbox.Sandbox, snapshot.Info, error) {
	start := time.Now()
	rc, info, err := l.cfg.Snapshots.Get(ctx, spec.Tenant, spec.Session, id)
	if err != nil {
		return sandbox.Sandbox{}, info, err
	}
	defer rc.Close()
	sb, err := cp.Restore(ctx, spec, rc)
	if err != nil {
		return sandbox.Sandbox{}, info, err
	}
	restored := time.Now()
	if err = made(sb); err == nil {
		err = l.probe(ctx, sb, probeTimeout)
	}
	if err != nil {
		_ = l.cfg.Runtime.Remove(context.WithoutCancel(ctx), sb.ID)
		return sandbox.Sandbox{}, info, err
	}
	l.log.Info("sandbox restored from its memory image", "tenant", spec.Tenant, "session", spec.Session, "image", id, "bytes", info.Size,
		"restore", restored.Sub(start).Round(time.Millisecond), "probe", time.Since(restored).Round(time.Millisecond))
	return sb, info, nil
}

// predecessorsClaim says whether r's claim, live still, is a memory
// resume's that made sb, a sandbox this server's start adopted: the claim
// is then its previous run's, which stopped (a live process's sandbox
// being made is never adopted), and is taken over at once. Only memory
// claims are: they exist on single-host runtimes alone, where no replica
// shares the runtime's sandboxes; a files claim naming an adopted pod may
// be a live replica's (Kubernetes), and is waited for.
func (l *Service) predecessorsClaim(r record, sb sandbox.Sandbox) bool {
	c := r.Claim
	return c.Image != "" && c.Image == r.Memory && c.SandboxOwner == l.cfg.Owner && sb.Owner == l.cfg.Owner && madeUnder(c, sb, true)
}

// ownImageClaim says whether r's claim is a memory resume's made on this
// server's runtime (its owner's), asked while the Manager makes the
// session a sandbox cold: it has none, so the claim's restore is over (its
// server stopped before the restore had a running sandbox, which a start
// removes; or this process's restore ended and the claim's end was not
// written), and is taken over at once rather than at its Until. Two live
// servers never share an owner on one runtime.
func (l *Service) ownImageClaim(r record) bool {
	return r.Claim.Image != "" && r.Claim.Image == r.Memory && r.Claim.SandboxOwner == l.cfg.Owner
}

// madeUnder says whether sb is the sandbox claim c made: the one it names,
// or, where it names none yet (its server stopped during the restore),
// for an adopted sandbox, one made since the claim.
func madeUnder(c *claim, sb sandbox.Sandbox, adopted bool) bool {
	if c.Sandbox != "" {
		return c.Sandbox == sb.ID && c.SandboxCreated.Equal(sb.Created)
	}
	return adopted && !sb.Created.Before(c.Since)
}

// imageSandbox says whether sb, which the claim stale (taken over) was
// restoring r's memory image into, is the image's: that claim named it, or
// named none and sb was adopted and made since it.
func (l *Service) imageSandbox(r record, stale *claim, sb sandbox.Sandbox, adopted bool) bool {
	return stale != nil && stale.Image != "" && stale.Image == r.Memory && stale.SandboxOwner == l.cfg.Owner &&
		sb.Owner == l.cfg.Owner && madeUnder(stale, sb, adopted)
}

// adoptedProbeTimeout bounds the wait for the agent of a sandbox a
// stopped server was restoring: it answers at once if the restore
// finished, never if it did not (its agent was not told to listen again).
const adoptedProbeTimeout = 5 * time.Second

// errImageSandboxSilent: a sandbox made from a memory image by a server
// that stopped does not answer; it is removed (reconcile), and the next
// call restores the session again.
var errImageSandboxSilent = errors.New("its sandbox, being restored from its memory image when its server stopped, does not answer")

// keepImageSandbox keeps sb, made from r's memory image under the dead
// claim stale, as the session's sandbox once its agent answers, and says
// so for the resumed event; errImageSandboxSilent otherwise.
func (l *Service) keepImageSandbox(ctx context.Context, sb sandbox.Sandbox, r record, stale *claim) (string, error) {
	if err := l.probe(ctx, sb, adoptedProbeTimeout); err != nil {
		return "", fmt.Errorf("%w (sandbox %s, memory image %s, the claim of %s): %w", errImageSandboxSilent, sb.ID, r.Memory, stale, err)
	}
	return fmt.Sprintf("its processes and background tasks restored from memory image %s by %s, whose server stopped before recording it: sandbox %s adopted, answering; files snapshot %s kept for a fallback",
		r.Memory, stale, sb.ID, r.Snapshot), nil
}

// notFromImage says why sb, handed to Resume for a session with a memory
// image, was not made from it.
func (l *Service) notFromImage(sb sandbox.Sandbox, adopted bool) string {
	switch _, why := l.checkpointer(sb); {
	case why != "":
		return why
	case adopted:
		return fmt.Sprintf("sandbox %s, adopted after a server restart, was made for a files resume, not from the image", sb.ID)
	}
	return fmt.Sprintf("sandbox %s was made before the image could go into it: another server held the resume when this one looked", sb.ID)
}

// probeTimeout bounds the wait for a restored sandbox's agent: a restore
// that succeeded is no proof that it runs.
const probeTimeout = 30 * time.Second

// probe waits, at most within, until sb's agent answers its hello.
func (l *Service) probe(ctx context.Context, sb sandbox.Sandbox, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		c, err := agentapi.DialEndpoint(ctx, sb.Agent)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("its agent does not answer: %w", errors.Join(err, ctx.Err()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// filesOnlyKey marks the context of a suspend that is to take a files
// snapshot only, with why no memory image was taken.
type filesOnlyKey struct{}

func filesOnly(ctx context.Context, why string) context.Context {
	return context.WithValue(ctx, filesOnlyKey{}, why)
}

// memoryMode says whether sb's suspend is to take a memory image, and, if
// its policy asks for one and it is not to, why.
func (l *Service) memoryMode(ctx context.Context, sb sandbox.Sandbox) (bool, string) {
	if !l.memoryWanted(sb.Tenant) {
		return false, ""
	}
	if why, ok := ctx.Value(filesOnlyKey{}).(string); ok {
		return false, why
	}
	if _, why := l.checkpointer(sb); why != "" {
		return false, why
	}
	return true, ""
}

// memoryNote is what a suspended event says of memory: the image taken,
// or why none was.
func memoryNote(id, why string) string {
	switch {
	case id != "":
		return "; its processes and background tasks kept in memory image " + id
	case why != "":
		return "; no memory image (" + why + "): files only, its processes and background tasks end"
	}
	return ""
}
