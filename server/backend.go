package server

import (
	"context"
	"errors"
	"time"

	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/tools"
)

// Backend is where tool calls run: the server's only way to reach sandboxes.
// Implementations must be safe for concurrent use and keep tenants apart:
// every method acts on the named tenant's sessions alone.
type Backend interface {
	// Toolset returns the tenant's Toolset, the same one on every call. Its
	// background completion notices must be handed to the Server's Notify.
	Toolset(ctx context.Context, tenant string) (*tools.Toolset, error)
	// Sessions lists the tenant's sessions.
	Sessions(ctx context.Context, tenant string) ([]SessionInfo, error)
	// CreateSession creates the tenant's session now (its sandbox, with
	// opts) instead of on its first tool call. Creating a session that
	// exists returns it. Options outside the tenant's policy are an error
	// wrapping ErrNotAllowed; bad values one wrapping ErrInvalid.
	CreateSession(ctx context.Context, tenant, session string, opts SessionOptions) (SessionInfo, error)
	// DeleteSession removes the tenant's session, its sandbox and its
	// background tasks. An unknown session is an error wrapping
	// ErrNoSuchSession.
	DeleteSession(ctx context.Context, tenant, session string) error
	// Ready reports whether the backend can serve (the engine answers).
	Ready(ctx context.Context) error
}

// Warner is a Backend that also reports problems that do not stop it
// serving, so they must not fail /readyz: behind a load balancer every
// replica would go unready at once and the whole service with them. A
// tenant's policy file that does not load is one: that tenant keeps its
// last good policy (or is refused, if it never had one), the others are
// served. /readyz counts them ("warnings"; it is public), the console
// lists them, the gauge shellbox_backend_warnings counts them.
type Warner interface {
	Warnings() []Warning
}

// Sandboxer is a Backend that says whether its commands run in sandboxes.
// When they do not (the local backend runs them on the server's host),
// /readyz says so: it is a fact of the whole deployment, naming no tenant,
// and whoever relies on the server should not have to read its
// configuration to learn it.
type Sandboxer interface {
	Sandboxed() bool
}

// Warning is one problem a Warner reports. Tenant is the tenant it concerns
// (its text may quote that tenant's policy file), "" one of the deployment
// as a whole: the console shows a tenant login only its own tenant's
// warnings, an operator every one.
type Warning struct {
	Tenant string
	Text   string
}

// SessionInfo describes one session.
type SessionInfo struct {
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	Image   string `json:"image,omitempty"`
	Runtime string `json:"runtime,omitempty"`
	// Mounts are the host directories mounted in the session's sandbox,
	// with ReadOnly always set.
	Mounts []Mount `json:"mounts,omitempty"`
	// State is the sandbox's state ("running", ...), or "suspended" for
	// a session without a sandbox that resumes from Snapshot, taken at
	// Suspended.
	State     string    `json:"state,omitempty"`
	Created   time.Time `json:"created,omitzero"`
	Snapshot  string    `json:"snapshot,omitempty"`
	Suspended time.Time `json:"suspended,omitzero"`
}

// CallHolder is a Backend that hears which sessions have a tool call in
// this server, from before its gate (an approval it waits for) to its
// result: the idle reaper must not suspend a session whose call is held
// here before its command reaches the sandbox. HoldCall returns the
// release, which the server calls once.
type CallHolder interface {
	HoldCall(tenant, session string) (release func())
}

// Suspender is a Backend whose sessions can be suspended: the sandbox
// removed, the workspace kept in a snapshot store, the session resumed by
// its next call or on request.
type Suspender interface {
	// SuspendSession suspends the tenant's session: its background tasks
	// killed, its workspace stored, its sandbox removed. A suspended
	// session is returned as it is; an unknown one is ErrNoSuchSession; a
	// store that fails is ErrUnavailable, and the session runs on.
	SuspendSession(ctx context.Context, tenant, session string) (SessionInfo, error)
	// ResumeSession gives a suspended session its sandbox back now, with
	// its workspace restored (from snapshot, when not "": one of its
	// snapshots by id). A running session is returned as it is.
	ResumeSession(ctx context.Context, tenant, session, snapshot string) (SessionInfo, error)
}

// SessionOptions are what a client may choose for a new session, within the
// tenant's policy. Empty fields take the tenant's defaults.
type SessionOptions struct {
	Image   string `json:"image,omitempty"`
	Runtime string `json:"runtime,omitempty"`
	// Mounts are the host directories to mount, each within the policy's
	// allowlist (sandbox.mounts). Nil (absent, or JSON null) takes every
	// directory the policy lists; an empty list mounts none.
	Mounts []Mount `json:"mounts"`
}

// Mount is a host directory mounted in a session's sandbox.
type Mount struct {
	// Source is the host directory: one the policy allowlists, or one
	// below it.
	Source string `json:"source"`
	// Target is where commands see it. Empty in a request: the policy
	// entry's target plus Source's path below the entry's source.
	Target string `json:"target,omitempty"`
	// ReadOnly: nil in a request asks for read-only.
	ReadOnly *bool `json:"readOnly,omitempty"`
}

// Error classes a Backend or Approvals implementation wraps; the server maps
// them to HTTP statuses (404, 403, 400, 409, 503). All but ErrNoSuchSession are
// the classes of errdefs, under the names the server's callers know.
var (
	ErrNoSuchSession = errors.New("no such session")
	ErrNotAllowed    = errdefs.ErrNotAllowed
	ErrInvalid       = errdefs.ErrInvalid
	ErrUnavailable   = errdefs.ErrUnavailable
	ErrConflict      = errdefs.ErrConflict
)
