package pid1

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/landlock"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local/localtest"
)

// landlockShim returns the per-call Landlock shim, or skips where this
// host cannot have one (the agent then starts commands directly).
func landlockShim(t *testing.T) *os.File {
	t.Helper()
	f, err := landlock.Shim()
	if errors.Is(err, landlock.ErrUnsupported) {
		t.Skipf("no per-call Landlock shim here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestExecShim: started through the shim, as the agent starts them, a
// command is still the leader the executor tracks (its pid, process group,
// user and tag group), with its own $0, /proc/self/exe and exit status;
// timeouts and kills still end its whole tree, and background tasks run.
func TestExecShim(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := agentExec(t, func(c *Config) { c.ExecShim = landlockShim(t) })
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	bash, err = filepath.EvalSymlinks(bash)
	if err != nil {
		t.Fatal(err)
	}
	res := localtest.Run(t, e, executor.Request{Command: `echo "$0"; readlink /proc/$$/exe
read -r _ _ _ _ pgrp _ < /proc/$$/stat; [ "$pgrp" = "$$" ] && echo leader
id -u; id -G; [ -e /proc/$$/fd/3 ] && echo fd3 || echo nofd3; exit 3`})
	lines := strings.Split(res.Stdout, "\n")
	if res.ExitCode != 3 || len(lines) < 6 || lines[0] != "bash" || lines[1] != bash || lines[2] != "leader" || lines[3] != "1000" {
		t.Fatalf("result %+v; want exit 3, bash, %s, leader, 1000", res, bash)
	}
	if tag := strconv.Itoa(int(e.cfg.TagGroups.First)); !slices.Contains(strings.Fields(lines[4]), tag) {
		t.Errorf("groups %q lack the tag %s", lines[4], tag)
	}
	// The shim's fd 3 is closed before the command runs (checked with a
	// builtin before any pipe of the command's own could take fd 3).
	if lines[5] != "nofd3" {
		t.Errorf("the command's fd 3: %q, want the shim's closed", lines[5])
	}

	// A timeout ends the tree, escapees of the process group included
	// (by their tag).
	res = localtest.Run(t, e, executor.Request{Command: "setsid sh -c 'echo $$ > shim-escapee; exec sleep 100' & sleep 100", Timeout: time.Second})
	pid := localtest.ReadPid(t, filepath.Join(e.cfg.Root, "shim-escapee"))
	if !res.TimedOut || !dead(pid) {
		t.Errorf("timeout: %+v, escapee %d dead: %v", res, pid, dead(pid))
	}

	// A background task, killed with its tree.
	tk := localtest.Start(t, e, executor.Request{Command: "sleep 100 & echo $! > shim-bg; wait"})
	pid = localtest.ReadPid(t, filepath.Join(e.cfg.Root, "shim-bg"))
	if _, err := tk.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !dead(pid) {
		t.Errorf("background task killed, its child %d lives", pid)
	}
}

// TestExecShimCallsApart: with the shim, one call cannot open another
// call's /proc/<pid>/mem (nor its fd links or environment), though it can
// its own processes', and this process (the agent) can open every call's.
// Without the shim (same user) it can: the open is what the shim stops.
func TestExecShimCallsApart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	shim := landlockShim(t)
	probe := func(pid int) string {
		p := "/proc/" + strconv.Itoa(pid)
		return `exec 2>/dev/null
for f in mem environ fd/0; do (exec 3<` + p + `/$f) && echo "other $f: open" || echo "other $f: refused"; done
sleep 100 & (exec 3<>/proc/$!/mem) && echo "own mem: open" || echo "own mem: refused"; kill $!`
	}
	for _, tc := range []struct {
		name string
		shim *os.File
		want string
	}{
		{"shim", shim, "other mem: refused\nother environ: refused\nother fd/0: refused\nown mem: open\n"},
		{"no shim", nil, "other mem: open\nother environ: open\nother fd/0: open\nown mem: open\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); tc.shim == nil && err == nil && strings.TrimSpace(string(b)) != "0" {
				t.Skipf("Yama ptrace_scope %s refuses the open without the shim too", strings.TrimSpace(string(b)))
			}
			e := agentExec(t, func(c *Config) { c.ExecShim = tc.shim })
			victim := localtest.Start(t, e, executor.Request{Command: "echo $$ > victim; exec sleep 100"})
			defer victim.Kill(context.Background())
			pid := localtest.ReadPid(t, filepath.Join(e.cfg.Root, "victim"))
			if res := localtest.Run(t, e, executor.Request{Command: probe(pid)}); res.Stdout != tc.want {
				t.Errorf("another call: %q, want %q", res.Stdout, tc.want)
			}
			f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/mem", os.O_RDWR, 0)
			if err != nil {
				t.Errorf("the agent: open a call's mem: %v", err)
			} else {
				f.Close()
			}
		})
	}
}
