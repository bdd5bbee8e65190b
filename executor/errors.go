package executor

import (
	"errors"
	"fmt"
)

// Error classes. Implementations wrap them (errors.Is finds the class); only
// tools/ turns an error into model-facing text and only the server into a
// status code. The message of an error built with Errorf is exactly the text
// the model sees after "Error: ", so it must be short and specific.
var (
	// ErrInvalid: the request cannot be run as given (bad workdir, bad session).
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: no such task (or a task of another session).
	ErrNotFound = errors.New("not found")
	// ErrAborted: the caller cancelled a foreground call.
	ErrAborted = errors.New("tool call aborted")
	// ErrUnavailable: the executor cannot run anything right now (spawn
	// failure, lost sandbox).
	ErrUnavailable = errors.New("unavailable")
	// ErrLimit: a configured limit stops the call; the message names the limit
	// and its value.
	ErrLimit = errors.New("limit reached")
)

// classed is an error whose text is its message alone while errors.Is still
// finds its class.
type classed struct {
	class error
	msg   string
	cause error
}

func (e *classed) Error() string { return e.msg }

func (e *classed) Is(target error) bool { return target == e.class }

func (e *classed) Unwrap() error { return e.cause }

// Errorf returns an error of class whose message is the formatted text alone.
// A %w verb in format wraps its operand as the cause.
func Errorf(class error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &classed{class: class, msg: err.Error(), cause: errors.Unwrap(err)}
}

// NoSuchTask is the one answer for an unknown task id, whoever asks.
func NoSuchTask(id string) error {
	return Errorf(ErrNotFound, "no such task: %s", id)
}

// Aborted is the error of a foreground call whose caller went away.
func Aborted() error {
	return Errorf(ErrAborted, "tool call aborted")
}

// WorkdirOutside is the error for a workdir that leaves the root, whatever the
// executor; every backend uses it so the text is the same everywhere.
func WorkdirOutside(workdir, root string) error {
	return Errorf(ErrInvalid, "invalid workdir: %s is outside the session root %s", workdir, root)
}

// WorkdirMissing is the error for a workdir that is not an existing directory.
func WorkdirMissing(workdir string) error {
	return Errorf(ErrInvalid, "invalid workdir: %s is not a directory", workdir)
}
