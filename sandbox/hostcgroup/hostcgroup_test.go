package hostcgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/internal/mountinfo"
)

// fake lays out a directory as cgroup mounts (v1: cpu and memory
// hierarchies; v2: one) with the files Ensure writes, and makes it this
// process's mounts; root is the mounts' root field. The kernel's checks
// are not in it: test/faults' TestFairness runs against the real one.
func fake(t *testing.T, v2 bool, root string) string {
	t.Helper()
	old := mounts
	t.Cleanup(func() { mounts = old })
	dir := t.TempDir()
	var ms []mountinfo.Cgroup
	if v2 {
		ms = []mountinfo.Cgroup{{Dir: dir, Root: root, V2: true}}
	} else {
		ms = []mountinfo.Cgroup{
			{Dir: filepath.Join(dir, "cpu"), Root: root, Opts: []string{"rw", "cpu"}},
			{Dir: filepath.Join(dir, "memory"), Root: root, Opts: []string{"rw", "memory"}},
			// A hybrid host's v2 mount: no controller, the engine's
			// cgroups all the same.
			{Dir: filepath.Join(dir, "unified"), Root: root, V2: true},
		}
	}
	mounts = func() ([]mountinfo.Cgroup, error) { return ms, nil }
	return dir
}

// files makes a fake cgroup directory with its files.
func files(t *testing.T, dir string, kv map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func parent(t *testing.T, tenant string) string {
	t.Helper()
	p, err := Parent(tenant)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEnsureV1(t *testing.T) {
	root := fake(t, false, "/")
	dir := filepath.Join(root, "cpu", parent(t, "acme"))
	// As the kernel makes a cgroup: no quota, a 100 ms period.
	files(t, dir, map[string]string{"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
	for _, c := range []struct {
		cpus          float64
		quota, period string
		cores         float64
	}{
		{1.5, "15000", "10000", 1.5},
		{0.5, "5000", "10000", 0.5},
		{0.05, "1000", "20000", 0.05}, // the period stretched under 0.1 core
		{2, "20000", "10000", 2},
		{0, "-1", "10000", 0}, // a policy that dropped it
	} {
		if err := Ensure("acme", c.cpus); err != nil {
			t.Fatalf("Ensure(%v): %v", c.cpus, err)
		}
		if q, p := read(t, filepath.Join(dir, "cpu.cfs_quota_us")), read(t, filepath.Join(dir, "cpu.cfs_period_us")); q != c.quota || p != c.period {
			t.Errorf("Ensure(%v): quota %s per %s, want %s per %s", c.cpus, q, p, c.quota, c.period)
		}
		if got, err := Quota("acme"); err != nil || got != c.cores {
			t.Errorf("Ensure(%v): Quota = %v, %v", c.cpus, got, err)
		}
	}
	if d, err := CPUDir("acme"); err != nil || d != dir {
		t.Errorf("CPUDir = %q, %v; want %q", d, err, dir)
	}
	if ds, err := Dirs("acme"); err != nil || len(ds) != 3 || ds[0] != dir {
		t.Errorf("Dirs = %q, %v; want the cpu, memory and unified hierarchies', cpu first", ds, err)
	}
}

func TestEnsureV2(t *testing.T) {
	root := fake(t, true, "/")
	files(t, root, map[string]string{"cgroup.subtree_control": ""})
	files(t, filepath.Join(root, Base), map[string]string{"cgroup.subtree_control": ""})
	files(t, filepath.Join(root, parent(t, "acme")), map[string]string{"cpu.max": "max 100000"})
	if err := Ensure("acme", 2); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, parent(t, "acme"), "cpu.max")); got != "20000 10000" {
		t.Errorf("cpu.max %q, want \"20000 10000\"", got)
	}
	for _, d := range []string{root, filepath.Join(root, Base)} {
		if got := read(t, filepath.Join(d, "cgroup.subtree_control")); got != "+cpu" {
			t.Errorf("%s's subtree_control %q, want +cpu", d, got)
		}
	}
	if c, err := Quota("acme"); err != nil || c != 2 {
		t.Errorf("Quota = %v, %v; want 2", c, err)
	}
}

// A server whose cgroup mounts are a container's view (their root not
// "/") refuses, saying why: a quota there would bound nothing.
func TestEnsureNotTheHostsView(t *testing.T) {
	fake(t, false, "/docker/abc")
	err := Ensure("acme", 1)
	if err == nil || !strings.Contains(err.Error(), "shows the cgroup /docker/abc of its hierarchy, not the host's root") {
		t.Errorf("Ensure in a container's view: %v", err)
	}
}

// A file that is not there is not a cgroup's: Ensure never makes one
// (a tmpfs at the mount point would take it and bound nothing).
func TestEnsureNeverMakesFiles(t *testing.T) {
	root := fake(t, false, "/")
	err := Ensure("acme", 1)
	if err == nil || !strings.Contains(err.Error(), "cpu.cfs_quota_us") {
		t.Errorf("Ensure without the cgroup's files: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "cpu", parent(t, "acme"), "cpu.cfs_period_us")); err == nil {
		t.Error("Ensure made cpu.cfs_period_us")
	}
}

// Tenants' parents are apart, long ids cut and told apart by their hash,
// every one below Base; an id CheckID refuses has none.
func TestParent(t *testing.T) {
	long := strings.Repeat("a", 64)
	long2 := strings.Repeat("a", 63) + "b"
	seen := map[string]bool{}
	for _, tenant := range []string{"acme", "acme2", long, long2} {
		p := parent(t, tenant)
		if !strings.HasPrefix(p, "/"+Base+"/tenant-") || len(p) > 80 || seen[p] {
			t.Errorf("Parent(%q) = %q", tenant, p)
		}
		seen[p] = true
	}
	for _, bad := range []string{"", "../x", "a/b", ".."} {
		if p, err := Parent(bad); err == nil {
			t.Errorf("Parent(%q) = %q, want an error", bad, p)
		}
	}
}
