package pid1

import (
	"os"
	"strconv"
	"testing"

	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/executor/local/localtest"
)

// The rig of executor/local's tests (executor/local/localtest), over this
// package's Executor.

func TestMain(m *testing.M) { localtest.Main(m) }

// Cgroup modes, as the tests name them.
const (
	CgroupAuto = local.CgroupAuto
	CgroupOff  = local.CgroupOff
)

// newExec returns an Executor rooted in a fresh temporary directory, with
// short timeouts, and its own cgroup parent so the test can check that every
// per-command cgroup was removed; it is closed when the test ends.
func newExec(t *testing.T, mode local.CgroupMode, mut ...func(*Config)) *Executor {
	t.Helper()
	return localtest.New(t, New, Config{Config: local.Config{
		Root:         t.TempDir(),
		SpillDir:     t.TempDir(),
		Limits:       localtest.Limits(),
		Cgroup:       mode,
		CgroupParent: localtest.CgroupParent(),
	}}, mut...)
}

// dead reports whether pid is gone. A killed orphan stays a zombie until the
// host's init reaps it, and a zombie runs nothing.
func dead(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	state, _, err := statStateParent(b)
	return err != nil || state == 'Z' || state == 'X'
}
