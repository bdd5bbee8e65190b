package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/shellbox/shellbox/sandbox"
)

// convert is the one place where the API server's errors become the
// sandbox package's classes; resource names what was asked for (pods,
// secrets, ...) so a refusal says which RBAC rule is missing. The server's
// message is kept as text only.
func (r *Runtime) convert(err error, resource, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	ns := r.cfg.Namespace
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Keep the context error findable: callers tell "I gave up" apart.
		return fmt.Errorf("%w: kube: %s: %w", sandbox.ErrUnavailable, what, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: kube: %s: %v", sandbox.ErrNotFound, what, err)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%w: kube: %s: %v", sandbox.ErrAlreadyExists, what, err)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: kube: %s: %v", sandbox.ErrConflict, what, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%w: kube: %s: %v", sandbox.ErrInvalid, what, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w: kube: %s: the API server rejected shellbox's credentials: %v", sandbox.ErrUnavailable, what, err)
	case apierrors.IsForbidden(err):
		// 403 is the authorizer (RBAC) or an admission plugin: the
		// authorizer's message says "cannot <verb> resource".
		msg := err.Error()
		switch {
		case strings.Contains(msg, "cannot "):
			return fmt.Errorf("%w: kube: no RBAC for %s in namespace %s: %s: %v", sandbox.ErrUnavailable, resource, ns, what, err)
		case strings.Contains(msg, "RuntimeClass"):
			return fmt.Errorf("%w: kube: %s: RuntimeClass missing (is gVisor installed on the cluster?): %v", sandbox.ErrUnavailable, what, err)
		case strings.Contains(msg, "PodSecurity"):
			return fmt.Errorf("%w: kube: %s: refused by Pod Security admission: label namespace %s for the level the runtime is configured for (pod-security.kubernetes.io/enforce): %v",
				sandbox.ErrUnavailable, what, ns, err)
		}
		return fmt.Errorf("%w: kube: %s: refused by admission: %v", sandbox.ErrUnavailable, what, err)
	}
	// Connection failures, timeouts, throttling, server errors: the
	// cluster cannot do it now.
	return fmt.Errorf("%w: kube: %s: %v", sandbox.ErrUnavailable, what, err)
}
