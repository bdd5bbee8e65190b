package hostcgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRoot points Root at a directory laid out as a cgroup mount (v2: a
// cgroup.controllers file at its top); the kernel's checks are not in it.
func fakeRoot(t *testing.T, v2 bool) string {
	t.Helper()
	old := Root
	Root = t.TempDir()
	t.Cleanup(func() { Root = old })
	if v2 {
		if err := os.WriteFile(filepath.Join(Root, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(filepath.Join(Root, "cpu"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Root
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestEnsureV1(t *testing.T) {
	root := fakeRoot(t, false)
	if err := Ensure("acme", 1.5); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "cpu", Parent("acme"))
	if q, p := read(t, filepath.Join(dir, "cpu.cfs_quota_us")), read(t, filepath.Join(dir, "cpu.cfs_period_us")); q != "15000" || p != "10000" {
		t.Errorf("quota %s per %s, want 15000 per 10000", q, p)
	}
	if c, err := Quota("acme"); err != nil || c != 1.5 {
		t.Errorf("Quota = %v, %v; want 1.5", c, err)
	}
	// 0: no quota any more (a policy that dropped it).
	if err := Ensure("acme", 0); err != nil {
		t.Fatal(err)
	}
	if c, err := Quota("acme"); err != nil || c != 0 {
		t.Errorf("after Ensure(0): Quota = %v, %v; want 0", c, err)
	}
	// Remove needs a kernel's cgroupfs (its directories' files go with
	// them): test/faults' TestFairness removes a real one.
}

func TestEnsureV2(t *testing.T) {
	root := fakeRoot(t, true)
	if err := Ensure("acme", 2); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, Parent("acme"), "cpu.max")); got != "20000 10000" {
		t.Errorf("cpu.max %q, want \"20000 10000\"", got)
	}
	if got := read(t, filepath.Join(root, Base, "cgroup.subtree_control")); got != "+cpu" {
		t.Errorf("%s's subtree_control %q, want +cpu", Base, got)
	}
	if c, err := Quota("acme"); err != nil || c != 2 {
		t.Errorf("Quota = %v, %v; want 2", c, err)
	}
}

// Tenants' parents are apart, long ids cut and told apart by their hash,
// and every one below Base.
func TestParent(t *testing.T) {
	long := strings.Repeat("a", 64)
	long2 := strings.Repeat("a", 63) + "b"
	ps := []string{Parent("acme"), Parent("acme2"), Parent(long), Parent(long2)}
	seen := map[string]bool{}
	for _, p := range ps {
		if !strings.HasPrefix(p, "/"+Base+"/tenant-") || len(p) > 80 || seen[p] {
			t.Errorf("Parent: %q (of %q)", p, ps)
		}
		seen[p] = true
	}
}

// Where the cgroup filesystem cannot take the tenant's directory, Ensure
// says so and what the server needs.
func TestEnsureUnwritable(t *testing.T) {
	root := fakeRoot(t, false)
	// A file where the hierarchy's directory should be: mkdir fails as on
	// a read-only mount (root ignores modes, so no chmod here).
	if err := os.RemoveAll(filepath.Join(root, "cpu")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "cpu"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Ensure("acme", 1)
	if err == nil || !strings.Contains(err.Error(), "tenant cgroup (cgroup v1, the cpu controller)") {
		t.Errorf("Ensure where the cpu hierarchy is a file: %v", err)
	}
}
