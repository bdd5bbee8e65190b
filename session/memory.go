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
// snapshot into it, its event saying why the image was not restored. A
// sandbox made before its restore (one a server start adopted, a pooled
// one) takes the older way (resumeMemory): the files snapshot, then the
// sandbox replaced by one restored from the image.
//
// Limits, said in docs/checkpoint.md: the idle reaper does not suspend a
// session while its background tasks run (the server's watch of its tasks
// keeps it used), so only the operator's suspend takes tasks along; a
// session given a warm pool's sandbox at its resume is not restored from
// its image ("the sandbox came from a warm pool").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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

// memoryImageFile reads the image id of (tenant, session) whole from the
// store into a temporary file, checked (the store's reader ends with
// ErrCorrupt on a bad image), and returns it open at its start; the
// caller closes and removes it.
func (l *Service) memoryImageFile(ctx context.Context, tenant, session, id string) (*os.File, error) {
	rc, _, err := l.cfg.Snapshots.Get(ctx, tenant, session, id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	f, err := os.CreateTemp("", "shellbox-image-")
	if err != nil {
		return nil, err
	}
	if _, err = io.Copy(f, rc); err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
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
	cp, ok := l.cfg.Runtime.(sandbox.Checkpointer)
	if !ok || spec.Runtime != sandbox.RuntimeRunsc || sandbox.IsPooled(session) {
		return sandbox.Sandbox{}, false
	}
	r, version, ok := l.takeRecord(tenant, session)
	if !ok {
		var err error
		if r, version, ok, err = l.recordAt(ctx, tenant, session); err != nil || !ok {
			return sandbox.Sandbox{}, false
		}
	}
	l.mu.Lock()
	_, chosen := l.resumeFrom[tenant+"/"+session]
	l.mu.Unlock()
	stale := r.State == stateResuming && r.Claim != nil && !time.Now().Before(r.Claim.Until)
	if r.Memory == "" || chosen || (r.State != stateSuspended && !stale) {
		l.noteRecord(tenant, session, r, version) // Resume's to act on
		return sandbox.Sandbox{}, false
	}
	h, _, err := l.claim(ctx, tenant, session, sandbox.Sandbox{}, r, version)
	if err != nil {
		return sandbox.Sandbox{}, false // Resume reads the record again
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	renewed := h.renewEvery(rctx, cancel)
	start := time.Now()
	sb, info, err := l.restoreImage(rctx, cp, spec, r.Memory)
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
// before anything starts), and probes its agent; on a failure after the
// restore, the sandbox is removed.
func (l *Service) restoreImage(ctx context.Context, cp sandbox.Checkpointer, spec sandbox.Spec, id string) (sandbox.Sandbox, snapshot.Info, error) {
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
	if err := l.probe(ctx, sb); err != nil {
		_ = l.cfg.Runtime.Remove(context.WithoutCancel(ctx), sb.ID)
		return sandbox.Sandbox{}, info, err
	}
	l.log.Info("sandbox restored from its memory image", "tenant", spec.Tenant, "session", spec.Session, "image", id, "bytes", info.Size,
		"restore", restored.Sub(start).Round(time.Millisecond), "probe", time.Since(restored).Round(time.Millisecond))
	return sb, info, nil
}

// resumeMemory restores the session of sb (a new sandbox, its workspace
// restored from r's files snapshot) from r's memory image, and returns
// what the resumed event adds. It does not fail the resume: what went
// wrong is said, and the session runs on its files.
func (l *Service) resumeMemory(ctx context.Context, sb sandbox.Sandbox, r record) string {
	tenant, session := sb.Tenant, sb.Session
	cp, why := l.checkpointer(sb)
	if cp == nil {
		return fmt.Sprintf("; its memory image %s not restored (%s): resumed from its files, its processes and background tasks lost", r.Memory, why)
	}
	start := time.Now()
	f, err := l.memoryImageFile(ctx, tenant, session, r.Memory)
	if err != nil {
		return fmt.Sprintf("; its memory image %s could not be read (%v): resumed from its files snapshot %s, its processes and background tasks lost", r.Memory, err, r.Snapshot)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	o, err := l.settings(ctx, tenant, session)
	var spec sandbox.Spec
	if err == nil {
		spec, err = l.specWith(ctx, tenant, session, o)
	}
	if err != nil {
		return fmt.Sprintf("; its memory image %s not restored (its spec: %v): resumed from its files, its processes and background tasks lost", r.Memory, err)
	}
	spec.Owner = l.cfg.Owner
	rt := l.cfg.Runtime
	if err := rt.Remove(ctx, sb.ID); err != nil {
		return fmt.Sprintf("; its memory image %s not restored (removing the new sandbox: %v): resumed from its files, its processes and background tasks lost", r.Memory, err)
	}
	rsb, err := cp.Restore(ctx, spec, f)
	if err == nil {
		err = l.probe(ctx, rsb)
	}
	if err != nil {
		// The workspace is in place (SessionState): a fresh sandbox
		// finds it.
		_ = rt.Remove(context.WithoutCancel(ctx), sb.ID)
		if _, cerr := rt.Create(ctx, spec); cerr != nil {
			return fmt.Sprintf("; its memory image %s failed to restore (%v), and a new sandbox could not be made either (%v)", r.Memory, err, cerr)
		}
		if perr := l.probe(ctx, sb); perr != nil {
			return fmt.Sprintf("; its memory image %s failed to restore (%v), and the new sandbox does not answer (%v)", r.Memory, err, perr)
		}
		return fmt.Sprintf("; its memory image %s failed to restore (%v): resumed from its files snapshot %s, its processes and background tasks lost", r.Memory, err, r.Snapshot)
	}
	return fmt.Sprintf("; its processes and background tasks restored from memory image %s in %s", r.Memory, time.Since(start).Round(time.Millisecond))
}

// probeTimeout bounds the wait for a restored sandbox's agent: a restore
// that succeeded is no proof that it runs.
const probeTimeout = 30 * time.Second

// probe waits until sb's agent answers its hello.
func (l *Service) probe(ctx context.Context, sb sandbox.Sandbox) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
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
