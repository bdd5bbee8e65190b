package local

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/shellbox/shellbox/executor"
)

// TestGrantBoundToCgroup: where the executor makes a cgroup per command (a
// gVisor sandbox's agent: no tags then), a command's network grant is
// found from the cgroup of any process of its tree, setsid'd ones
// included, and from no other command's; it ends with the tree, before
// the cgroup is another command's.
func TestGrantBoundToCgroup(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newExec(t, CgroupAuto, func(c *Config) { c.Credential = &syscall.Credential{Uid: 1000, Gid: 1000} })
	if e.hier.Load() == nil {
		t.Skip("no usable cgroup hierarchy")
	}
	os.Chmod(filepath.Dir(e.cfg.Root), 0o755)
	os.Chmod(e.cfg.Root, 0o777)
	cgroupsOf := func(pidFile string) []byte {
		t.Helper()
		b, err := os.ReadFile("/proc/" + strconv.Itoa(readPid(t, filepath.Join(e.cfg.Root, pidFile))) + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The granted tree ends on its own (a kill that finds it slow to
	// die uses cgroup.kill, and a killed cgroup is not pooled).
	granted := start(t, e, executor.Request{Command: "setsid sh -c 'echo $$ > escaped; while [ ! -e go ]; do sleep 0.05; done' & " +
		"while [ ! -e go ]; do sleep 0.05; done; wait"},
		func(s *executor.Spec) { s.EgressGrant = "g1" })
	other := start(t, e, executor.Request{Command: "echo $$ > other; sleep 100"})
	defer other.Kill(context.Background())
	escaped, others := cgroupsOf("escaped"), cgroupsOf("other")
	if g := e.Grant(nil, escaped); g != "g1" {
		t.Errorf("a setsid'd process of the granted tree (cgroups %q): grant %q, want g1", escaped, g)
	}
	if g := e.Grant(nil, others); g != "" {
		t.Errorf("a process of another command: grant %q", g)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if g := e.Grant(nil, self); g != "" {
		t.Errorf("a process of no command: grant %q", g)
	}
	if err := os.WriteFile(filepath.Join(e.cfg.Root, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := granted.Wait(context.Background()); err != nil || res.ExitCode != 0 {
		t.Fatalf("the granted task: %+v, %v", res, err)
	}
	if g := e.Grant(nil, escaped); g != "" {
		t.Errorf("after the tree ended: grant %q", g)
	}
	// The next command takes the ended one's cgroup from the pool, and not
	// its grant.
	again := start(t, e, executor.Request{Command: "echo $$ > again; sleep 100"})
	defer again.Kill(context.Background())
	reused := cgroupsOf("again")
	if !bytes.Equal(reused, escaped) {
		t.Errorf("the next command's cgroups %q, want the pooled %q", reused, escaped)
	}
	if g := e.Grant(nil, reused); g != "" {
		t.Errorf("a later command in the granted one's cgroup: grant %q", g)
	}
}

func TestGrantCgroupLines(t *testing.T) {
	v1 := grantCgroup{ctrl: "freezer", path: "/shellbox/c1"}
	v2 := grantCgroup{v2: true, path: "/shellbox/c1"}
	for _, c := range []struct {
		g    grantCgroup
		in   string
		want bool
	}{
		{v1, "7:freezer:/shellbox/c1\n0::/\n", true},
		{v1, "7:cpu,freezer:/shellbox/c1\n", true},
		{v1, "7:freezer:/shellbox/c1/sub\n", false},
		{v1, "7:pids:/shellbox/c1\n", false},
		{v1, "0::/shellbox/c1\n", false},
		{v2, "0::/shellbox/c1\n", true},
		{v2, "7:freezer:/shellbox/c1\n0::/\n", false},
		{v2, "", false},
		{grantCgroup{}, "0::\n", false},
	} {
		if got := c.g.holds([]byte(c.in)); got != c.want {
			t.Errorf("%+v.holds(%q) = %v, want %v", c.g, c.in, got, c.want)
		}
	}
}
