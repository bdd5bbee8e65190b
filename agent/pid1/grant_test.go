package pid1

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local/localtest"
	"github.com/shellbox/shellbox/internal/procscan"
	"github.com/shellbox/shellbox/internal/procstatus"
)

// TestGrantBoundToTree: a command's network grant is found from the groups
// of any process of its tree, setsid'd ones included, and from no other
// command's; it ends with the tree, and a command without a tag (tracked by
// a cgroup, or no TagGroups) has none.
func TestGrantBoundToTree(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := agentExec(t)
	groupsOf := func(pidFile string) []uint32 {
		t.Helper()
		b, err := procscan.ReadFile("/proc/" + strconv.Itoa(localtest.ReadPid(t, filepath.Join(e.cfg.Root, pidFile))) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		gs, err := procstatus.Groups(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return gs
	}
	granted := localtest.Start(t, e, executor.Request{Command: "setsid sh -c 'echo $$ > escaped; exec sleep 100' & sleep 100"},
		func(s *executor.Spec) { s.EgressGrant = "g1" })
	other := localtest.Start(t, e, executor.Request{Command: "echo $$ > other; sleep 100"})
	defer other.Kill(context.Background())
	escaped, others := groupsOf("escaped"), groupsOf("other")
	if g := e.Grant(escaped, nil); g != "g1" {
		t.Errorf("a setsid'd process of the granted tree: grant %q, want g1", g)
	}
	if g := e.Grant(others, nil); g != "" {
		t.Errorf("a process of another command: grant %q", g)
	}
	if g := e.Grant(nil, nil); g != "" {
		t.Errorf("no groups: grant %q", g)
	}
	if _, err := granted.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g := e.Grant(escaped, nil); g != "" {
		t.Errorf("after the tree ended: grant %q", g)
	}
	// A later command (tags are handed out round robin) has no grant.
	again := localtest.Start(t, e, executor.Request{Command: "echo $$ > again; sleep 100"})
	defer again.Kill(context.Background())
	if g := e.Grant(groupsOf("again"), nil); g != "" {
		t.Errorf("a later command without a grant: grant %q", g)
	}

	plain := newExec(t, CgroupOff)
	tk := localtest.Start(t, plain, executor.Request{Command: "echo $$ > plain; sleep 100"}, func(s *executor.Spec) { s.EgressGrant = "g2" })
	defer tk.Kill(context.Background())
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(localtest.ReadPid(t, filepath.Join(plain.cfg.Root, "plain"))) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if g := plain.Grant([]uint32{0}, cg); g != "" {
		t.Errorf("an executor without tags or cgroups: grant %q", g)
	}
}
