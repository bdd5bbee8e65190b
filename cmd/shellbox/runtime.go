package main

import (
	"fmt"
	"log/slog"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker"
)

// sandboxRuntime is a runtime of the sandboxed backends, with the abilities
// the CLI and the server use. SessionState is part of it so that wrappers
// (creatingRuntime) keep it: ending a session removes its workspace.
type sandboxRuntime interface {
	sandbox.Runtime
	sandbox.Pinger
	sandbox.SessionState
	Close() error
}

// isSandboxed reports whether a backend runs sessions in sandboxes.
func isSandboxed(backend string) bool {
	return backend == "docker" || backend == "containerd" || backend == "kube"
}

// backends lists the backends, for errors.
const backends = "local, docker, containerd, kube"

// openRuntime opens the runtime of a sandboxed backend, with the agent
// binary at agent ("" : not found; creating a sandbox then fails, and the
// spec builder says why; kube takes it from kube.agentImage instead). A
// server's log (nil: none) hears where each memory restore's time went.
func openRuntime(cfg config.Config, agent string, log *slog.Logger) (sandboxRuntime, error) {
	if agent == "" {
		agent = "/nonexistent/shellbox-agent"
	}
	switch cfg.Backend {
	case "docker":
		rt, err := docker.NewFromEnv(docker.Config{StateDir: cfg.Sandbox.StateDir, AgentBinary: agent,
			WorkspaceMedium: cfg.Sandbox.WorkspaceMedium, EngineRuntimes: cfg.Docker.EngineRuntimes})
		if err != nil {
			return nil, fmt.Errorf("docker backend: %w", err)
		}
		return rt, nil
	case "containerd":
		return openContainerd(cfg, agent, log)
	case "kube":
		// The session pods copy the agent from kube.agentImage.
		return openKube(cfg)
	}
	return nil, unknownBackend(cfg.Backend)
}

func unknownBackend(name string) error {
	return fmt.Errorf("unknown backend %q (available: %s)", name, backends)
}
