package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/session"
)

// SandboxConfig is the sandbox of every session on the sandboxed backends
// (docker, containerd): one hardened container per (tenant, session),
// commands run through the agent inside it. A tenant's policy overrides
// the image, runtime, resources and user.
type SandboxConfig struct {
	StateDir       string  `mapstructure:"stateDir"`
	Owner          string  `mapstructure:"owner"`
	Image          string  `mapstructure:"image"`
	Runtime        string  `mapstructure:"runtime"`
	Agent          string  `mapstructure:"agent"`
	CPUs           float64 `mapstructure:"cpus"`
	MemoryBytes    int64   `mapstructure:"memoryBytes"`
	PidsLimit      int64   `mapstructure:"pidsLimit"`
	WorkspaceBytes int64   `mapstructure:"workspaceBytes"`
	TmpBytes       int64   `mapstructure:"tmpBytes"`
	SpillBytes     int64   `mapstructure:"spillBytes"`
	// Labels are extra labels on every sandbox (e.g. for an operator's
	// inventory); shellbox's own org.shellbox.* labels cannot be set.
	Labels map[string]string `mapstructure:"labels"`
}

func sandboxDefaults() map[string]any {
	d := sandbox.DefaultSpec("t", "s")
	owner := "shellbox"
	if h, err := os.Hostname(); err == nil && sandbox.CheckID("owner", "shellbox-"+h) == nil {
		owner = "shellbox-" + h
	}
	return map[string]any{
		"sandbox::stateDir":       "/var/lib/shellbox",
		"sandbox::owner":          owner,
		"sandbox::image":          "shellbox-sandbox:bookworm",
		"sandbox::runtime":        d.Runtime,
		"sandbox::agent":          "",
		"sandbox::cpus":           d.CPUs,
		"sandbox::memoryBytes":    d.MemoryBytes,
		"sandbox::pidsLimit":      d.PidsLimit,
		"sandbox::workspaceBytes": d.WorkspaceBytes,
		"sandbox::tmpBytes":       d.TmpBytes,
		"sandbox::spillBytes":     d.SpillBytes,
		"sandbox::labels":         map[string]string{},
	}
}

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

// defaults are the sandbox settings of sessions where a policy sets none.
func (c SandboxConfig) defaults() session.Defaults {
	return session.Defaults{Image: c.Image, Runtime: c.Runtime, CPUs: c.CPUs, MemoryBytes: c.MemoryBytes,
		PidsLimit: c.PidsLimit, WorkspaceBytes: c.WorkspaceBytes, TmpBytes: c.TmpBytes, SpillBytes: c.SpillBytes, Labels: c.Labels}
}
