// Package executor defines the BashExecutor seam: the one interface every place
// a command can run behind (a host process, a Docker sandbox, a pod) implements,
// and the plain data that crosses it.
//
// Data flows one way. tools/ validates what the model sent and builds a Request;
// the executor resolves it against its configured defaults and caps into a Spec
// (every field explicit), then runs it in the foreground (Run) or starts it in the
// background (Start). The executor never renders text: it reports facts (tails,
// exit code, signal, whether its timer fired, where the spill file is) and tools/
// turns them into what the model sees. That is why swapping executors cannot
// change one character of the model-facing contract, and why one conformance
// suite (executor/executortest) can hold every implementation to it.
//
// A foreground call may also be watched while it runs: Spec.Live receives
// its output as the pumps read it (never blocking them), for a harness that
// shows its user a long build; what it returns is unchanged. output.Feed is
// the bounded, coalescing queue between Live and a consumer; agentapi carries
// Live as a streamed answer. Background tasks are read with Task.Read.
//
// Semantics every implementation owes (docs/architecture.md#execution-semantics-every-executor):
//   - each command runs in its own process group and, where the kernel allows, its
//     own cgroup; timeout, Kill and a cancelled foreground call send SIGTERM to the
//     whole tree, wait the grace period, then SIGKILL whatever is left, including
//     processes that called setsid or ignore SIGTERM;
//   - when the command's leader exits, whatever it left running is killed the
//     same way: no call leaves processes behind (use Background for that);
//   - each stream keeps a bounded tail; the full output, stdout and stderr
//     interleaved in arrival order, is spilled to a file once a tail overflows;
//   - exit status is exact: an exit code, or the terminating signal by name;
//   - workdirs are resolved where the files are, and cannot escape the root.
package executor

import (
	"context"
	"time"

	"github.com/shellbox/shellbox/internal/cmdmatch"
)

// Shell selects the interpreter a command is handed to.
type Shell string

const (
	// Bash runs `bash -c <command>` (never a login shell).
	Bash Shell = "bash"
	// Pwsh runs `pwsh -NoProfile -NonInteractive -Command <command>`.
	Pwsh Shell = "pwsh"
)

// Argv returns the argument vector that runs command under the shell.
func (s Shell) Argv(command string) []string {
	if s == Pwsh {
		return []string{"pwsh", "-NoProfile", "-NonInteractive", "-Command", command}
	}
	return []string{"bash", "-c", command}
}

// Request is what tools/ asks an executor for. Zero values mean "use the
// executor's default": an empty Workdir is the session cwd, a zero Timeout the
// default timeout.
type Request struct {
	// Session names the session the call belongs to. Tasks, spill files and the
	// session cwd are scoped by it.
	Session string
	Shell   Shell
	Command string
	// Workdir as the model gave it: empty, relative to the session cwd, or
	// absolute (inside the sandbox).
	Workdir string
	// Timeout asked for; clamped to the executor's cap. Ignored for background.
	Timeout    time.Duration
	Background bool
	// Env is the managed environment (DSH_* and policy variables) built by
	// tools/. It is applied last, over the executor's base environment; nothing
	// from the executor's own process environment reaches the command.
	Env map[string]string
	// Permissions are the extra sandbox rights granted for this call only, after
	// the policy layer decided on them.
	Permissions []string
	// ExecRules are the policy's rules that refuse a command, checked again
	// at every exec of the call's process tree where the executor can (the
	// agent's exec guard); nil: none. Set by the policy layer.
	ExecRules *cmdmatch.Set
}

// Spec is a Request resolved against an executor's configuration: every field
// is explicit, so what will run can be logged, audited and tested as data.
type Spec struct {
	Session string
	Shell   Shell
	Command string
	// Workdir is absolute, as seen by the command. It is lexically clean but
	// not yet confined: confinement happens where the files are, at run time.
	Workdir string
	// Root is the directory Workdir must stay inside.
	Root string
	// Timeout is the effective foreground timeout; zero for background tasks.
	Timeout time.Duration
	// Grace is the time between SIGTERM and SIGKILL.
	Grace      time.Duration
	Background bool
	// Env is the complete environment of the command, KEY=VALUE.
	Env []string
	// TailBytes bounds the tail kept of each stream of a foreground result.
	TailBytes int
	// BufferBytes bounds the unread output kept in memory per stream of a
	// background task.
	BufferBytes int
	// SpillLimit caps the spill file of one call, in bytes.
	SpillLimit int64
	// Permissions granted for this call.
	Permissions []string
	// Live, if set, receives a foreground command's output as it arrives, in
	// arrival order, while the result is built exactly as without it. It is
	// not data of the spec (never serialized: a transport carries it in its
	// own way, agentapi as a streamed answer) and background tasks ignore it.
	Live Live `json:"-"`
	// EgressGrant, when set, names the call's network grant: an opaque token
	// (egresswire.ValidCredential) that the sandbox's egress proxy presents to
	// the relay for a connection only when every process holding the
	// connection's socket belongs to this command's tree. It is never put in
	// the command's environment, where every process of the sandbox user
	// could read it (/proc/<pid>/environ); an executor that cannot attribute
	// connections to trees ignores it, and the call gets no grant.
	EgressGrant string
	// ExecRules is Request.ExecRules: what the exec check refuses in this
	// call's tree. An executor without an exec check ignores it (the
	// static decision was made before the call ran).
	ExecRules *cmdmatch.Set `json:"execRules,omitempty"`
}

// Stream names of a Chunk.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Chunk is a piece of a running foreground command's output (Spec.Live).
type Chunk struct {
	// Stream is Stdout or Stderr.
	Stream string `json:"stream"`
	// Data is output as the command wrote it: bytes, not necessarily whole
	// lines or whole UTF-8 sequences.
	Data []byte `json:"data,omitempty"`
	// Skipped counts the bytes written before Data (on either stream) that
	// were not streamed because a consumer fell behind its bound. They are
	// in the result's tails and the spill file as usual.
	Skipped int64 `json:"skipped,omitempty"`
}

// Live receives live output. It is called from the executor's output pumps,
// one chunk at a time: it must not block (a slow consumer must drop, not
// stall the command: output.Feed does that) and must not keep Data, which
// the caller reuses. It is never called after Run returns.
type Live func(Chunk)

// Result is how a foreground command (or a finished background task) ended.
type Result struct {
	// Stdout and Stderr are the kept tails.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// ExitCode is the exit code; meaningful when Signal is empty.
	ExitCode int `json:"exitCode"`
	// Signal names the signal that terminated the command ("SIGKILL"), or is
	// empty when it exited.
	Signal string `json:"signal,omitempty"`
	// TimedOut reports that the executor's timer fired, however the command
	// then ended.
	TimedOut bool `json:"timedOut"`
	// TimeoutMs is the effective timeout in milliseconds.
	TimeoutMs int64 `json:"timeoutMs"`
	// Truncated reports that a kept tail is shorter than its stream.
	Truncated bool `json:"truncated"`
	// SpillPath is the full output, readable from where the command ran. Set
	// when Truncated and the spill was written (possibly capped: see SpillError).
	SpillPath string `json:"spillPath,omitempty"`
	// SpillError says why the full output is not (wholly) available.
	SpillError string `json:"spillError,omitempty"`
	// SpillBytes is the size of the spill file (0 when none was written).
	// A background task's Wait reports it whenever its output spilled,
	// truncated tails or not: usage meters it (docs/usage.md).
	SpillBytes int64 `json:"spillBytes,omitempty"`
	// OOMKilled reports that the out-of-memory killer ended the command.
	OOMKilled bool `json:"oomKilled,omitempty"`
	// SandboxOOM, when set, reports that the command did not die alone:
	// its whole sandbox was killed over its memory limit, background
	// tasks and all (under gVisor the host's OOM killer takes the
	// sentry, which holds every process of the sandbox). OOMKilled is set
	// too. It is a fact for tools to render, never sent over the wire: only
	// the host side, which saw the sandbox die, sets it.
	SandboxOOM *SandboxOOM `json:"-"`
}

// SandboxOOM is how a sandbox died of its memory limit (Result.SandboxOOM).
type SandboxOOM struct {
	// MemoryBytes is the sandbox's memory limit (0: none known).
	MemoryBytes int64
}

// State is where a background task is in its life.
type State string

const (
	Running   State = "running"
	Completed State = "completed"
	Killed    State = "killed"
)

// Status is a background task's state. ExitCode is meaningful when State is
// Completed; Signal may name the signal of a Killed task.
type Status struct {
	State    State  `json:"state"`
	ExitCode int    `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
}

// Output is what one cursor read of a background task returns: the output
// produced since the previous read, and the status after it.
type Output struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Lost counts bytes produced since the previous read that were no longer
	// in memory: the reader fell behind the in-memory bound.
	Lost int64 `json:"lost"`
	// SpillPath holds the task's full output (set when Lost > 0, or once the
	// task's output outgrew memory).
	SpillPath  string `json:"spillPath,omitempty"`
	SpillError string `json:"spillError,omitempty"`
	// SpillBytes is the size of the task's spill file once Status is final
	// (the file grows no more); 0 while the task runs, or when nothing
	// spilled. It is a fact for usage metering, never rendered. It lives
	// here, beside SpillPath, not in Status: the spill belongs to the
	// output, and Status is the task's state, which callers compare whole.
	SpillBytes int64  `json:"spillBytes,omitempty"`
	Status     Status `json:"status"`
}

// KillResult says what Kill found.
type KillResult struct {
	// AlreadyDone is true when the task had ended before Kill was called;
	// Status then says how.
	AlreadyDone bool
	Status      Status
	// SpillBytes is Output.SpillBytes of the ended task: Kill reports the
	// end, so it carries the figure a Read would have.
	SpillBytes int64 `json:",omitempty"`
}

// BashExecutor is the seam. Implementations must be safe for concurrent use.
type BashExecutor interface {
	// Resolve applies defaults and caps to req. It does no I/O that can
	// block on the command; errors are ErrInvalid.
	Resolve(ctx context.Context, req Request) (Spec, error)

	// Run runs spec in the foreground and returns how it ended. A non-zero
	// exit, a signal or a timeout is a Result, not an error. ctx belongs to
	// the caller: if it is cancelled before the command ends, the command's
	// whole tree is killed (SIGTERM, grace, SIGKILL) before Run returns
	// ErrAborted.
	Run(ctx context.Context, spec Spec) (Result, error)

	// Start starts spec as a background task and returns at once. The task
	// outlives ctx, which bounds only the start itself; the task ends when its
	// command does or when it is killed.
	Start(ctx context.Context, spec Spec) (Task, error)

	// Task finds a task of session by id. A task of another session answers
	// exactly as an unknown id: ErrNotFound.
	Task(ctx context.Context, session, id string) (Task, error)

	// Has reports whether the executor can run shell (pwsh is offered only
	// where the session image has it).
	Has(ctx context.Context, session string, shell Shell) bool
}

// Task is a handle on a background task. Its methods are safe for concurrent
// use; Read has one cursor per task, shared by every handle.
type Task interface {
	ID() string

	// Read returns the output produced since the previous Read, and the
	// status. It never blocks on the command.
	Read(ctx context.Context) (Output, error)

	// Wait blocks until the task ends or ctx is done, and returns its final
	// Result (tails of the whole output, exit status). It does not consume
	// the Read cursor.
	Wait(ctx context.Context) (Result, error)

	// Kill kills the task's whole tree (SIGTERM, grace, SIGKILL) and waits for
	// it to be gone. Killing a finished task is not an error: the result says
	// it was already done. Kill runs to completion even if ctx is cancelled
	// once the signals are sent, so a gone caller cannot leave half a tree.
	Kill(ctx context.Context) (KillResult, error)
}
