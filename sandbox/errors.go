package sandbox

import "errors"

// Error classes. Backends convert their own errors into these at their
// boundary (sandbox/docker does it in one function) and wrap them with %w, so
// callers test with errors.Is and never see an engine's error types.
//
// They are not the classes of errdefs, on purpose: their text names the
// sandbox ("sandbox not found"), and an executor's error wraps a sandbox
// error as its cause ("sandbox for session s: %w" of class
// errdefs.ErrUnavailable), so were they errdefs's classes that error would
// carry a second class (errdefs.ErrInvalid, ErrNotFound) and be taken for
// an answer of the agent, or mapped to another status.
var (
	// ErrInvalid: a Spec or argument is wrong; the message names the field.
	ErrInvalid = errors.New("invalid sandbox spec")
	// ErrNotFound: no sandbox for that tenant and session (or that id).
	ErrNotFound = errors.New("sandbox not found")
	// ErrAlreadyExists: Create found a sandbox for that tenant and session.
	ErrAlreadyExists = errors.New("sandbox already exists")
	// ErrConflict: the name is taken by something this Manager must not touch:
	// a sandbox of another owner, or a container shellbox did not create.
	ErrConflict = errors.New("sandbox conflict")
	// ErrUnavailable: the engine cannot be reached, the runtime is not
	// installed, an image is missing, or the sandbox did not become ready.
	ErrUnavailable = errors.New("sandbox unavailable")
)
