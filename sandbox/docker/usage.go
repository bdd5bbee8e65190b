package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/usage"
)

var _ sandbox.UsageReader = (*Runtime)(nil)

// Usage implements sandbox.UsageReader from the container's cgroup files
// (cgroup v1: cpuacct.usage, memory.usage_in_bytes less inactive file
// pages, memory.max_usage_in_bytes; v2: cpu.stat's usage_usec,
// memory.current less inactive_file, memory.peak where the kernel has it):
// three small reads, the kernel's figures at that instant. The path is
// found once per container from its main process's /proc/<pid>/cgroup
// (one inspect) and remembered. Where the files cannot be read (a server
// in a container of its own, without the host's /proc and cgroup file
// systems), it falls back to the engine's stats API, which answers from
// its collector's last pass: up to a second behind, and a second to
// answer on Engine 20.10.
func (r *Runtime) Usage(ctx context.Context, id string) (usage.Counters, error) {
	cg, err := r.cgroups.Of(id, func() (int, error) { return r.mainPid(ctx, id) })
	if err != nil {
		return usage.Counters{}, err
	}
	if cg.Found() {
		c, err := cg.Read()
		if err == nil {
			return c, nil
		}
		r.cgroups.Forget(id)
		if errors.Is(err, fs.ErrNotExist) {
			return usage.Counters{}, fmt.Errorf("%w: docker: cgroup of %s: %v", sandbox.ErrNotFound, shortID(id), err)
		}
	}
	return r.statsUsage(ctx, id)
}

// mainPid is the pid of a running container's main process.
func (r *Runtime) mainPid(ctx context.Context, id string) (int, error) {
	info, err := r.api.ContainerInspect(ctx, id)
	if err != nil {
		return 0, convert(err, "inspect %s", shortID(id))
	}
	if info.State == nil || !info.State.Running || info.State.Pid <= 0 {
		return 0, fmt.Errorf("%w: docker: %s is not running", sandbox.ErrNotFound, shortID(id))
	}
	return info.State.Pid, nil
}

// statsAPI is the one-shot stats call (API 1.41, Engine 20.10), found on
// the client by assertion so that API stays what creating and listing
// sandboxes need.
type statsAPI interface {
	ContainerStatsOneShot(ctx context.Context, id string) (container.StatsResponseReader, error)
}

// statsUsage is Usage through the engine's stats API.
func (r *Runtime) statsUsage(ctx context.Context, id string) (usage.Counters, error) {
	api, ok := r.api.(statsAPI)
	if !ok {
		return usage.Counters{}, fmt.Errorf("%w: docker: cannot read the cgroup of %s here, and this client has no stats call", sandbox.ErrUnavailable, shortID(id))
	}
	resp, err := api.ContainerStatsOneShot(ctx, id)
	if err != nil {
		return usage.Counters{}, convert(err, "stats of %s", shortID(id))
	}
	defer resp.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return usage.Counters{}, fmt.Errorf("%w: docker: stats of %s: %v", sandbox.ErrUnavailable, shortID(id), err)
	}
	if st.Read.IsZero() || st.PidsStats.Current == 0 && st.CPUStats.CPUUsage.TotalUsage == 0 {
		// A stopped container's stats are all zero.
		return usage.Counters{}, fmt.Errorf("%w: docker: stats of %s: not running", sandbox.ErrNotFound, shortID(id))
	}
	inactive, ok := st.MemoryStats.Stats["total_inactive_file"] // v1
	if !ok {
		inactive = st.MemoryStats.Stats["inactive_file"] // v2
	}
	return usage.Counters{
		CPU:             time.Duration(st.CPUStats.CPUUsage.TotalUsage),
		MemoryBytes:     int64(st.MemoryStats.Usage - min(inactive, st.MemoryStats.Usage)),
		MemoryPeakBytes: int64(st.MemoryStats.MaxUsage),
	}, nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

var _ sandbox.WorkspaceReader = (*Runtime)(nil)

// WorkspaceUsage implements sandbox.WorkspaceReader: the used bytes of the
// session's host workspace file system (hostdir.Dirs.WorkspaceUsed: one
// statfs).
func (r *Runtime) WorkspaceUsage(_ context.Context, tenant, session string) (int64, error) {
	return r.dirs.WorkspaceUsed(tenant, session)
}
