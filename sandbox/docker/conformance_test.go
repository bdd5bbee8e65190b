package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

// TestConformance runs the runtime conformance suite on the engine, under
// runc and under runsc.
func TestConformance(t *testing.T) {
	runtimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt)
		sandboxtest.Run(t, sandboxtest.Harness{
			Tenant: dockertest.Tenant("conf-" + rt),
			Gvisor: rt == sandbox.RuntimeRunsc,
			New: func(t *testing.T) sandbox.Runtime {
				// A new client on the same engine and state directory: a
				// restarted server.
				r, err := docker.New(dockertest.Engine(t), docker.Config{StateDir: e.stateDir, AgentBinary: e.agent})
				if err != nil {
					t.Fatal(err)
				}
				return r
			},
			Spec: func(t *testing.T, tenant, session, owner string) sandbox.Spec {
				s := e.spec(session)
				s.Tenant, s.Owner = tenant, owner
				return s
			},
			Foreign: func(t *testing.T, tenant, session string) func() bool {
				ctx := context.Background()
				name := docker.ContainerName(tenant, session)
				if _, err := e.cli.ContainerCreate(ctx, &container.Config{Image: e.image,
					Labels: map[string]string{dockertest.LabelTest: "1"}}, nil, nil, nil, name); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = e.cli.ContainerRemove(context.Background(), name, container.RemoveOptions{Force: true})
				})
				return func() bool { _, err := e.cli.ContainerInspect(ctx, name); return err == nil }
			},
			Exec: func(t *testing.T, sb sandbox.Sandbox, command string) string {
				if err := dockertest.WaitSocket(t.Context(), sb); err != nil {
					t.Fatal(err)
				}
				return e.run(sb, 1000, command, 10*time.Second).Stdout
			},
		})
	})
}
