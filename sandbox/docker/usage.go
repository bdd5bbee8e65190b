package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/usage"
)

var _ sandbox.UsageReader = (*Runtime)(nil)

// cgroupRoot is where the host's cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// maxCgroupPaths bounds the cgroup paths the Runtime remembers.
const maxCgroupPaths = 10_000

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
	cg, err := r.cgroupOf(ctx, id)
	if err != nil {
		return usage.Counters{}, err
	}
	if cg.ok {
		c, err := cg.read()
		if err == nil {
			return c, nil
		}
		r.mu.Lock()
		delete(r.cgroups, id)
		r.mu.Unlock()
		if errors.Is(err, fs.ErrNotExist) {
			return usage.Counters{}, fmt.Errorf("%w: docker: cgroup of %s: %v", sandbox.ErrNotFound, shortID(id), err)
		}
	}
	return r.statsUsage(ctx, id)
}

// cgroup is where a container's counters are: cgroup v1's cpuacct and
// memory directories, or v2's one; ok false when they cannot be read here.
type cgroup struct {
	ok          bool
	v2          bool
	cpu, memory string
}

func (r *Runtime) cgroupOf(ctx context.Context, id string) (cgroup, error) {
	r.mu.Lock()
	cg, ok := r.cgroups[id]
	r.mu.Unlock()
	if ok {
		return cg, nil
	}
	info, err := r.api.ContainerInspect(ctx, id)
	if err != nil {
		return cgroup{}, convert(err, "inspect %s", shortID(id))
	}
	if info.State == nil || !info.State.Running || info.State.Pid <= 0 {
		return cgroup{}, fmt.Errorf("%w: docker: %s is not running", sandbox.ErrNotFound, shortID(id))
	}
	cg = findCgroup(info.State.Pid)
	r.mu.Lock()
	if r.cgroups == nil || len(r.cgroups) >= maxCgroupPaths {
		r.cgroups = map[string]cgroup{}
	}
	r.cgroups[id] = cg
	r.mu.Unlock()
	return cg, nil
}

// findCgroup reads /proc/<pid>/cgroup; the zero cgroup if it cannot be
// read or its directories are not here.
func findCgroup(pid int) cgroup {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return cgroup{}
	}
	var cg cgroup
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := strings.Split(parts[1], ","), parts[2]
		if parts[0] == "0" && parts[1] == "" {
			dir := filepath.Join(cgroupRoot, path)
			if exists(filepath.Join(dir, "cpu.stat")) {
				return cgroup{ok: true, v2: true, cpu: dir, memory: dir}
			}
			continue
		}
		for _, c := range ctrls {
			switch c {
			case "cpuacct":
				for _, mount := range []string{parts[1], "cpuacct"} {
					if dir := filepath.Join(cgroupRoot, mount, path); exists(filepath.Join(dir, "cpuacct.usage")) {
						cg.cpu = dir
						break
					}
				}
			case "memory":
				if dir := filepath.Join(cgroupRoot, "memory", path); exists(filepath.Join(dir, "memory.usage_in_bytes")) {
					cg.memory = dir
				}
			}
		}
	}
	cg.ok = cg.cpu != "" && cg.memory != ""
	return cg
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// read reads the counters from the cgroup's files.
func (cg cgroup) read() (usage.Counters, error) {
	var c usage.Counters
	if cg.v2 {
		stat, err := keyed(filepath.Join(cg.cpu, "cpu.stat"))
		if err != nil {
			return c, err
		}
		c.CPU = time.Duration(stat["usage_usec"]) * time.Microsecond
		cur, err := number(filepath.Join(cg.memory, "memory.current"))
		if err != nil {
			return c, err
		}
		mstat, err := keyed(filepath.Join(cg.memory, "memory.stat"))
		if err != nil {
			return c, err
		}
		c.MemoryBytes = less(cur, mstat["inactive_file"])
		if peak, err := number(filepath.Join(cg.memory, "memory.peak")); err == nil { // Linux 5.19+
			c.MemoryPeakBytes = int64(peak)
		}
		return c, nil
	}
	ns, err := number(filepath.Join(cg.cpu, "cpuacct.usage"))
	if err != nil {
		return c, err
	}
	c.CPU = time.Duration(ns)
	cur, err := number(filepath.Join(cg.memory, "memory.usage_in_bytes"))
	if err != nil {
		return c, err
	}
	mstat, err := keyed(filepath.Join(cg.memory, "memory.stat"))
	if err != nil {
		return c, err
	}
	c.MemoryBytes = less(cur, mstat["total_inactive_file"])
	peak, err := number(filepath.Join(cg.memory, "memory.max_usage_in_bytes"))
	if err != nil {
		return c, err
	}
	c.MemoryPeakBytes = int64(peak)
	return c, nil
}

func less(a, b uint64) int64 {
	if b < a {
		return int64(a - b)
	}
	return int64(a)
}

func number(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// keyed reads a "key value" per line file (cpu.stat, memory.stat).
func keyed(p string) (map[string]uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if n, err := strconv.ParseUint(v, 10, 64); ok && err == nil {
			out[k] = n
		}
	}
	return out, nil
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
		MemoryBytes:     less(st.MemoryStats.Usage, inactive),
		MemoryPeakBytes: int64(st.MemoryStats.MaxUsage),
	}, nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
