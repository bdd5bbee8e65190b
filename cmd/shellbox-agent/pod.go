package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// What the agent does differently in a Kubernetes pod (kube/): it
// serves on TCP with a per-session token (--listen), an init container
// delivers it (--install), and under the restricted Pod Security profile it
// runs as the commands' own uid (--no-setuid).

// EnvToken is the variable the token reaches the agent in (a Secret's key,
// through secretKeyRef). The agent reads it once and unsets it; commands
// never see SHELLBOX_* variables.
const EnvToken = "SHELLBOX_AGENT_TOKEN"

// minTokenLen is the shortest token the agent accepts (kube sends
// 64 hex digits: 32 random bytes).
const minTokenLen = 32

// install copies this executable to o.install (mode 0555, through a
// temporary file and a rename, so a reader never sees half a binary), and
// gives o.own, if set, to o.UID:o.GID with mode 0755. It is what the init
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
	if o.tokenOut != "" {
		if err := writeToken(o.tokenOut); err != nil {
			return err
		}
	}
	if o.own != "" {
		// The mode first, while the directory is still root's: once it is
		// the user's, changing its mode would take CAP_FOWNER, which the
		// init container does not have.
		if err := os.Chmod(o.own, 0o755); err != nil {
			return fmt.Errorf("install: --own: %w", err)
		}
		if err := os.Chown(o.own, o.UID, o.GID); err != nil {
			return fmt.Errorf("install: --own: %w", err)
		}
	}
	return nil
}

// writeToken is --install's --token-out: it writes the token the init
// container got in $SHELLBOX_AGENT_TOKEN (a Secret's key) to path, mode
// 0400, owned by the init container's uid (the agent's: root under
// baseline, the sandbox user under restricted), for the agent's
// --token-file, which removes it before any command runs. The sandbox
// container never has the variable, so the agent's initial environment,
// /proc/1/environ, holds no secret (gVisor shows it to the commands' uid).
// Where the init container is root, the directory becomes root's, mode
// 0700: nothing for commands to read or write there.
func writeToken(path string) error {
	tok := os.Getenv(EnvToken)
	if len(tok) < minTokenLen {
		return fmt.Errorf("--token-out: $%s holds no token of at least %d bytes", EnvToken, minTokenLen)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return fmt.Errorf("--token-out: %w", err)
	}
	if _, err := f.WriteString(tok); err != nil {
		f.Close()
		return fmt.Errorf("--token-out: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--token-out: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("--token-out: %w", err)
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
