// Package hostcgroup keeps a tenant's CPU cgroup on one host: the parent
// cgroup under which the docker and containerd backends place every
// sandbox of a tenant whose policy sets sandbox.tenantCpus, with that
// many cores of quota for all of them together. It runs on the host,
// beside the engine, and writes the host's cgroup filesystem.
//
// Why a parent: a sandbox's own quota (sandbox.cpus) bounds one session,
// not a tenant, so a tenant with k busy sessions takes k cores of a host
// its other tenants share (docs/reliability.md measured another tenant's
// p99 ×3.7-7.7 beside one session's 1 GB outputs on 2 cores, ×1.5 with
// the tenant's sandboxes held to one core together).
//
// Layout: <mount>/shellbox/tenant-<name> in each hierarchy (cgroup v1:
// the cpu controller's; v2: the unified one, with +cpu delegated down
// to it). The engine (runc, runsc) makes the sandbox's own cgroup below
// it, and the other v1 controllers' parents as it needs them. Ensure
// writes the quota before every creation, so a policy's new value holds
// from its next sandbox on (running ones are under the same parent, so
// it holds for them at once). Concurrent Ensures of one tenant write the
// same values. An emptied parent stays: one directory per capped tenant,
// reused by its next sandbox; nothing of the server removes it (a removal
// racing a creation would leave the new sandbox under a parent the
// engine made again, without the quota). Remove is for tests and for an
// operator's cleanup of a tenant gone from the policies.
package hostcgroup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/shellbox/shellbox/sandbox"
)

// Base is the cgroup, below each hierarchy's root, that holds the
// tenants' cgroups.
const Base = "shellbox"

// Root is the host's cgroup mount; a variable for tests.
var Root = "/sys/fs/cgroup"

// Parent returns the cgroup path (from the hierarchy's root, with a
// leading slash: Docker's CgroupParent and an OCI cgroupsPath's parent)
// of tenant's sandboxes. A tenant id's characters are all cgroupfs-safe
// (sandbox.CheckID), but its length is cut and a hash of the whole keeps
// two long ids apart.
func Parent(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	name := tenant
	if len(name) > 40 {
		name = name[:40]
	}
	return "/" + Base + "/tenant-" + name + "-" + hex.EncodeToString(sum[:4])
}

// Ensure makes tenant's parent cgroup (Parent) and sets its CPU quota to
// cpus cores over sandbox.CPUPeriod (cpus 0: no quota), before the
// engine places a sandbox in it. Its errors name the file and say what
// the host lacks.
func Ensure(tenant string, cpus float64) error {
	quota, period := int64(-1), int64(sandbox.CPUPeriod.Microseconds())
	if cpus > 0 {
		quota, period = sandbox.CPUQuota(cpus)
	}
	if unified() {
		dir := filepath.Join(Root, Parent(tenant))
		// +cpu down the tree: the root's subtree_control, then Base's.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("tenant cgroup: %w", err)
		}
		for _, d := range []string{Root, filepath.Join(Root, Base)} {
			if err := write(filepath.Join(d, "cgroup.subtree_control"), "+cpu"); err != nil {
				return err
			}
		}
		max := "max"
		if quota > 0 {
			max = strconv.FormatInt(quota, 10)
		}
		return write(filepath.Join(dir, "cpu.max"), max+" "+strconv.FormatInt(period, 10))
	}
	dir := filepath.Join(Root, "cpu", Parent(tenant))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tenant cgroup (cgroup v1, the cpu controller): %w", err)
	}
	// The period first when the quota grows, the quota first when it
	// shrinks: the kernel refuses a pair that would leave a child's
	// quota above its parent's at any step (-1, none, always fits).
	if err := write(filepath.Join(dir, "cpu.cfs_quota_us"), "-1"); err != nil {
		return err
	}
	if err := write(filepath.Join(dir, "cpu.cfs_period_us"), strconv.FormatInt(period, 10)); err != nil {
		return err
	}
	return write(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10))
}

// Remove takes tenant's parent cgroups away from every hierarchy where
// no sandbox is left in them; one still in use stays (EBUSY).
func Remove(tenant string) error {
	var dirs []string
	if unified() {
		dirs = []string{filepath.Join(Root, Parent(tenant))}
	} else {
		ents, err := os.ReadDir(Root)
		if err != nil {
			return fmt.Errorf("tenant cgroup: %w", err)
		}
		for _, e := range ents {
			dirs = append(dirs, filepath.Join(Root, e.Name(), Parent(tenant)))
		}
	}
	var errs []error
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errBusy) {
			errs = append(errs, fmt.Errorf("tenant cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Quota reads tenant's parent's quota back as cores (0: none), for tests
// and the operator's check.
func Quota(tenant string) (float64, error) {
	if unified() {
		b, err := os.ReadFile(filepath.Join(Root, Parent(tenant), "cpu.max"))
		if err != nil {
			return 0, fmt.Errorf("tenant cgroup: %w", err)
		}
		q, p, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		if q == "max" {
			return 0, nil
		}
		return ratio(q, p)
	}
	dir := filepath.Join(Root, "cpu", Parent(tenant))
	q, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		return 0, fmt.Errorf("tenant cgroup: %w", err)
	}
	p, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, fmt.Errorf("tenant cgroup: %w", err)
	}
	if strings.TrimSpace(string(q)) == "-1" {
		return 0, nil
	}
	return ratio(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

func ratio(q, p string) (float64, error) {
	qi, err1 := strconv.ParseInt(q, 10, 64)
	pi, err2 := strconv.ParseInt(p, 10, 64)
	if err := errors.Join(err1, err2); err != nil || pi <= 0 {
		return 0, fmt.Errorf("tenant cgroup: quota %q over period %q: %w", q, p, err)
	}
	return float64(qi) / float64(pi), nil
}

// unified tells a cgroup v2 host (one hierarchy at Root).
func unified() bool {
	_, err := os.Stat(filepath.Join(Root, "cgroup.controllers"))
	return err == nil
}

func write(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("tenant cgroup: writing %q to %s (the server must run on the host as root, with its cgroup filesystem writable): %w", value, path, err)
	}
	return nil
}
