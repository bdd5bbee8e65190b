package sandbox

import (
	"context"
	"path/filepath"
	"time"
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
	// HostDir is the session's host directory; SocketPath the agent's socket
	// in it (empty for backends where the agent is reached otherwise).
	HostDir    string
	SocketPath string
	// Mounts are the host directory mounts (Spec.Mounts) as the backend
	// reports them, by target.
	Mounts []Mount
	State  State
	// OOMKilled reports that the engine saw the sandbox's memory cgroup kill
	// its main process (under gVisor that is the whole sandbox: the host's
	// OOM killer takes the sentry).
	OOMKilled bool
	Created   time.Time
	// LastUsed is when the Manager last handed the sandbox out (Ensure,
	// Touch). Zero in values coming straight from a Runtime.
	LastUsed time.Time
}

// SocketPath returns the agent socket's path in a host directory.
func SocketPath(hostDir string) string {
	if hostDir == "" {
		return ""
	}
	return filepath.Join(hostDir, SocketName)
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
	// Create creates and starts the sandbox described by spec (which must
	// Validate) and returns it running. If a sandbox of spec's tenant and
	// session already exists it returns ErrAlreadyExists and changes nothing.
	// On any other failure nothing is left behind. Create does not prepare
	// spec.HostDir: it must exist.
	Create(ctx context.Context, spec Spec) (Sandbox, error)

	// Get returns the sandbox of tenant and session, whatever its state and
	// owner, or ErrNotFound. ErrConflict: the name is held by something
	// shellbox did not create.
	Get(ctx context.Context, tenant, session string) (Sandbox, error)

	// List returns the sandboxes of owner, in any state; owner "" lists every
	// shellbox sandbox on the engine.
	List(ctx context.Context, owner string) ([]Sandbox, error)

	// Remove kills and deletes the sandbox with that id. Removing a sandbox
	// that is already gone is not an error. It does not touch the host dir.
	Remove(ctx context.Context, id string) error
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
