package local

import (
	"os"
	"testing"

	"github.com/shellbox/shellbox/executor/local/localtest"
)

// The shared rig (localtest), under the names these tests use.
const session = localtest.Session

var (
	run         = localtest.Run
	runErr      = localtest.RunErr
	start       = localtest.Start
	readPid     = localtest.ReadPid
	waitPidFile = localtest.WaitPidFile
)

// newExec returns an Executor rooted in a fresh temporary directory, with
// short timeouts, and its own cgroup parent so the test can check that every
// per-command cgroup was removed.
func newExec(t *testing.T, mode CgroupMode, mut ...func(*Config)) *Executor {
	t.Helper()
	// Tests may swap the hierarchy: CgroupParents, which New checks at
	// the end, names the parents New made as well as the one in use.
	return localtest.New(t, New, Config{
		Root:         t.TempDir(),
		SpillDir:     t.TempDir(),
		Limits:       localtest.Limits(),
		Cgroup:       mode,
		CgroupParent: localtest.CgroupParent(),
	}, mut...)
}

// modes are the isolation modes this host supports; the tree tests run
// under each. On a host without cgroup rights only "off" remains, and the
// test says so.
func modes(t *testing.T) []CgroupMode {
	t.Helper()
	out := []CgroupMode{CgroupOff}
	for _, m := range []CgroupMode{CgroupV2, CgroupV1} {
		if _, _, err := detect(m, "shellbox-test"); err != nil {
			t.Logf("cgroup mode %s unavailable here: %v", m, err)
			continue
		}
		out = append(out, m)
	}
	return out
}

// dead reports whether pid is gone. A killed orphan stays a zombie until the
// host's init reaps it, and a zombie runs nothing.
func dead(pid int) bool {
	st, err := readProcStat(pid)
	return err != nil || st.state == 'Z' || st.state == 'X'
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: commands switch to uid 1000")
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
