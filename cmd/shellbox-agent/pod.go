package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// What the agent does differently in a Kubernetes pod (sandbox/kube): it
// serves on TCP with a per-session token (--listen), an init container
// delivers it (--install), and under the restricted Pod Security profile it
// runs as the commands' own uid (--no-setuid).

// EnvToken is the variable the token reaches the agent in (a Secret's key,
// through secretKeyRef). The agent reads it once and unsets it; commands
// never see SHELLBOX_* variables.
const EnvToken = "SHELLBOX_AGENT_TOKEN"

// minTokenLen is the shortest token the agent accepts (sandbox/kube sends
// 64 hex digits: 32 random bytes).
const minTokenLen = 32

// fatalSignals are the signals on which the Go runtime ends the process (it
// has handlers for them, so the kernel delivers them even to a pid
// namespace's init), and which a command of the agent's own uid could send
// it. SIGKILL and SIGSTOP are not here: the kernel drops them for init when
// they come from inside its namespace. (A SIGSEGV, SIGBUS or SIGFPE sent
// with kill(2) is ignored by the runtime already: only the kernel's own
// make it panic.)
var fatalSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
	syscall.SIGABRT, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE,
	syscall.SIGALRM, syscall.SIGSTKFLT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
	syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGSYS,
	syscall.SIGPWR,
}

// install copies this executable to o.install (mode 0555, through a
// temporary file and a rename, so a reader never sees half a binary), and
// gives o.own, if set, to o.uid:o.gid with mode 0755. It is what the init
// container of a session pod runs: the shellbox image needs no shell or cp.
func install(o options) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer src.Close()
	dir := filepath.Dir(o.install)
	tmp, err := os.CreateTemp(dir, ".agent-*")
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install: copy to %s: %w", dir, err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return fmt.Errorf("install: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := os.Rename(tmp.Name(), o.install); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if o.own != "" {
		// The mode first, while the directory is still root's: once it is
		// the user's, changing its mode would take CAP_FOWNER, which the
		// init container does not have.
		if err := os.Chmod(o.own, 0o755); err != nil {
			return fmt.Errorf("install: --own: %w", err)
		}
		if err := os.Chown(o.own, o.uid, o.gid); err != nil {
			return fmt.Errorf("install: --own: %w", err)
		}
	}
	return nil
}

// maxTokenFile bounds what tokenFromFile reads.
const maxTokenFile = 4096

// tokenFromFile reads the token from path (trailing newlines dropped) and
// removes the file if it may (a Secret volume is read-only: the file stays,
// readable by root only if the pod says so).
func tokenFromFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("--token-file: %s is over %d bytes", path, maxTokenFile)
	}
	_ = os.Remove(path)
	return strings.TrimRight(string(b), "\r\n"), nil
}
