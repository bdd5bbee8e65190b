package agentapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
)

// Protocol is the version of the protocol this package speaks. It changes
// only when a change would break one side of a deployed pair; added fields
// and endpoints do not change it.
const Protocol = 1

// Header names.
const (
	// HeaderProtocol carries the client's protocol version on every request;
	// an agent refuses a request of another version.
	HeaderProtocol = "Shellbox-Protocol"
	// HeaderCall names a foreground run, so the client can cancel it by name
	// (POST /v1/calls/{call}/cancel).
	HeaderCall = "Shellbox-Call"
)

// Streamed runs (POST /v1/run with "Accept: application/x-ndjson").
const (
	// ContentTypeStream is the media type a client asks for, and a streaming
	// agent answers with: one JSON Frame per line. An agent that predates
	// streaming ignores the Accept header and answers application/json with
	// the Result, which the client takes as a run without live output.
	ContentTypeStream = "application/x-ndjson"
	// StreamPending bounds the output an agent holds for a client that has
	// not read it yet; what does not fit is counted in Chunk.Skipped.
	StreamPending = 64 << 10
	// StreamInterval is the least time between two writes of output frames:
	// output is coalesced for that long.
	StreamInterval = 50 * time.Millisecond
)

// Frame is one line of a streamed run's answer: exactly one field is set.
// Output frames come while the command runs (Chunk.Data is base64, as
// encoding/json writes []byte); the last frame is a Result, or an Error of
// the same classes and text as a non-streamed run's error answer.
type Frame struct {
	Output *executor.Chunk  `json:"output,omitempty"`
	Result *executor.Result `json:"result,omitempty"`
	Error  *Error           `json:"error,omitempty"`
}

// Request body bounds.
const (
	// MaxSpecBytes bounds the body of /v1/run and /v1/start: a spec is a
	// command and its environment.
	MaxSpecBytes = 4 << 20
	// MaxSmallBytes bounds every other body.
	MaxSmallBytes = 64 << 10
)

// Runner is the part of executor.BashExecutor that crosses the protocol:
// everything but Resolve, which the caller does against its own limits (it
// needs no I/O, and the agent must not be the one choosing the caps it
// enforces). Client implements it; Server serves any Runner, such as a
// local.Executor.
type Runner interface {
	Run(ctx context.Context, spec executor.Spec) (executor.Result, error)
	Start(ctx context.Context, spec executor.Spec) (executor.Task, error)
	Task(ctx context.Context, session, id string) (executor.Task, error)
	Has(ctx context.Context, session string, shell executor.Shell) bool
}

// TaskLister is an optional ability of a Runner: listing a session's
// background tasks, for a restarted server re-adopting them. Server serves
// GET /v1/tasks when its Runner has it. Tasks whose handles also have a
// Status() executor.Status method are listed with their status.
type TaskLister interface {
	ListTasks(ctx context.Context, session string) ([]executor.Task, error)
}

// ActivityCounter is an optional ability of a Runner: how many commands
// run now, foreground and background (each a call's or a task's process
// tree, until the tree is gone). Server serves it in GET /v1/activity.
type ActivityCounter interface {
	Running() int
}

// Activity is the answer of GET /v1/activity: what is going on in the
// sandbox now, for the idle reaper, which never ends a busy session (a
// call in flight, a background task running, an egress connection open),
// whoever started it and whichever server replica serves it.
type Activity struct {
	// Calls is the foreground runs in flight (requests to /v1/run).
	Calls int `json:"calls"`
	// Commands is the commands running, foreground and background, as the
	// Runner counts them (-1: it cannot).
	Commands int `json:"commands"`
	// Egress is the connections the egress proxy holds open (0 without
	// one).
	Egress int `json:"egress"`
}

// Busy says why a sandbox with this activity is busy, "" when it is idle.
func (a Activity) Busy() string {
	var why []string
	if a.Calls > 0 {
		why = append(why, fmt.Sprintf("%d call(s) in flight", a.Calls))
	}
	if a.Commands > 0 {
		why = append(why, fmt.Sprintf("%d command(s) running", a.Commands))
	}
	if a.Egress > 0 {
		why = append(why, fmt.Sprintf("%d egress connection(s) open", a.Egress))
	}
	return strings.Join(why, ", ")
}

// Hello is the answer of GET /v1/hello: the handshake.
type Hello struct {
	// Protocol is the agent's protocol version.
	Protocol int `json:"protocol"`
	// Agent is the agent's build version, for messages and logs.
	Agent string `json:"agent"`
	// Pwsh reports whether pwsh is on the commands' PATH.
	Pwsh bool `json:"pwsh"`
	// Root is the session cwd, as commands see it.
	Root string `json:"root"`
	// Home is HOME of the commands.
	Home string `json:"home"`
	// NoExecGuard says why this agent does not check its commands' execs
	// against their calls' rules (agent/execguard), empty when it does:
	// then a policy's command rules hold only before a call runs, and the
	// server reports it (a warning on /readyz and the console).
	NoExecGuard string `json:"noExecGuard,omitempty"`
}

// Started is the answer of POST /v1/start.
type Started struct {
	ID string `json:"id"`
}

// TaskRef names a task's session in the body of a task request.
type TaskRef struct {
	Session string `json:"session"`
}

// TaskInfo describes one background task in GET /v1/tasks and
// GET /v1/tasks/{id}. Status is absent when the agent's executor cannot tell
// it without consuming output.
type TaskInfo struct {
	ID      string           `json:"id"`
	Session string           `json:"session"`
	Status  *executor.Status `json:"status,omitempty"`
}

// TaskList is the answer of GET /v1/tasks.
type TaskList struct {
	Tasks []TaskInfo `json:"tasks"`
}

// HasAnswer is the answer of GET /v1/has.
type HasAnswer struct {
	Has bool `json:"has"`
}

// LogAnswer answers GET /v1/log: the agent's most recent log output (a
// bounded tail, whole lines where it can).
type LogAnswer struct {
	Log string `json:"log"`
}

// Error is the body of every non-2xx answer. Class is one of the Class*
// constants; Message is the error's text, exactly as the model would read it.
type Error struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

// Error classes on the wire and their HTTP statuses.
const (
	ClassInvalid     = "invalid"     // 400
	ClassNotFound    = "not_found"   // 404
	ClassAborted     = "aborted"     // 499, as nginx: the client went away
	ClassLimit       = "limit"       // 429
	ClassUnavailable = "unavailable" // 503
	ClassInternal    = "internal"    // 500: an error without a class
	ClassTooLarge    = "too_large"   // 413: over a transfer's cap
	ClassNoSpace     = "no_space"    // 507: the target's filesystem is full
	// ClassTerminating (503): the sandbox is being deleted and its agent
	// starts nothing more (ErrTerminating); the client reports it as
	// ErrNotSent, since nothing started, so the call is made again in
	// the session's next sandbox.
	ClassTerminating = "terminating"
)

// ErrTerminating is the agent's refusal of a call or task once its
// sandbox is being deleted (a pod's termination grace, during which the
// server saves the workspace through it): it is executor.ErrUnavailable,
// and crosses the wire as ClassTerminating.
var ErrTerminating = executor.Errorf(executor.ErrUnavailable, "the sandbox is being deleted: its workspace is being saved, and the session's next sandbox runs this call")

// StatusClientClosed is the status of an aborted call. Nobody normally reads
// it: the client is gone.
const StatusClientClosed = 499

var classes = []struct {
	name   string
	err    error
	status int
}{
	{ClassTerminating, ErrTerminating, http.StatusServiceUnavailable}, // before ClassUnavailable: it is one
	{ClassInvalid, executor.ErrInvalid, http.StatusBadRequest},
	{ClassNotFound, executor.ErrNotFound, http.StatusNotFound},
	{ClassAborted, executor.ErrAborted, StatusClientClosed},
	{ClassLimit, executor.ErrLimit, http.StatusTooManyRequests},
	{ClassUnavailable, executor.ErrUnavailable, http.StatusServiceUnavailable},
	{ClassTooLarge, files.ErrTooLarge, http.StatusRequestEntityTooLarge},
	{ClassNoSpace, files.ErrNoSpace, http.StatusInsufficientStorage},
}

// EncodeError is err as a wire error and its HTTP status.
func EncodeError(err error) (Error, int) {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return Error{Class: c.name, Message: err.Error()}, c.status
		}
	}
	return Error{Class: ClassInternal, Message: err.Error()}, http.StatusInternalServerError
}

// decodeError turns a wire error back into an error of its class whose text
// is exactly the agent's, so what the model reads does not depend on which
// side of the socket an error was made.
func decodeError(e Error) error {
	if e.Class == ClassTerminating {
		return notSent{executor.Errorf(executor.ErrUnavailable, "%s", e.Message)}
	}
	for _, c := range classes {
		if e.Class == c.name {
			return executor.Errorf(c.err, "%s", e.Message)
		}
	}
	return errors.New(e.Message)
}

// VersionError is the error of a handshake with an agent of another
// protocol version.
type VersionError struct {
	Socket string
	Agent  Hello
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("agent protocol mismatch: shellbox speaks protocol %d, the agent at %s speaks %d (agent version %s)",
		Protocol, e.Socket, e.Agent.Protocol, e.Agent.Agent)
}

// Is makes a mismatch an executor.ErrUnavailable: nothing can run there.
func (e *VersionError) Is(target error) bool { return target == executor.ErrUnavailable }
