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

// maxCgroupPaths bounds the cgroup paths the Runtime remembers.
const maxCgroupPaths = 10_000

// Usage implements sandbox.UsageReader from the task's cgroup files
// (usage.Cgroup), found once per container from its task's pid (two
// requests: the container, its task) and remembered. The task metrics
// API would answer the same figures through the shim, a round trip per
// reading; the files are read without one.
func (r *Runtime) Usage(ctx context.Context, id string) (usage.Counters, error) {
	cg, err := r.cgroupOf(ctx, id)
	if err != nil {
		return usage.Counters{}, err
	}
	c, err := cg.Read()
	if err != nil {
		r.cgMu.Lock()
		delete(r.cgroups, id)
		r.cgMu.Unlock()
		if errors.Is(err, fs.ErrNotExist) {
			return usage.Counters{}, fmt.Errorf("%w: containerd: cgroup of %s: %v", sandbox.ErrNotFound, id, err)
		}
		return usage.Counters{}, fmt.Errorf("%w: containerd: cgroup of %s: %v", sandbox.ErrUnavailable, id, err)
	}
	return c, nil
}

// cgroupOf finds a container's cgroup by its task's pid.
func (r *Runtime) cgroupOf(ctx context.Context, id string) (usage.Cgroup, error) {
	r.cgMu.Lock()
	cg, ok := r.cgroups[id]
	r.cgMu.Unlock()
	if ok {
		return cg, nil
	}
	ctx = r.ctx(ctx)
	ctr, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return usage.Cgroup{}, r.convert(err, "load container %s", id)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return usage.Cgroup{}, r.convert(err, "load task %s", id)
	}
	cg = usage.FindCgroup(int(task.Pid()))
	if !cg.Found() {
		return cg, fmt.Errorf("%w: containerd: cannot read the cgroup of %s (pid %d) here: this process needs the host's /proc and /sys/fs/cgroup", sandbox.ErrUnavailable, id, task.Pid())
	}
	r.cgMu.Lock()
	if r.cgroups == nil || len(r.cgroups) >= maxCgroupPaths {
		r.cgroups = map[string]usage.Cgroup{}
	}
	r.cgroups[id] = cg
	r.cgMu.Unlock()
	return cg, nil
}
