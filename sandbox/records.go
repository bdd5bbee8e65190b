package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// DefaultUseRecordEvery is Config.UseRecordEvery's default.
const DefaultUseRecordEvery = 30 * time.Second

// UseRecorder is a Runtime that keeps each sandbox's last use with the
// sandbox (Kubernetes: a pod annotation), so that every server process
// sharing the sandboxes (a release's replicas) judges idleness by the uses
// of all of them: the reaper, in the one process that leads, sees sessions
// served only by the others. Its Get and List fill Sandbox.LastUsed from
// the record (zero: never recorded).
type UseRecorder interface {
	RecordUse(ctx context.Context, sb Sandbox, at time.Time) error
}

// Unwrapper is a Runtime that wraps another (to observe it) and passes
// its optional abilities through: AsUseRecorder looks behind it.
type Unwrapper interface {
	Unwrap() Runtime
}

// AsUseRecorder returns rt, or the runtime rt wraps (Unwrapper, at any
// depth), as a UseRecorder.
func AsUseRecorder(rt Runtime) (UseRecorder, bool) {
	for rt != nil {
		if r, ok := rt.(UseRecorder); ok {
			return r, true
		}
		u, ok := rt.(Unwrapper)
		if !ok {
			return nil, false
		}
		rt = u.Unwrap()
	}
	return nil, false
}

// maxRecording bounds the use records being written at once; a use that
// finds no slot is recorded with the session's next one.
const maxRecording = 8

// useRecords writes the uses of sandboxes to a UseRecorder, in the
// background: a warm call never waits for it. It has no lock of its own:
// slots is a semaphore, and the entry.recorded it reads and writes is the
// lifecycle's, under lifecycle.mu, which its caller holds.
type useRecords struct {
	recorder UseRecorder
	every    time.Duration
	slots    chan struct{} // a slot per use record being written
	logger   *slog.Logger
}

func newUseRecords(cfg Config) *useRecords {
	r, ok := AsUseRecorder(cfg.Runtime)
	if !ok {
		return nil
	}
	return &useRecords{recorder: r, every: cfg.UseRecordEvery, slots: make(chan struct{}, maxRecording), logger: cfg.Logger}
}

// note records e's use at now if its last record is UseRecordEvery old
// and a slot is free; lifecycle.mu is held.
func (u *useRecords) note(e *entry, now time.Time) {
	if now.Sub(e.recorded) < u.every {
		return
	}
	select {
	case u.slots <- struct{}{}:
	default:
		return // every slot busy: the next use records
	}
	e.recorded = now
	sb := e.sb
	go func() {
		defer func() { <-u.slots }()
		// Its own bounded lifetime: the call that used the sandbox may
		// end before the record is written.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := u.recorder.RecordUse(ctx, sb, now); err != nil && !errors.Is(err, ErrNotFound) {
			u.logger.Warn("recording a sandbox's use", "tenant", sb.Tenant, "session", sb.Session, "id", sb.ID, "err", err)
		}
	}()
}
