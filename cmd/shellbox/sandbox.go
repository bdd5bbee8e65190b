package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// agentBinary finds the static agent binary: the configured path, else
// shellbox-agent next to this executable, else on PATH.
func agentBinary(configured string) (string, error) {
	if configured != "" {
		p, err := filepath.Abs(configured)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("sandbox.agent: %w", err)
		}
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "shellbox-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("shellbox-agent"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("the shellbox-agent binary was not found next to shellbox or on PATH; build it with " +
		"`CGO_ENABLED=0 go build -o \"$(dirname \"$(command -v shellbox)\")/shellbox-agent\" ./cmd/shellbox-agent` or set sandbox.agent")
}
