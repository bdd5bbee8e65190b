// Package errdefs holds the error classes of shellbox, once for the whole
// tree (as containerd's errdefs does). A package wraps a class with %w, or
// builds its error with Errorf, and a caller tests the class with
// errors.Is; the classes are turned into something else only at the edges:
// into model-facing text by tools/, into HTTP statuses by the server.
//
// A class's own text is part of rendered messages wherever it is wrapped
// with %w ("invalid request: ...", "tool call aborted: ..."), so it must not
// change. A package whose messages name their subject ("sandbox not found")
// keeps its own sentinel of that text.
//
// errdefs imports nothing of shellbox: every layer may use it.
package errdefs

import (
	"errors"
	"fmt"
)

// The classes.
var (
	// ErrInvalid: the request cannot be run as given (a bad argument, a
	// malformed or impossible request). HTTP 400.
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: no such thing (a task, a file, ...), or one of another
	// tenant or session. HTTP 404.
	ErrNotFound = errors.New("not found")
	// ErrNotAllowed: the tenant's policy does not allow it. HTTP 403.
	ErrNotAllowed = errors.New("not allowed by policy")
	// ErrUnavailable: nothing can be done right now (a lost sandbox, a spawn
	// failure, a directory the policy lists is missing). HTTP 503.
	ErrUnavailable = errors.New("unavailable")
	// ErrConflict: the request conflicts with what the thing is doing now
	// (a session being suspended already, or with calls in flight); the
	// same request may succeed later. HTTP 409.
	ErrConflict = errors.New("conflict")
	// ErrAborted: the caller cancelled a foreground call.
	ErrAborted = errors.New("tool call aborted")
	// ErrLimit: a configured limit stops the call; the message names the
	// limit and its value.
	ErrLimit = errors.New("limit reached")
	// ErrTooLarge: a transfer exceeds its cap (bytes, or entries of a tar).
	// HTTP 413.
	ErrTooLarge = errors.New("too large")
	// ErrNoSpace: the target filesystem is full (ENOSPC, EDQUOT). HTTP 507.
	ErrNoSpace = errors.New("no space left")
	// ErrNoSuchApproval: an unknown approval id, or one of another tenant.
	// HTTP 404.
	ErrNoSuchApproval = errors.New("no such approval")
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

// Errorf returns an error of class whose message is the formatted text
// alone (the class's own text is not added). A %w verb in format wraps its
// operand as the cause.
func Errorf(class error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &classed{class: class, msg: err.Error(), cause: errors.Unwrap(err)}
}
