package main

import (
	"fmt"
	"strings"

	"github.com/spf13/viper"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker"
)

// DockerConfig is what only the docker backend needs. The engine itself is
// found through the environment (DOCKER_HOST, ...).
type DockerConfig struct {
	// EngineRuntimes maps a policy's runtime (runc, runsc) to the name the
	// engine registered it under, when they differ (daemon.json "runtimes").
	EngineRuntimes map[string]string `mapstructure:"engineRuntimes"`
}

// ContainerdConfig is what only the containerd backend needs.
type ContainerdConfig struct {
	Address     string `mapstructure:"address"`
	Namespace   string `mapstructure:"namespace"`
	Snapshotter string `mapstructure:"snapshotter"`
	// RuncRoot is runc's state directory, for a containerd that runs beside
	// another one ("" = the shim's default).
	RuncRoot string `mapstructure:"runcRoot"`
	// Runtimes maps a policy's runtime (runc, runsc) to containerd's
	// runtime (shim) name; RuntimeConfigs to the options file its shim
	// reads (runsc.toml).
	Runtimes       map[string]string `mapstructure:"runtimes"`
	RuntimeConfigs map[string]string `mapstructure:"runtimeConfigs"`
}

func runtimeDefaults() map[string]any {
	return map[string]any{
		"docker::engineRuntimes":     map[string]string{},
		"containerd::address":        "/run/containerd/containerd.sock",
		"containerd::namespace":      "shellbox",
		"containerd::snapshotter":    "",
		"containerd::runcRoot":       "",
		"containerd::runtimes":       map[string]string{},
		"containerd::runtimeConfigs": map[string]string{},
	}
}

// movedKeys are the sandbox settings that lived under docker.* before the
// containerd backend: a file that still sets them is refused with where
// they went, rather than with viper's "invalid keys".
var movedKeys = []string{"stateDir", "owner", "image", "runtime", "agent", "cpus", "memoryBytes",
	"pidsLimit", "workspaceBytes", "tmpBytes", "spillBytes", "labels"}

func checkMovedKeys(v *viper.Viper) error {
	var moved []string
	for _, k := range movedKeys {
		if v.InConfig("docker::" + strings.ToLower(k)) {
			moved = append(moved, "docker."+k+" is now sandbox."+k)
		}
	}
	if len(moved) > 0 {
		return fmt.Errorf("%s (the sandbox settings are the same on every runtime)", strings.Join(moved, "; "))
	}
	return nil
}

// sandboxRuntime is a runtime of the sandboxed backends, with the abilities
// the CLI and the server use.
type sandboxRuntime interface {
	sandbox.Runtime
	sandbox.Pinger
	Close() error
}

// isSandboxed reports whether a backend runs sessions in sandboxes.
func isSandboxed(backend string) bool { return backend == "docker" || backend == "containerd" }

// backends lists the backends, for errors.
const backends = "local, docker, containerd"

// openRuntime opens the runtime of a sandboxed backend, with the agent
// binary at agent ("" : not found; creating a sandbox then fails, and the
// spec builder says why).
func openRuntime(cfg Config, agent string) (sandboxRuntime, error) {
	if agent == "" {
		agent = "/nonexistent/shellbox-agent"
	}
	switch cfg.Backend {
	case "docker":
		rt, err := docker.NewFromEnv(docker.Config{StateDir: cfg.Sandbox.StateDir, AgentBinary: agent,
			EngineRuntimes: cfg.Docker.EngineRuntimes})
		if err != nil {
			return nil, fmt.Errorf("docker backend: %w", err)
		}
		return rt, nil
	case "containerd":
		return openContainerd(cfg, agent)
	}
	return nil, unknownBackend(cfg.Backend)
}

func unknownBackend(name string) error {
	return fmt.Errorf("unknown backend %q (available: %s)", name, backends)
}
