package sandbox

import (
	"context"
	"time"

	"github.com/shellbox/shellbox/agentapi"
)

// State is a sandbox's lifecycle state as the engine reports it.
type State string

const (
	StateCreated State = "created" // created, never started
	StateRunning State = "running"
	StateExited  State = "exited" // PID 1 (the agent) ended; the sandbox is dead
	StateOther   State = "other"  // paused, restarting, removing, dead, unknown
)

// Sandbox describes one session's sandbox. It is a value: a snapshot of what
// the backend reported, plus LastUsed, which only the Manager keeps.
type Sandbox struct {
	// ID is the backend's id (the container id for Docker).
	ID      string
	Tenant  string
	Session string
	Owner   string
	Runtime string
	Image   string
	// Network is the Spec's network (NetworkNone or NetworkEgress); empty
	// for sandboxes created before it was recorded (they have none).
	Network string
	// Agent says how to reach the sandbox's agent. Runtimes fill it; how
	// they do it (a unix socket in a host directory, a pod IP and a secret)
	// is theirs alone.
	Agent agentapi.Endpoint
	// Mounts are the host directory mounts (Spec.Mounts) as the backend
	// reports them, by target.
	Mounts []Mount
	// Settings is the Spec's Settings as the backend kept them.
	Settings string
	State    State
	// OOMKilled reports that the engine saw the sandbox's memory cgroup kill
	// its main process (under gVisor that is the whole sandbox: the host's
	// OOM killer takes the sentry).
	OOMKilled bool
	Created   time.Time
	// LastUsed is when the Manager last handed the sandbox out (Ensure,
	// Touch). Zero in values coming straight from a Runtime.
	LastUsed time.Time
	// PoolName, for a sandbox a session claimed from a warm pool, is the
	// name it was created under (the session the runtime knows it by);
	// Session is then the claiming session. Empty otherwise. Only the
	// Manager sets it.
	PoolName string
}

// Runtime is a sandbox backend: it creates, finds, lists and removes
// sandboxes, and nothing else; lifecycle policy (reuse, idle reaping,
// adoption after a restart) is the Manager's. Implementations translate a
// Spec into their engine's terms and convert the engine's errors into this
// package's classes.
//
// Methods are safe for concurrent use. Contexts bound the calls to the engine
// only; a sandbox, once created, lives until Remove.
type Runtime interface {
	// Create prepares what the runtime keeps for the sandbox (a single-host
	// runtime's host directory and spill quota, say), creates and starts the
	// sandbox described by spec (which must Validate) and returns it
	// running, with its Agent endpoint. If a sandbox of spec's tenant and
	// session already exists it returns ErrAlreadyExists and changes
	// nothing. On any other failure nothing is left behind.
	Create(ctx context.Context, spec Spec) (Sandbox, error)

	// Get returns the sandbox of tenant and session, whatever its state and
	// owner, or ErrNotFound. ErrConflict: the name is held by something
	// shellbox did not create.
	Get(ctx context.Context, tenant, session string) (Sandbox, error)

	// List returns the sandboxes of owner, in any state; owner "" lists every
	// shellbox sandbox on the engine.
	List(ctx context.Context, owner string) ([]Sandbox, error)

	// Remove kills and deletes the sandbox with that id and what the runtime
	// keeps for it alone (its host directory and spill files). What it keeps
	// for the session (SessionState: the workspace) stays, for the
	// session's next sandbox. Removing a sandbox that is already gone is not
	// an error.
	Remove(ctx context.Context, id string) error
}

// SessionState is an optional Runtime ability: state kept per session
// rather than per sandbox, which outlives Remove so that the session's next
// sandbox finds it (the single-host runtimes' workspace: a sandbox that died
// over its memory limit, lost its agent or was removed behind shellbox's
// back must not take the session's files with it). Create reuses it.
type SessionState interface {
	// RemoveSession deletes the session's state and reports whether there
	// was any. The caller makes sure no sandbox of the session exists or is
	// being created meanwhile (the Manager holds the session). Idempotent.
	RemoveSession(ctx context.Context, tenant, session string) (bool, error)
}

// Sweeper is an optional Runtime ability: removing state that outlived its
// sandbox or session (a host directory whose container was removed while no
// server ran, the workspace of a session no server knows). Sweep removes the
// state of every (tenant, session) of owner for which live reports false,
// and returns what it removed. live is true for a session that is live even
// if it has no sandbox at the moment (one being replaced).
type Sweeper interface {
	Sweep(ctx context.Context, owner string, live func(tenant, session string) bool) ([]string, error)
}

// Pinger is an optional Runtime ability: checking that the engine answers.
type Pinger interface {
	Ping(ctx context.Context) error
}

// RuntimeLister is an optional Runtime ability: the Spec runtimes the engine
// can run (so a policy asking for runsc can be refused at load, not at the
// first command).
type RuntimeLister interface {
	Runtimes(ctx context.Context) ([]string, error)
}
