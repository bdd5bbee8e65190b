// Package hostcgroup keeps a tenant's CPU cgroup on one host: the parent
// cgroup under which the docker and containerd backends place every
// sandbox of a tenant whose policy sets sandbox.tenantCpus, with that
// many cores of quota for all of them together. It runs on the host,
// beside the engine, and writes the host's cgroup filesystem.
//
// Why a parent: a sandbox's own quota (sandbox.cpus) bounds one session,
// not a tenant, so a tenant with k busy sessions takes k cores of a host
// its other tenants share (docs/reliability.md#load-and-fairness).
//
// Layout: <hierarchy>/shellbox/tenant-<name>-<hash> (Parent) in the
// cgroup v1 cpu controller's hierarchy, or v2's unified one with +cpu
// delegated down to it. The engine (runc, runsc) makes the sandbox's own
// cgroup below it, and the other v1 controllers' parents as it needs
// them. The hierarchies are found in this process's mountinfo, and must
// be the host's (their root "/"): a server in a container that sees only
// its own cgroup would write a quota the engine never uses, so Ensure
// refuses there and says why.
//
// Ensure writes the quota before every creation, so a policy's new value
// holds from its next sandbox on (and for the running ones at once: they
// are below the same parent). On cgroup v1 the kernel refuses a parent's
// quota below a running child's own (a policy that lowered tenantCpus
// under a running sandbox's cpus): the old quota stays, and Ensure says
// which bound is in the way. A policy that drops tenantCpus places its
// next sandboxes outside the parent; the running ones keep its quota
// until they end. Concurrent Ensures of one tenant write the same
// values. An emptied parent stays: one directory per capped tenant,
// reused by its next sandbox; nothing of the server removes it (a
// removal racing a creation would leave the new sandbox under a parent
// the engine made again, without the quota). Remove is for tests and for
// an operator's cleanup of a tenant gone from the policies.
package hostcgroup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/internal/mountinfo"
	"github.com/shellbox/shellbox/sandbox"
)

// Base is the cgroup, below each hierarchy's root, that holds the
// tenants' cgroups.
const Base = "shellbox"

// mounts lists this process's cgroup mounts; a variable for tests.
var mounts = mountinfo.Cgroups

// Parent returns the cgroup path (from the hierarchy's root, with a
// leading slash: Docker's CgroupParent and an OCI cgroupsPath's parent)
// of tenant's sandboxes. A tenant id (confine.CheckID: no "/", never
// "..") is cut at 40 bytes, and a hash of the whole keeps two ids apart.
func Parent(tenant string) (string, error) {
	if err := confine.CheckID("tenant", tenant); err != nil {
		return "", fmt.Errorf("tenant cgroup: %w", err)
	}
	sum := sha256.Sum256([]byte(tenant))
	name := tenant
	if len(name) > 40 {
		name = name[:40]
	}
	return "/" + Base + "/tenant-" + name + "-" + hex.EncodeToString(sum[:8]), nil
}

// hierarchy is a cgroup mount: the v2 one, or a v1 one (cpu: it has the
// cpu controller); root is the cgroup of its hierarchy mounted there
// ("/" on the host).
type hierarchy struct {
	dir, root string
	v2, cpu   bool
}

// hierarchies returns the cgroup hierarchies as this process sees them,
// the one with the cpu controller first: a v1 one on a v1 or hybrid host
// (whose v2 mount holds no controller but gets the engine's cgroups
// too), else the v2 mount.
func hierarchies() ([]hierarchy, error) {
	ms, err := mounts()
	if err != nil {
		return nil, fmt.Errorf("tenant cgroup: reading this process's mounts: %w", err)
	}
	var hs []hierarchy
	v1cpu := false
	for _, m := range ms {
		h := hierarchy{dir: m.Dir, root: m.Root, v2: m.V2, cpu: !m.V2 && slices.Contains(m.Opts, "cpu")}
		v1cpu = v1cpu || h.cpu
		hs = append(hs, h)
	}
	if !v1cpu {
		for i := range hs {
			if hs[i].v2 {
				hs[i].cpu = true
				break
			}
		}
	}
	slices.SortStableFunc(hs, func(a, b hierarchy) int {
		switch {
		case a.cpu == b.cpu:
			return 0
		case a.cpu:
			return -1
		}
		return 1
	})
	if len(hs) == 0 || !hs[0].cpu {
		return nil, errors.New("tenant cgroup: no cgroup v2 mount and no v1 mount of the cpu controller in this process's mounts")
	}
	return hs, nil
}

// cpuDir returns the directory of tenant's parent in the hierarchy that
// has the cpu controller.
func cpuDir(tenant string) (hierarchy, string, error) {
	p, err := Parent(tenant)
	if err != nil {
		return hierarchy{}, "", err
	}
	hs, err := hierarchies()
	if err != nil {
		return hierarchy{}, "", err
	}
	for _, h := range hs {
		if !h.cpu {
			continue
		}
		if h.root != "/" {
			// A container's view: the engine's cgroups are not below it,
			// and a quota written here would bound nothing.
			return hierarchy{}, "", fmt.Errorf("tenant cgroup: %s shows the cgroup %s of its hierarchy, not the host's root: sandbox.tenantCpus needs the server on the engine's host, outside a container (or with the host's cgroup filesystem mounted there)", h.dir, h.root)
		}
		return h, filepath.Join(h.dir, p), nil
	}
	return hierarchy{}, "", errors.New("tenant cgroup: no hierarchy with the cpu controller")
}

// CPUDir returns the directory of tenant's parent cgroup in the hierarchy
// with the cpu controller (for tests and an operator's check).
func CPUDir(tenant string) (string, error) {
	_, d, err := cpuDir(tenant)
	return d, err
}

// Ensure makes tenant's parent cgroup (Parent) and sets its CPU quota to
// cpus cores (sandbox.CPUQuota; 0: none), before the engine places a
// sandbox in it. Its errors name the file and say what is in the way.
func Ensure(tenant string, cpus float64) error {
	h, dir, err := cpuDir(tenant)
	if err != nil {
		return err
	}
	quota, period := int64(-1), sandbox.CPUPeriod.Microseconds()
	if cpus > 0 {
		quota, period = sandbox.CPUQuota(cpus)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tenant cgroup: %w", err)
	}
	if h.v2 {
		// +cpu down the tree: the root's subtree_control, then Base's.
		for _, d := range []string{h.dir, filepath.Join(h.dir, Base)} {
			if err := write(filepath.Join(d, "cgroup.subtree_control"), "+cpu"); err != nil {
				return err
			}
		}
		max := "max"
		if quota > 0 {
			max = strconv.FormatInt(quota, 10)
		}
		// One write, and v2 takes a parent's bound below a child's.
		return write(filepath.Join(dir, "cpu.max"), max+" "+strconv.FormatInt(period, 10))
	}
	return setV1(dir, quota, period, cpus)
}

// setV1 moves a v1 cgroup's quota/period pair to quota/period without
// passing through "no quota", each step one the kernel takes: it refuses
// a pair whose ratio is below a child's (a running sandbox's own quota).
// On a refusal the old pair is put back.
func setV1(dir string, quota, period int64, cpus float64) error {
	qf, pf := filepath.Join(dir, "cpu.cfs_quota_us"), filepath.Join(dir, "cpu.cfs_period_us")
	q0, err := readInt(qf)
	if err != nil {
		return err
	}
	p0, err := readInt(pf)
	if err != nil {
		return err
	}
	if q0 == quota && p0 == period {
		return nil
	}
	type step struct {
		file   string
		v, old int64
	}
	q, p := step{qf, quota, q0}, step{pf, period, p0}
	steps := []step{p, q}
	switch {
	case quota < 0:
		steps = []step{q, p}
	case q0 < 0 || p0 == period:
	case float64(quota)/float64(p0) >= float64(q0)/float64(period):
		// Of the two ways through, the one whose middle pair is the
		// larger bound.
		steps = []step{q, p}
	}
	for i, s := range steps {
		err := write(s.file, strconv.FormatInt(s.v, 10))
		if err == nil {
			continue
		}
		if i > 0 {
			// Back to the old pair, best effort.
			_ = write(steps[0].file, strconv.FormatInt(steps[0].old, 10))
		}
		if errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("tenant cgroup %s: the kernel refused %v cores (quota %d µs per %d): a running sandbox of the tenant has more cpus than that; its old quota (%d per %d) stays until those sandboxes end: %w",
				dir, cpus, quota, period, q0, p0, err)
		}
		return err
	}
	return nil
}

// Remove takes tenant's parent cgroups away from every hierarchy where
// no sandbox is left in them; one still in use stays (EBUSY).
func Remove(tenant string) error {
	dirs, err := Dirs(tenant)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.EBUSY) {
			errs = append(errs, fmt.Errorf("tenant cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Dirs returns where tenant's parent cgroup is, or would be, in every
// hierarchy of the host's view (the engine makes it in each v1
// controller's, and in a hybrid host's v2 one), the cpu one first.
func Dirs(tenant string) ([]string, error) {
	p, err := Parent(tenant)
	if err != nil {
		return nil, err
	}
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hs {
		if h.root == "/" {
			out = append(out, filepath.Join(h.dir, p))
		}
	}
	return out, nil
}

// Quota reads tenant's parent's quota back as cores (0: none), for tests
// and the operator's check.
func Quota(tenant string) (float64, error) {
	h, dir, err := cpuDir(tenant)
	if err != nil {
		return 0, err
	}
	if h.v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return 0, fmt.Errorf("tenant cgroup: %w", err)
		}
		qs, ps, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		if qs == "max" {
			return 0, nil
		}
		q, err1 := strconv.ParseInt(qs, 10, 64)
		p, err2 := strconv.ParseInt(ps, 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("tenant cgroup: %s: %w", dir, err)
		}
		return ratio(q, p)
	}
	q, err := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		return 0, err
	}
	if q < 0 {
		return 0, nil
	}
	p, err := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, err
	}
	return ratio(q, p)
}

func ratio(q, p int64) (float64, error) {
	if p <= 0 {
		return 0, fmt.Errorf("tenant cgroup: quota %d over period %d", q, p)
	}
	return float64(q) / float64(p), nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("tenant cgroup: %w", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("tenant cgroup: %s: %w", path, err)
	}
	return v, nil
}

// write writes an existing cgroup file (never makes one: a file that is
// not there is not a cgroup's).
func write(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0) // as a shell's echo: kernfs ignores O_TRUNC
	if err == nil {
		_, err = f.WriteString(value)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("tenant cgroup: writing %q to %s: %w", value, path, err)
	}
	return nil
}
