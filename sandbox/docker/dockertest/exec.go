package dockertest

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// ExecTrue runs `bash -c true` in container id as user (uid:gid) in workdir
// through Docker's exec API, the way a harness without an agent would: create,
// attach (which starts it), read to EOF, then inspect for the exit code
// (polled: the exec may still count as running right after EOF). It is the
// baseline the agent path is benchmarked against.
func ExecTrue(ctx context.Context, cli client.APIClient, id, user, workdir string) error {
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		User: user, Cmd: []string{"bash", "-c", "true"}, AttachStdout: true, AttachStderr: true, WorkingDir: workdir,
	})
	if err != nil {
		return fmt.Errorf("exec create: %w", err)
	}
	hr, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return fmt.Errorf("exec attach: %w", err)
	}
	_, err = stdcopy.StdCopy(io.Discard, io.Discard, hr.Reader)
	hr.Close()
	if err != nil {
		return fmt.Errorf("exec output: %w", err)
	}
	for {
		ins, err := cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return fmt.Errorf("exec inspect: %w", err)
		}
		if !ins.Running {
			if ins.ExitCode != 0 {
				return fmt.Errorf("exec: exit code %d", ins.ExitCode)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Microsecond):
		}
	}
}
