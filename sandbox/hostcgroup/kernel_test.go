package hostcgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// realCgroups needs this host's cgroup filesystem, writable: root on the
// host (CI). Without it a laptop skips, saying why; CI fails.
func realCgroups(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := CPUDir("shellbox-probe"); err != nil {
		why = err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true, so not skipping: the host's cgroup filesystem is not writable here: %s", why)
	}
	t.Skipf("the host's cgroup filesystem is not writable here (%s): run as root on the host", why)
}

// On the kernel: a tenant's quota written, raised and lowered; lowered
// below a running child's own quota (a sandbox with more cpus than the
// new tenantCpus), cgroup v1 refuses, and the old quota stays, never
// "none"; the parent removed once empty.
func TestEnsureOnTheKernel(t *testing.T) {
	realCgroups(t)
	tenant := fmt.Sprintf("hostcgroup-test-%d", os.Getpid())
	t.Cleanup(func() { _ = Remove(tenant) })
	for _, cores := range []float64{2, 0.5, 1.5, 0.05, 1} {
		if err := Ensure(tenant, cores); err != nil {
			t.Fatalf("Ensure(%v): %v", cores, err)
		}
		if got, err := Quota(tenant); err != nil || got != cores {
			t.Fatalf("after Ensure(%v): Quota = %v, %v", cores, got, err)
		}
	}
	h, dir, err := cpuDir(tenant)
	if err != nil {
		t.Fatal(err)
	}
	// A child as the engine makes one, with a quota of 1 core.
	child := filepath.Join(dir, "sandbox")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Rmdir(child) })
	if h.v2 {
		if err := write(filepath.Join(child, "cpu.max"), "10000 10000"); err != nil {
			t.Fatal(err)
		}
	} else {
		for _, kv := range [][2]string{{"cpu.cfs_period_us", "10000"}, {"cpu.cfs_quota_us", "10000"}} {
			if err := write(filepath.Join(child, kv[0]), kv[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = Ensure(tenant, 0.5)
	got, qerr := Quota(tenant)
	if h.v2 {
		// v2 takes a parent's bound below a child's (the smaller holds).
		if err != nil || qerr != nil || got != 0.5 {
			t.Errorf("v2: Ensure(0.5) over a 1-core child: %v; Quota %v, %v", err, got, qerr)
		}
	} else {
		if err == nil || !strings.Contains(err.Error(), "a running sandbox of the tenant has more cpus than that") {
			t.Errorf("v1: Ensure(0.5) over a 1-core child: %v, want the kernel's refusal explained", err)
		}
		if qerr != nil || got != 1 {
			t.Errorf("v1: after the refusal the quota is %v cores (%v), want the old 1 kept", got, qerr)
		}
	}
	if err := syscall.Rmdir(child); err != nil {
		t.Fatal(err)
	}
	if err := Remove(tenant); err != nil {
		t.Fatal(err)
	}
	ds, err := Dirs(tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s left after Remove", d)
		}
	}
}
