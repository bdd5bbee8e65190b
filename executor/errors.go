package executor

import "github.com/shellbox/shellbox/errdefs"

// Error classes, as the executor's implementations and callers name them:
// each IS the class of errdefs, so a caller may test either name. Only
// tools/ turns an error into model-facing text and only the server into a
// status code. The message of an error built with Errorf is exactly the text
// the model sees after "Error: ", so it must be short and specific.
var (
	// ErrInvalid: the request cannot be run as given (bad workdir, bad session).
	ErrInvalid = errdefs.ErrInvalid
	// ErrNotFound: no such task (or a task of another session).
	ErrNotFound = errdefs.ErrNotFound
	// ErrAborted: the caller cancelled a foreground call.
	ErrAborted = errdefs.ErrAborted
	// ErrUnavailable: the executor cannot run anything right now (spawn
	// failure, lost sandbox).
	ErrUnavailable = errdefs.ErrUnavailable
	// ErrLimit: a configured limit stops the call; the message names the limit
	// and its value.
	ErrLimit = errdefs.ErrLimit
)

// Errorf returns an error of class whose message is the formatted text alone.
// A %w verb in format wraps its operand as the cause.
func Errorf(class error, format string, args ...any) error {
	return errdefs.Errorf(class, format, args...)
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
