// Package enginetest lists the sandbox engines the suites above sandbox/
// run on, so that the executor conformance suite, the hostile suite, the
// restart suite and the server's end-to-end suite run unchanged on Docker
// and on containerd: Each runs a test once per engine. Docker is always
// tried; containerd when SHELLBOX_CONTAINERD_ADDRESS names a daemon
// (.ci/setup-containerd.sh starts one). Without an engine a test skips with
// the reason, and fails under CI=true.
package enginetest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// Engine is one sandbox engine.
type Engine struct {
	// Name is the backend's name: "docker" or "containerd".
	Name string
	// Runtime returns a runtime of the engine with the sessions' host
	// directories in stateDir and agent as the agent binary, closed when t
	// ends. It requires the Spec runtime (runc, runsc) to be available.
	Runtime func(t testing.TB, stateDir, agent, runtime string) sandbox.Runtime
	// Config returns the lines of shellbox.yaml that select the engine:
	// "backend: <name>" and the engine's own section, for tests that run
	// shellbox processes.
	Config func(t testing.TB) string
	// Pid returns the host pid of a running sandbox's first process (under
	// gVisor: the sentry).
	Pid func(t testing.TB, id string) int
	// RemoveBehind removes a sandbox through the engine itself, behind
	// shellbox's back (docker rm -f).
	RemoveBehind func(t testing.TB, id string)
}

// Docker is the Docker engine (DOCKER_HOST, else the default socket).
var Docker = Engine{
	Name: "docker",
	Runtime: func(t testing.TB, stateDir, agent, runtime string) sandbox.Runtime {
		t.Helper()
		rt, err := docker.New(dockertest.Engine(t), docker.Config{StateDir: stateDir, AgentBinary: agent})
		if err != nil {
			t.Fatal(err)
		}
		require(t, "Docker engine", rt, runtime, ".ci/setup-docker.sh registers runsc")
		return rt
	},
	Config: func(testing.TB) string { return "backend: docker\n" },
	Pid: func(t testing.TB, id string) int {
		t.Helper()
		info, err := dockertest.Engine(t).ContainerInspect(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Pid
	},
	RemoveBehind: func(t testing.TB, id string) {
		t.Helper()
		err := dockertest.Engine(t).ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true})
		if err != nil {
			t.Fatal(err)
		}
	},
}

// Containerd is the containerd daemon at SHELLBOX_CONTAINERD_ADDRESS,
// configured as .ci/setup-containerd.sh sets it up.
var Containerd = Engine{
	Name: "containerd",
	Runtime: func(t testing.TB, stateDir, agent, runtime string) sandbox.Runtime {
		t.Helper()
		cfg := containerdtest.Config(t, containerdtest.Address(t))
		cfg.StateDir, cfg.AgentBinary = stateDir, agent
		return containerdtest.New(t, cfg, runtime)
	},
	Config: func(t testing.TB) string {
		t.Helper()
		cfg := containerdtest.Config(t, containerdtest.Address(t))
		var b strings.Builder
		fmt.Fprintf(&b, "backend: containerd\ncontainerd:\n  address: %q\n  namespace: %q\n  runcRoot: %q\n",
			cfg.Address, cfg.Namespace, cfg.RuncRoot)
		if len(cfg.RuntimeConfigs) > 0 {
			b.WriteString("  runtimeConfigs:\n")
			keys := make([]string, 0, len(cfg.RuntimeConfigs))
			for k := range cfg.RuntimeConfigs {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, "    %s: %q\n", k, cfg.RuntimeConfigs[k])
			}
		}
		return b.String()
	},
	Pid: func(t testing.TB, id string) int {
		t.Helper()
		return int(containerdtest.TaskPid(t, containerdtest.Address(t), id))
	},
	RemoveBehind: func(t testing.TB, id string) {
		t.Helper()
		containerdtest.RemoveBehind(t, containerdtest.Address(t), id)
	},
}

// All are the engines, Docker first.
var All = []Engine{Docker, Containerd}

// Each runs fn as a subtest per engine, named after it.
func Each(t *testing.T, fn func(t *testing.T, e Engine)) {
	for _, e := range All {
		t.Run(e.Name, func(t *testing.T) { fn(t, e) })
	}
}

// require skips (fails under CI=true) when rt lacks the Spec runtime.
func require(t testing.TB, engine string, rt sandbox.Runtime, runtime, hint string) {
	t.Helper()
	l, ok := rt.(sandbox.RuntimeLister)
	if !ok || runtime == "" {
		return
	}
	have, err := l.Runtimes(context.Background())
	if err != nil {
		t.Fatalf("%s runtimes: %v", engine, err)
	}
	dockertest.Require(t, slices.Contains(have, runtime), fmt.Sprintf("the %s has no %q runtime (%v); %s", engine, runtime, have, hint))
}
