package sandbox

import (
	"context"
	"errors"
	"io"
)

// Checkpointer is an optional Runtime ability: saving a running sandbox
// whole (memory, processes, open files, sockets inside it) as an image,
// and making a new sandbox of the same session from one, whose processes
// go on where they were. Only gVisor does it (runsc checkpoint/restore);
// sandbox/containerd implements it for runsc sandboxes when configured to
// (docs/checkpoint.md). The session layer's suspend takes such a "memory"
// snapshot where it can and falls back to a files snapshot of the
// workspace where it cannot (ErrNoCheckpoint, or any other error).
//
// An image holds the sandbox whole as of one instant: its memory, what the
// runtime keeps for it (spill files) and the session's workspace as the
// frozen sandbox left it (files open in it are opened again, by path, at
// the restore, and must be as the processes left them), so that a
// restore needs nothing else: on any host sharing the store.
type Checkpointer interface {
	// Checkpoint saves sb, a running sandbox of this runtime, and calls
	// commit with its image as one stream (read to EOF by commit, which
	// stores it: the snapshot store) while sb is frozen in the state the
	// image holds. When commit returns nil, sb is killed as it is, still
	// frozen (nothing in it runs after the image), and Checkpoint returns
	// nil (or the kill's error): the caller removes it. Any error (the checkpoint's,
	// commit's, ctx's) leaves sb running as it was, and is returned:
	// ErrNoCheckpoint (wrapped, saying why) when this sandbox cannot be
	// checkpointed at all (its runtime, a host socket bound in its
	// workspace), another class otherwise. A checkpoint never ends a
	// sandbox it failed for.
	Checkpoint(ctx context.Context, sb Sandbox, commit func(ctx context.Context, image io.Reader) error) error

	// Restore creates spec's sandbox (spec as Create takes it: the session's
	// Spec) from image, a stream Checkpoint gave commit, read to its EOF
	// before anything starts. The sandbox it returns runs the processes
	// the image holds; whether they answer is the caller's to probe (a
	// restore that succeeded is no proof: the agent is dialled as after
	// Create). It refuses, with ErrNoCheckpoint, an image taken with other
	// runtime flags than this runtime's now (a restore under other flags
	// succeeds and then fails inside), and with ErrInvalid one it cannot
	// read. On any failure nothing is left behind but what the runtime
	// keeps for the session.
	Restore(ctx context.Context, spec Spec, image io.Reader) (Sandbox, error)
}

// ErrNoCheckpoint: this sandbox cannot be checkpointed, or this image
// cannot be restored here (another runtime, other flags); the message says
// why. A suspend then takes a files snapshot instead.
var ErrNoCheckpoint = errors.New("no memory checkpoint")
