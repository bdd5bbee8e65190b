package executortest_test

import (
	"context"
	"testing"
	"time"

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

func runLocal(t *testing.T, mode local.CgroupMode) {
	root, home := t.TempDir(), t.TempDir()
	if _, err := local.New(local.Config{Root: root, Cgroup: mode}); err != nil {
		t.Skipf("cgroup mode %s unavailable on this host: %v", mode, err)
	}
	executortest.Run(t, executortest.Harness{
		New: func(t *testing.T, lim executor.Limits) executor.BashExecutor {
			e, err := local.New(local.Config{Root: root, Home: home, SpillDir: t.TempDir(), Limits: lim, Cgroup: mode})
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
