package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
)

// The agent in a real sandbox, on a real engine: each runtime gets one
// hardened container (64 MiB of memory, 256 pids) whose agent the test
// drives from the host through its socket, as the server does.

func TestDockerRunc(t *testing.T)  { testDocker(t, "runc") }
func TestDockerRunsc(t *testing.T) { testDocker(t, "runsc") }

func testDocker(t *testing.T, rt string) {
	cli := engine(t)
	memory, pids := int64(64<<20), agentapi.PidsCgroupLimit(256)
	if rt == "runsc" {
		// gVisor's own memory and host threads (the sentry, the ptrace
		// stubs) are charged to the container's cgroup: with 256 pids a
		// fork storm makes the sentry fail to start a thread and the whole
		// sandbox dies (exit code 2); with 64 MiB it is OOM-killed whole.
		memory, pids = 256<<20, 1024
	}
	sb := newSandbox(t, cli, rt, memory, pids)
	t.Logf("agent %s, sandbox %.12s on %s %q", sb.agent.Hello().Agent, sb.id, rt, sb.args)
	// Sequential: the zombie and memory cases must have the sandbox to
	// themselves.
	t.Run("identity", func(t *testing.T) { sb.t = t; testIdentity(t, sb) })
	t.Run("workdir", func(t *testing.T) { sb.t = t; testWorkdir(t, sb) })
	t.Run("escapees", func(t *testing.T) { sb.t = t; testEscapees(t, sb) })
	t.Run("zombie_storm", func(t *testing.T) { sb.t = t; testZombieStorm(t, sb) })
	t.Run("restart_survival", func(t *testing.T) { sb.t = t; testRestartSurvival(t, sb) })
	t.Run("spill", func(t *testing.T) { sb.t = t; testSpill(t, sb) })
	t.Run("memory_bomb", func(t *testing.T) { sb.t = t; testMemoryBomb(t, sb) })
	t.Run("sigterm", func(t *testing.T) { sb.t = t; testSigterm(t, sb) })
}

// testSpill: the full output of a truncated call is in a spill file the
// command's user can read, at the path the result names, and the host sees
// it in the session's directory.
func testSpill(t *testing.T, sb *sandbox) {
	res := sb.run("head -c 100000 /dev/zero | tr '\\0' x", 0)
	if !res.Truncated || !strings.HasPrefix(res.SpillPath, "/run/shellbox/spill/"+sessionID+"/") || len(res.Stdout) != 30000 {
		t.Fatalf("big output: truncated %v, spill %q, tail %d bytes", res.Truncated, res.SpillPath, len(res.Stdout))
	}
	if got := sb.run("wc -c < "+res.SpillPath, 0).Stdout; got != "100000\n" {
		t.Errorf("the spill file from inside: %q bytes", got)
	}
	host := filepath.Join(sb.hostDir, strings.TrimPrefix(res.SpillPath, "/run/shellbox/"))
	if fi, err := os.Stat(host); err != nil || fi.Size() != 100000 {
		t.Errorf("the spill file on the host: %v %v", fi, err)
	}
	// Through the agent, by the path the result names (as on Kubernetes,
	// where there is no host path).
	ctx := context.Background()
	rc, err := sb.agent.Spill(ctx, res.SpillPath, 0, 0)
	if err != nil {
		t.Fatalf("the spill file through the agent: %v", err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != strings.Repeat("x", 100000) {
		t.Errorf("the spill file through the agent: %d bytes, %v", len(b), err)
	}
	if _, err := sb.agent.Spill(ctx, "/run/shellbox/spill/../agent.sock", 0, 0); !errors.Is(err, executor.ErrInvalid) {
		t.Errorf("a path out of the spill dir through the agent: %v", err)
	}
}

// testSigterm: `docker stop` (SIGTERM to PID 1) ends the agent at once and
// cleanly, running commands included.
func testSigterm(t *testing.T, sb *sandbox) {
	ctx := context.Background()
	if _, err := sb.agent.Start(ctx, spec(executor.Request{Command: "trap '' TERM; sleep 300", Background: true})); err != nil {
		t.Fatal(err)
	}
	timeout := 20
	t0 := time.Now()
	if err := sb.cli.ContainerStop(ctx, sb.id, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	info, err := sb.cli.ContainerInspect(ctx, sb.id)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 10*time.Second || info.State.ExitCode != 0 {
		t.Errorf("stop took %s, exit code %d, want a prompt, clean exit\n%s", d, info.State.ExitCode, sb.logs())
	}
}

// testIdentity: a command has no capabilities, no way to gain any, the
// default seccomp profile, the sandbox user, and its tag group; it cannot
// drive the agent or write spill files; the agent's settings do not leak
// into its environment.
func testIdentity(t *testing.T, sb *sandbox) {
	res := sb.run("cat /proc/self/status", 0)
	st := statusFields(res.Stdout)
	if f := strings.Fields(st["Uid"]); len(f) != 4 || f[0] != "1000" || f[1] != "1000" || f[3] != "1000" {
		t.Errorf("Uid %q, want 1000 throughout", st["Uid"])
	}
	if f := strings.Fields(st["Gid"]); len(f) == 0 || f[0] != "1000" {
		t.Errorf("Gid %q, want 1000", st["Gid"])
	}
	for _, k := range []string{"CapEff", "CapPrm", "CapInh"} {
		if st[k] != "0000000000000000" {
			t.Errorf("%s = %q, want 0000000000000000", k, st[k])
		}
	}
	switch nnp, ok := st["NoNewPrivs"]; {
	case ok && nnp != "1":
		t.Errorf("NoNewPrivs = %q, want 1", nnp)
	case !ok && sb.runtime == "runc":
		t.Errorf("no NoNewPrivs line under runc:\n%s", res.Stdout)
	case !ok:
		t.Logf("%s: /proc/self/status has no NoNewPrivs line (gVisor does not report it)", sb.runtime)
	}
	wantSeccomp := sb.runtime == "runc" || hasArg(sb.args, "oci-seccomp", "oci-seccomp=true")
	if wantSeccomp && st["Seccomp"] != "2" {
		t.Errorf("Seccomp = %q, want 2 (filter mode)", st["Seccomp"])
	} else if !wantSeccomp {
		t.Logf("%s: Seccomp = %q: gVisor applies the OCI seccomp profile inside the sandbox only with --oci-seccomp", sb.runtime, st["Seccomp"])
	}
	tagged := false
	for _, g := range strings.Fields(st["Groups"]) {
		if n, _ := strconv.Atoi(g); n >= 2000000000 {
			tagged = true
		}
	}
	if !tagged {
		// gVisor (since 2023) gives the sandbox a writable cgroupfs of its
		// own: the agent tracks each command in a cgroup of its own there and
		// needs no tag group.
		out := sb.run("cat /proc/self/cgroup; echo --; cat /proc/1/cgroup", 0).Stdout
		self, agent, _ := strings.Cut(out, "--\n")
		if sb.runtime != "runsc" || self == "" || self == agent {
			t.Errorf("Groups %q: no tag group (>= 2000000000), and the command is not in a cgroup of its own:\n%s", st["Groups"], out)
		}
	}

	// The socket as the host sees it: root's, 0600.
	if fi, err := os.Stat(sb.socket); err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("agent socket on the host: %v %v, want root's, mode 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(sb.hostDir, "spill")); err != nil || fi.Mode() != os.ModeDir|0o755 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("spill dir on the host: %v %v, want root's, mode 0755", fi.Mode(), err)
	}
	// bash's test, not stat or ls: gVisor 2022 fails coreutils' statx.
	res = sb.run(`/.shellbox/connect /run/shellbox/agent.sock; d=/run/shellbox/spill; [ -d $d ] && [ -r $d ] && [ -x $d ] && [ ! -w $d ] && echo read-only dir; touch $d/x 2>/dev/null && echo wrote || echo refused; env`, 0)
	lines := strings.Split(res.Stdout, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "refused: ") || lines[1] != "read-only dir" || lines[2] != "refused" {
		t.Errorf("connect to the agent, spill dir, spill write: %q (stderr %q), want refused / read-only dir / refused", lines[:min(3, len(lines))], res.Stderr)
	}
	t.Logf("a command connecting to the agent: %s", lines[0])
	if strings.Contains(res.Stdout, "SHELLBOX_") || !strings.Contains(res.Stdout, "HOME=/workspace\n") {
		t.Errorf("environment:\n%s", res.Stdout)
	}
	if h := sb.agent.Hello(); h.Root != workspace || h.Home != workspace || h.Protocol != agentapi.Protocol || h.Agent != "test" {
		t.Errorf("Hello() = %+v", h)
	}
}

// testWorkdir: workdirs are confined where the files are, inside the sandbox.
func testWorkdir(t *testing.T, sb *sandbox) {
	sb.run("mkdir -p sub && ln -sfn /etc up && ln -sfn /workspace/sub in", 0)
	res, err := sb.agent.Run(context.Background(), spec(executor.Request{Command: "pwd", Workdir: "in"}))
	if err != nil || res.Stdout != "/workspace/sub\n" {
		t.Errorf("symlink inside: %+v, %v", res, err)
	}
	_, err = sb.agent.Run(context.Background(), spec(executor.Request{Command: "pwd", Workdir: "up"}))
	if !errors.Is(err, executor.ErrInvalid) || err.Error() != "invalid workdir: /workspace/up is outside the session root /workspace" {
		t.Errorf("symlink out: %v", err)
	}
}

// testEscapees: a setsid'd grandchild ignoring SIGTERM, and a daemon, do not
// survive their command, although the cgroupfs is read-only here: their tag
// group gives them away.
func testEscapees(t *testing.T, sb *sandbox) {
	res := sb.run("rm -f esc.pid; setsid sh -c 'trap \"\" TERM; echo $$ > esc.pid; exec sleep 300' & "+waitFile("esc.pid")+"; sleep 300", time.Second)
	if !res.TimedOut {
		t.Errorf("not timed out: %+v", res)
	}
	if got := sb.run(gone("esc.pid"), 0).Stdout; got != "gone\n" {
		t.Errorf("setsid escapee after the timeout: %s", got)
	}
	sb.run("rm -f d.pid; setsid -f sh -c 'echo $$ > d.pid; exec sleep 300' >/dev/null 2>&1 </dev/null; "+waitFile("d.pid")+"; echo started", 0)
	if got := sb.run(gone("d.pid"), 0).Stdout; got != "gone\n" {
		t.Errorf("daemon after its command exited: %s", got)
	}
}

// testZombieStorm: 500 orphans (100 under gVisor) exit under the agent while other commands
// run; every orphan is reaped (none is left, and the pids limit is never
// hit), and every command keeps its exact status.
func testZombieStorm(t *testing.T, sb *sandbox) {
	orphans := 500
	if sb.runtime == "runsc" {
		// A fork costs ~20 ms under gVisor's ptrace platform: 500 would take
		// 20 s, with or without the agent.
		orphans = 100
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res := sb.run(fmt.Sprintf("for i in $(seq %d); do (sleep 0 &); done; echo storm", orphans), 60*time.Second)
		if res.Stdout != "storm\n" || res.ExitCode != 0 {
			t.Errorf("storm: %+v", res)
		}
		// Under load, execs from fuse-overlayfs can pile up to the pids
		// limit for a moment (they wait on the FUSE daemon, not on the
		// reaper); bash then retries its fork and says so.
		for _, l := range strings.Split(strings.TrimSpace(res.Stderr), "\n") {
			if l != "" && l != "bash: fork: retry: Resource temporarily unavailable" {
				t.Errorf("storm stderr: %q", res.Stderr)
				break
			}
		}
		if res.Stderr != "" {
			t.Logf("the storm hit the pids limit for a moment: %q", res.Stderr)
		}
	}()
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd, code, sig := fmt.Sprintf("(sleep 0 &); exit %d", i%5), i%5, ""
			if i%3 == 0 {
				cmd, code, sig = "kill -TERM $$", -1, "SIGTERM"
			}
			res := sb.run(cmd, 30*time.Second)
			if res.ExitCode != code || res.Signal != sig {
				t.Errorf("%q: exit %d signal %q, want %d %q", cmd, res.ExitCode, res.Signal, code, sig)
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := strings.TrimSpace(sb.run(zombies, 0).Stdout)
		if n == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s zombies left in the sandbox", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testRestartSurvival: the server process that started a background task is
// killed with SIGKILL; a new process (a new connection) finds the task, its
// output and its final status.
func testRestartSurvival(t *testing.T, sb *sandbox) {
	gate := fmt.Sprintf("gate-%d", time.Now().UnixNano())
	id, helper := startInHelper(t, sb.socket, "echo begin; while [ ! -e "+gate+" ]; do sleep 0.05; done; echo end; echo err >&2; exit 7")
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()

	ctx := context.Background()
	c := sb.dial(10 * time.Second)
	defer c.Close()
	list, err := c.Tasks(ctx, sessionID)
	found := false
	for _, ti := range list {
		if ti.ID == id {
			found = true
			if ti.Status == nil || ti.Status.State != executor.Running {
				t.Errorf("task %s listed as %+v, want running", id, ti)
			}
		}
	}
	if err != nil || !found {
		t.Fatalf("Tasks = %+v, %v; want %s among them", list, err, id)
	}
	tk, err := c.Task(ctx, sessionID, id)
	if err != nil {
		t.Fatal(err)
	}
	sb.run("touch "+gate, 0)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := tk.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	o, err := tk.Read(ctx)
	want := executor.Output{Stdout: "begin\nend\n", Stderr: "err\n", Status: executor.Status{State: executor.Completed, ExitCode: 7}}
	if err != nil || o != want {
		t.Errorf("read after the restart: %+v, %v; want %+v", o, err, want)
	}
}

// testMemoryBomb: a command over the memory limit is killed by the OOM
// killer, which picks it, not the agent (its oom_score_adj is 1000); the
// result says so, and the agent answers after.
func testMemoryBomb(t *testing.T, sb *sandbox) {
	if sb.runtime == "runsc" {
		// gVisor's memory accounting is the sandbox's as a whole, on the
		// host: over the limit, the host's OOM killer takes the sentry, so
		// the whole sandbox dies, agent included (known; see the report).
		t.Skip("runsc: an over-limit sandbox dies whole; there is no per-command OOM kill to report")
	}
	res := sb.run("cat /proc/self/oom_score_adj; cat /proc/1/oom_score_adj; exec tail /dev/zero", 60*time.Second)
	note := fmt.Sprintf("shellbox: the command was killed by the out-of-memory killer (memory limit: %d bytes)\n", sb.memory)
	if !res.OOMKilled || res.Signal != "SIGKILL" || res.Stderr != note {
		t.Errorf("memory bomb: %+v\nwant OOMKilled, SIGKILL and stderr %q\n%s", res, note, sb.logs())
	}
	if f := strings.Fields(res.Stdout); len(f) != 2 || f[0] != "1000" || f[1] == "1000" {
		t.Errorf("oom_score_adj of the command and of the agent: %q, want 1000 and lower", f)
	}
	if got := sb.run("echo alive", 0).Stdout; got != "alive\n" {
		t.Errorf("after the bomb: %q", got)
	}
	res = sb.run("kill -9 $$", 0)
	if res.OOMKilled || res.Signal != "SIGKILL" {
		t.Errorf("kill -9 reported as %+v, want a plain SIGKILL", res)
	}
}
