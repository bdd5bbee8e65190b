package containerd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/usage"
)

var _ sandbox.UsageReader = (*Runtime)(nil)

// Usage implements sandbox.UsageReader from the task's cgroup files
// (usage.Cgroup), found once per container from its task's pid (two
// requests: the container, its task) and remembered. The task metrics
// API would answer the same figures through the shim, a round trip per
// reading; the files are read without one.
func (r *Runtime) Usage(ctx context.Context, id string) (usage.Counters, error) {
	cg, err := r.cgroups.Of(id, func() (int, error) { return r.taskPid(ctx, id) })
	if err != nil {
		return usage.Counters{}, err
	}
	if !cg.Found() {
		r.cgroups.Forget(id)
		return usage.Counters{}, fmt.Errorf("%w: containerd: cannot read the cgroup of %s here: this process needs the host's /proc and /sys/fs/cgroup", sandbox.ErrUnavailable, id)
	}
	c, err := cg.Read()
	if err != nil {
		r.cgroups.Forget(id)
		if errors.Is(err, fs.ErrNotExist) {
			return usage.Counters{}, fmt.Errorf("%w: containerd: cgroup of %s: %v", sandbox.ErrNotFound, id, err)
		}
		return usage.Counters{}, fmt.Errorf("%w: containerd: cgroup of %s: %v", sandbox.ErrUnavailable, id, err)
	}
	return c, nil
}

// taskPid is the pid of a container's task.
func (r *Runtime) taskPid(ctx context.Context, id string) (int, error) {
	ctx = r.ctx(ctx)
	ctr, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return 0, r.convert(err, "load container %s", id)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return 0, r.convert(err, "load task %s", id)
	}
	return int(task.Pid()), nil
}

var _ sandbox.WorkspaceReader = (*Runtime)(nil)

// WorkspaceUsage implements sandbox.WorkspaceReader: the used bytes of the
// session's host workspace file system (hostdir.Dirs.WorkspaceUsed: one
// statfs).
func (r *Runtime) WorkspaceUsage(_ context.Context, tenant, session string) (int64, error) {
	return r.dirs.WorkspaceUsed(tenant, session)
}
