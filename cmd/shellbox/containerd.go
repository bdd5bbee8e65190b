package main

import (
	"fmt"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/sandbox/containerd"
)

// openContainerd opens the containerd runtime (sandbox/containerd).
func openContainerd(cfg config.Config, agent string) (sandboxRuntime, error) {
	c := cfg.Containerd
	rt, err := containerd.New(containerd.Config{
		Address: c.Address, Namespace: c.Namespace, Snapshotter: c.Snapshotter, RuncRoot: c.RuncRoot,
		RuntimeNames: c.Runtimes, RuntimeConfigs: c.RuntimeConfigs, Checkpoint: c.Checkpoint,
		StateDir: cfg.Sandbox.StateDir, WorkspaceMedium: cfg.Sandbox.WorkspaceMedium, AgentBinary: agent,
	})
	if err != nil {
		return nil, fmt.Errorf("containerd backend: %w", err)
	}
	return rt, nil
}
