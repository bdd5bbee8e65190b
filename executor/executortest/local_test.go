package executortest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/landlock"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/executor/local"
)

// TestLocal holds the reference executor to the suite, tracking trees the
// best way this host allows. Every profile's executor shares one root and one
// home, as sessions of one local server do.
func TestLocal(t *testing.T) { runLocal(t, local.CgroupAuto) }

// TestLocalCgroupV1 runs the suite with trees tracked by a cgroup v1
// hierarchy, as on hosts (and in sandboxes) without cgroup v2.
func TestLocalCgroupV1(t *testing.T) { runLocal(t, local.CgroupV1) }

// TestLocalLandlock runs the suite with every command started through the
// per-call Landlock shim, as the agent starts them where the kernel has
// Landlock.
func TestLocalLandlock(t *testing.T) {
	shim, err := landlock.Shim()
	if errors.Is(err, landlock.ErrUnsupported) {
		t.Skipf("no per-call Landlock shim on this host: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shim.Close() }) // after the parallel subtests
	runLocal(t, local.CgroupAuto, func(c *local.Config) { c.ExecShim = shim })
}

func runLocal(t *testing.T, mode local.CgroupMode, mut ...func(*local.Config)) {
	root, home := t.TempDir(), t.TempDir()
	if _, err := local.New(local.Config{Root: root, Cgroup: mode}); err != nil {
		t.Skipf("cgroup mode %s unavailable on this host: %v", mode, err)
	}
	executortest.Run(t, executortest.Harness{
		New: func(t *testing.T, lim executor.Limits) executor.BashExecutor {
			cfg := local.Config{Root: root, Home: home, SpillDir: t.TempDir(), Limits: lim, Cgroup: mode}
			for _, m := range mut {
				m(&cfg)
			}
			e, err := local.New(cfg)
			if err != nil {
				t.Fatalf("local.New: %v", err)
			}
			t.Logf("local executor isolation: %s", e.Isolation())
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := e.Close(ctx); err != nil {
					t.Errorf("local executor Close: %v", err)
				}
			})
			return e
		},
		Root:      executortest.FixedRoot(root),
		Home:      home,
		InProcess: true,
	})
}
