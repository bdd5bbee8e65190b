package usage

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cgroupRoot is where the host's cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// Cgroup is where a sandbox's counters are in the kernel's cgroup file
// systems: cgroup v1's cpuacct and memory directories, or v2's one. The
// runtimes whose sandboxes are host cgroups (Docker, containerd) find it
// by their first process's pid and read it: cgroup v1's cpuacct.usage,
// memory.usage_in_bytes less inactive file pages and
// memory.max_usage_in_bytes; v2's cpu.stat usage_usec, memory.current less
// inactive_file, and memory.peak where the kernel has it (Linux 5.19+).
type Cgroup struct {
	ok          bool
	v2          bool
	cpu, memory string
}

// Found reports whether the cgroup was found and can be read here.
func (cg Cgroup) Found() bool { return cg.ok }

// FindCgroup returns the cgroup of process pid, from /proc/<pid>/cgroup
// (the sandbox's first process: a container's init, gVisor's sandbox
// process): the zero Cgroup if that cannot be read or its directories are
// not under /sys/fs/cgroup here (a process in a container of its own
// without the host's /proc and cgroup file systems).
func FindCgroup(pid int) Cgroup {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return Cgroup{}
	}
	var cg Cgroup
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := strings.Split(parts[1], ","), parts[2]
		if parts[0] == "0" && parts[1] == "" {
			dir := filepath.Join(cgroupRoot, path)
			if exists(filepath.Join(dir, "cpu.stat")) {
				return Cgroup{ok: true, v2: true, cpu: dir, memory: dir}
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

// Read reads the counters from the cgroup's files: three or four small
// reads, the kernel's figures at that instant. An error wrapping
// fs.ErrNotExist: the cgroup is gone (its sandbox removed).
func (cg Cgroup) Read() (Counters, error) {
	if !cg.ok {
		return Counters{}, errors.New("usage: no cgroup to read")
	}
	var c Counters
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

// maxCgroups bounds the cgroups a Cgroups remembers.
const maxCgroups = 10_000

// Cgroups remembers the cgroup of each sandbox a runtime reads, by its id:
// found once from a process of it (FindCgroup), forgotten when a read
// fails; at most maxCgroups (all are dropped when it is full: each is one
// lookup to find again). The zero value is ready; safe for concurrent use.
type Cgroups struct {
	mu sync.Mutex
	m  map[string]Cgroup
}

// Of returns id's cgroup, calling pid for a process of it only when id is
// not remembered; a cgroup not found (no host /proc or cgroup file
// system here) is remembered too, so pid is not asked again.
func (c *Cgroups) Of(id string, pid func() (int, error)) (Cgroup, error) {
	c.mu.Lock()
	cg, ok := c.m[id]
	c.mu.Unlock()
	if ok {
		return cg, nil
	}
	p, err := pid()
	if err != nil {
		return Cgroup{}, err
	}
	cg = FindCgroup(p)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCgroups {
		c.m = map[string]Cgroup{}
	}
	c.m[id] = cg
	c.mu.Unlock()
	return cg, nil
}

// Forget drops id's cgroup (a read of it failed: the sandbox is gone, or
// was made again under the same id).
func (c *Cgroups) Forget(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}
