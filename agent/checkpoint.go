package agent

// The agent across a gVisor checkpoint (docs/checkpoint.md).
//
// gVisor refuses to save a unix socket bound on a host path ("Cannot save
// endpoint with bound host socket"), and the agent serves agentapi on
// exactly such a socket (--socket, in the session's host directory, runsc
// --host-uds=create). So before a checkpoint the agent closes its listener
// and every connection it accepted there, and after a restore (or after a
// checkpoint that left the sandbox running) it listens again; what runs in
// the sandbox, background tasks included, is not touched: they are the
// agent's children, in the sandbox's init tree, which a restore keeps
// (processes started by runtime exec are killed by a restore, so tasks
// never are).
//
// The trigger is SIGUSR1 (close) or SIGUSR2 (listen) to PID 1: sent by
// the host through the runtime (runsc kill; sandbox/containerd, which then
// reads the agent's state file <socket>.state in the host directory), or
// by the hook, `shellbox-agent checkpoint-hook` (HookArg), run as root
// inside the sandbox with GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE set to save,
// restore or resume, as runsc's --save-restore-exec-argv runs one. The
// hook waits until the state file (StateFile) says the agent is done, so
// that its exit 0 means the socket is closed (or open) now. Only root signals PID 1: commands
// run as another uid without CAP_KILL. With --no-setuid (a Kubernetes pod,
// where there is no checkpoint) the agent ignores both signals, as it
// ignores every signal that would end it, and with --listen (TCP) there
// is no host socket: the hook's wait then ends in its timeout.

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shellbox/shellbox/agent/apiserver"
)

// HookArg is the agent's first argument that makes it the checkpoint hook.
const HookArg = "checkpoint-hook"

// EnvHookMode is the variable runsc sets for its save/restore hook, and
// the hook reads: save, restore or resume.
const EnvHookMode = "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"

// The hook's modes.
const (
	HookSave    = "save"
	HookRestore = "restore"
	HookResume  = "resume"
)

// The signals the hook sends PID 1 (and the host, through the runtime:
// sandbox/containerd).
var (
	SigCloseHost  = syscall.SIGUSR1
	SigListenHost = syscall.SIGUSR2
)

// The states StateFile holds, with a sequence number: "closed 3". The
// host reads them too (sandbox/containerd).
const (
	StateClosed    = "closed"
	StateListening = "listening"
)

// StateFile is where the agent serving socket says whether its host socket
// is closed or listening.
func StateFile(socket string) string { return socket + ".state" }

// HookTimeout bounds the hook's wait for the agent.
const HookTimeout = 10 * time.Second

// resendEvery is how often the hook signals an agent that has not
// answered.
const resendEvery = 500 * time.Millisecond

// writeState records st in the state file: a new file renamed over the
// old, so the hook never reads half of it.
func writeState(socket, st string, seq uint64) error {
	path := StateFile(socket)
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(st+" "+strconv.FormatUint(seq, 10)+"\n"), 0o600); err != nil {
		return fmt.Errorf("checkpoint state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("checkpoint state: %w", err)
	}
	return nil
}

// readState returns the state file's state and sequence number ("", 0 when
// there is none yet).
func readState(socket string) (string, uint64, error) {
	b, err := os.ReadFile(StateFile(socket))
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("checkpoint state: %w", err)
	}
	st, n, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	seq, perr := strconv.ParseUint(n, 10, 64)
	if !ok || perr != nil || (st != StateClosed && st != StateListening) {
		return "", 0, fmt.Errorf("checkpoint state %s: unreadable %q", StateFile(socket), clipState(b))
	}
	return st, seq, nil
}

func clipState(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

// Hook is the checkpoint hook: for mode save it has the agent serving
// socket close its host socket and connections, for restore and resume
// listen again, and returns once the agent's state file says so, or an
// error after timeout. signal delivers a signal to the agent (PID 1 in a
// sandbox).
func Hook(mode, socket string, signal func(syscall.Signal) error, timeout time.Duration) error {
	var (
		sig  syscall.Signal
		want string
	)
	switch mode {
	case HookSave:
		sig, want = SigCloseHost, StateClosed
	case HookRestore, HookResume:
		sig, want = SigListenHost, StateListening
	default:
		return fmt.Errorf("checkpoint hook: mode %q ($%s): want %s, %s or %s", mode, EnvHookMode, HookSave, HookRestore, HookResume)
	}
	_, before, err := readState(socket)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	var sent time.Time
	for {
		// Sent again while unanswered: an agent that has only just
		// started may not listen for it yet (handling it twice is
		// harmless).
		if time.Since(sent) >= resendEvery {
			if err := signal(sig); err != nil {
				return fmt.Errorf("checkpoint hook: signal the agent: %w", err)
			}
			sent = time.Now()
		}
		st, seq, err := readState(socket)
		if err != nil {
			return err
		}
		if seq > before {
			if st != want {
				return fmt.Errorf("checkpoint hook (%s): the agent's socket is %s, not %s (see the agent's log)", mode, st, want)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("checkpoint hook (%s): the agent did not answer within %s (state file %s): is it serving a host socket with setuid (not --listen, not --no-setuid)?", mode, timeout, StateFile(socket))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hostServer serves the protocol on the host socket, and closes it and
// opens it again on the hook's signals (handle).
type hostServer struct {
	socket  string
	newHTTP func() *http.Server
	errc    chan error // a Serve that failed (not closed by close)
	logf    func(string, ...any)
	hs      *http.Server // nil while closed for a checkpoint
}

// listen opens the socket and serves it.
func (h *hostServer) listen() error {
	l, err := apiserver.Listen(h.socket)
	if err != nil {
		return err
	}
	hs := h.newHTTP()
	h.hs = hs
	go func() {
		if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			select {
			case h.errc <- err:
			default:
			}
		}
	}()
	return nil
}

// close ends the listener (which removes the socket) and every connection
// it accepted, at once: the session is idle when it is checkpointed, and
// the server reconnects after the restore.
func (h *hostServer) close() {
	if h.hs != nil {
		h.hs.Close()
		h.hs = nil
	}
}

// handle closes or opens the socket on sig and records the result in the
// state file, with a sequence number above any the file held.
func (h *hostServer) handle(sig os.Signal) {
	st := StateListening
	switch sig {
	case SigCloseHost:
		h.close()
		st = StateClosed
		h.logf("host socket closed for a checkpoint")
	case SigListenHost:
		if h.hs == nil {
			if err := h.listen(); err != nil {
				// The state stays closed: the hook fails, saying so.
				h.logf("host socket after a checkpoint: %v", err)
				st = StateClosed
			} else {
				h.logf("host socket open again after a checkpoint")
			}
		}
	default:
		return
	}
	_, seq, err := readState(h.socket)
	if err != nil {
		h.logf("%v", err)
	}
	if err := writeState(h.socket, st, seq+1); err != nil {
		h.logf("%v", err)
	}
}
