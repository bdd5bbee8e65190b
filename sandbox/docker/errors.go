package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/shellbox/shellbox/sandbox"
)

// convert is the one place where the Docker client's errors become the
// sandbox package's classes. The engine's message is kept as text only.
func convert(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	var class error
	switch {
	case isNotFound(err):
		class = sandbox.ErrNotFound
	case isConflict(err):
		class = sandbox.ErrConflict
	case cerrdefs.IsInvalidArgument(err):
		class = sandbox.ErrInvalid
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Keep the context error findable: callers tell "I gave up" apart.
		return fmt.Errorf("%w: docker: %s: %w", sandbox.ErrUnavailable, what, err)
	default:
		// Connection failures, engine errors, anything else: the engine
		// cannot do it now.
		class = sandbox.ErrUnavailable
	}
	return fmt.Errorf("%w: docker: %s: %v", class, what, err)
}

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }

func isConflict(err error) bool { return cerrdefs.IsConflict(err) }
