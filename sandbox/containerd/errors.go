package containerd

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/grpc/status"

	"github.com/shellbox/shellbox/sandbox"
)

// convert is the one place where containerd's errors become the sandbox
// package's classes. The daemon's message is kept as text only.
func (r *Runtime) convert(err error, format string, args ...any) error {
	return convert(err, r.cfg.Address, format, args...)
}

func convert(err error, address, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	err = toNative(err)
	var class error
	switch {
	case isConnection(err):
		// Before the context errors: a dial that times out (no socket)
		// says "timeout" too, and is the daemon's absence, not the caller's.
		return fmt.Errorf("%w: containerd at %s does not answer: is it running? (.ci/setup-containerd.sh): %s: %v",
			sandbox.ErrUnavailable, address, what, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Keep the context error findable: callers tell "I gave up" apart.
		return fmt.Errorf("%w: containerd: %s: %w", sandbox.ErrUnavailable, what, err)
	case errdefs.IsNotFound(err):
		class = sandbox.ErrNotFound
	case errdefs.IsAlreadyExists(err), errdefs.IsConflict(err):
		class = sandbox.ErrConflict
	case errdefs.IsInvalidArgument(err):
		class = sandbox.ErrInvalid
	default:
		// Daemon and shim errors, anything else: the engine cannot do it now.
		class = sandbox.ErrUnavailable
	}
	return fmt.Errorf("%w: containerd: %s: %v", class, what, err)
}

// toNative turns a gRPC status (the raw task service answers with them)
// into containerd's error classes; other errors pass unchanged.
func toNative(err error) error {
	if _, ok := status.FromError(err); !ok {
		// Already native (the client's stores convert): converting again
		// would make every class ErrUnknown.
		return err
	}
	return errgrpc.ToNative(err)
}

// isConnection reports a daemon that cannot be reached: gRPC's Unavailable
// (no socket, refused, connection lost).
func isConnection(err error) bool {
	return errdefs.IsUnavailable(toNative(err))
}
