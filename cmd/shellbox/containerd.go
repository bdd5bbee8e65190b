package main

import (
	"fmt"
	"log/slog"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/sandbox/containerd"
)

// openContainerd opens the containerd runtime (sandbox/containerd); log
// (nil: none) gets one line per memory restore with its phases.
func openContainerd(cfg config.Config, agent string, log *slog.Logger) (sandboxRuntime, error) {
	c := cfg.Containerd
	var onRestore func(tenant, session string, t containerd.RestoreTimes)
	if log != nil {
		onRestore = func(tenant, session string, t containerd.RestoreTimes) {
			log.Info("sandbox restored from its memory image", "tenant", tenant, "session", session,
				"bytes", t.Bytes, "unpack", t.Unpack.String(), "files", t.Files.String(),
				"runsc", t.Runsc.String(), "agent", t.Agent.String(), "total", t.Total.String())
		}
	}
	rt, err := containerd.New(containerd.Config{
		Address: c.Address, Namespace: c.Namespace, Snapshotter: c.Snapshotter, RuncRoot: c.RuncRoot,
		RuntimeNames: c.Runtimes, RuntimeConfigs: c.RuntimeConfigs, Checkpoint: c.Checkpoint,
		StateDir: cfg.Sandbox.StateDir, WorkspaceMedium: cfg.Sandbox.WorkspaceMedium, AgentBinary: agent,
		OnRestore: onRestore,
	})
	if err != nil {
		return nil, fmt.Errorf("containerd backend: %w", err)
	}
	return rt, nil
}
