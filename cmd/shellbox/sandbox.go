package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
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

// dockerBackend is a sandboxed backend's parts, for call and sessions.
type dockerBackend struct {
	rt      sandboxRuntime
	manager *sandbox.Manager
	exec    *sandboxed.Executor
}

func (b *dockerBackend) Close() error {
	var err error
	if b.exec != nil {
		err = b.exec.Close()
	}
	return errors.Join(err, b.rt.Close())
}

// newDockerBackend wires runtime, manager and executor. runtime overrides
// sandbox.runtime when non-empty (the --runtime flag). pol, if set, is the
// tenant's policy: its sandbox settings replace sandbox.*, its image
// allowlist and runtime bind the flag and the configuration, a new sandbox
// gets its sandbox.mounts, and warn hears what the backend cannot give it.
func newDockerBackend(cfg Config, runtime string, pol *policies.Policy, warn io.Writer) (*dockerBackend, error) {
	dc := cfg.Sandbox
	var (
		polOpts   []sandbox.Opt
		agentArgs []string
	)
	if pol != nil {
		if runtime != "" && runtime != pol.Runtime {
			return nil, fmt.Errorf("runtime %s is not allowed by policy %s (sandbox.runtime: %s)", runtime, pol.Tenant, pol.Runtime)
		}
		img, err := pol.Image("", dc.Image)
		if err != nil {
			return nil, err
		}
		dc.Image, runtime = img, pol.Runtime
		polOpts = pol.SpecOptions()
		// The agent drops to the policy's user for commands (Spec.UID only
		// owns /workspace).
		agentArgs = []string{"--uid", strconv.Itoa(pol.User.UID), "--gid", strconv.Itoa(pol.User.GID)}
	}
	if runtime != "" {
		dc.Runtime = runtime
	}
	agent, agentErr := agentBinary(dc.Agent)
	rt, err := openRuntime(cfg, agent)
	if err != nil {
		return nil, err
	}
	m, err := sandbox.NewManager(sandbox.Config{
		Runtime: rt,
		Owner:   dc.Owner,
		Ready:   sandboxed.WaitAgent,
	})
	if err != nil {
		rt.Close()
		return nil, fmt.Errorf("%s backend: %w", cfg.Backend, err)
	}
	b := &dockerBackend{rt: rt, manager: m}
	specFor := func(session string) (sandbox.Spec, error) {
		if agentErr != nil {
			return sandbox.Spec{}, agentErr
		}
		opts := polOpts
		if pol != nil {
			if err := checkSessionQuota(rt, dc.Owner, cfg.Tenant, pol, session); err != nil {
				return sandbox.Spec{}, err
			}
			// A one-shot call asks for no mounts: it gets the policy's.
			mounts, err := pol.SessionMounts(nil)
			if err != nil {
				return sandbox.Spec{}, err
			}
			opts = append(slices.Clone(polOpts), sandbox.WithMounts(mounts...))
		}
		return dockerSpec(dc, cfg.Tenant, session, agent, agentArgs, opts...)
	}
	scfg := sandboxed.Config{
		Manager: m,
		Tenant:  cfg.Tenant,
		Spec:    specFor,
		Limits:  cfg.Limits,
	}
	if pol != nil {
		// The call's process relays the sandbox's egress while it runs; a
		// background task's connections wait for the next process (or a
		// server) to relay them.
		w := warn
		if w == nil {
			w = io.Discard
		}
		scfg.Egress = egressRelay(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})), cfg.Egress,
			func(_, target string) error { return pol.CheckEgress(target) }, nil)
	}
	ex, err := sandboxed.New(scfg)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.exec = ex
	return b, nil
}

// checkSessionQuota refuses a new session past the policy's
// limits.sessions: the tenant's sandboxes of this owner are counted, the
// session's own (being re-adopted) excepted.
func checkSessionQuota(rt sandbox.Runtime, owner, tenant string, pol *policies.Policy, session string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := rt.List(ctx, owner)
	if err != nil {
		return fmt.Errorf("count the tenant's sessions: %w", err)
	}
	n := 0
	for _, sb := range list {
		if sb.Tenant != tenant {
			continue
		}
		if sb.Session == session {
			return nil // exists: not a new session
		}
		n++
	}
	return pol.CheckSessions(n)
}

var _ executor.BashExecutor = (*sandboxed.Executor)(nil)

// dockerSpec is the sandbox spec of a new session of tenant: sandbox.* with
// the agent binary at agent.
func dockerSpec(dc SandboxConfig, tenant, session, agent string, agentArgs []string, extra ...sandbox.Opt) (sandbox.Spec, error) {
	return sandbox.NewSpec(tenant, session,
		sandbox.WithImage(dc.Image),
		sandbox.WithRuntime(dc.Runtime),
		sandbox.WithCPUs(dc.CPUs),
		sandbox.WithMemory(dc.MemoryBytes),
		sandbox.WithPidsLimit(dc.PidsLimit),
		sandbox.WithWorkspaceSize(dc.WorkspaceBytes),
		sandbox.WithTmpSize(dc.TmpBytes),
		sandbox.WithSpillSize(dc.SpillBytes),
		sandbox.WithLabels(dc.Labels),
		sandbox.WithAgentArgs(agentArgs...),
		sandbox.Compose(extra...),
	)
}
