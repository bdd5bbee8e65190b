package local

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
)

// TestTreeKilled is the whole-tree guarantee: after Run returns, nothing the
// command started is running, daemons included, under every isolation mode
// the host supports. Without a cgroup a setsid daemon escapes, as the package
// doc says; the test pins that down too, so the doc stays true.
func TestTreeKilled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command string // PIDFILE is replaced by the file the victim writes its pid to
		// timeout leaves the command time to start its victim even on a
		// loaded machine; the outcome must not depend on a race with it.
		timeout time.Duration
		setsid  bool // the victim left the process group
	}{
		{"setsid daemon, leader exits",
			"setsid sh -c 'echo $$ > PIDFILE; exec sleep 100' >/dev/null 2>&1 & " + waitPidFile("PIDFILE") + "; echo bye", 0, true},
		{"setsid child holding the pipe, leader exits",
			"setsid sh -c 'echo $$ > PIDFILE; exec sleep 100' & " + waitPidFile("PIDFILE"), 0, true},
		{"setsid daemon, timeout",
			"setsid sh -c 'echo $$ > PIDFILE; exec sleep 100' & " + waitPidFile("PIDFILE") + "; sleep 100", 2 * time.Second, true},
		{"double-forked orphan",
			"setsid sh -c 'sleep 100 >/dev/null 2>&1 & echo $! > PIDFILE'; " + waitPidFile("PIDFILE"), 0, true},
		{"setsid daemon ignoring SIGTERM",
			"setsid sh -c 'trap \"\" TERM; echo $$ > PIDFILE; exec sleep 100' & " + waitPidFile("PIDFILE"), 0, true},
		{"nohup",
			"nohup sh -c 'echo $$ > PIDFILE; exec sleep 100' >/dev/null 2>&1 & " + waitPidFile("PIDFILE"), 0, false},
		{"job ignoring SIGTERM, timeout",
			"(trap '' TERM; echo $BASHPID > PIDFILE; exec sleep 100) & " + waitPidFile("PIDFILE") + "; sleep 100", 2 * time.Second, false},
	}
	for _, mode := range modes(t) {
		e := newExec(t, mode)
		for i, tt := range tests {
			t.Run(string(mode)+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				pidFile := fmt.Sprintf("pid-%s-%d", mode, i)
				res := run(t, e, executor.Request{
					Command: strings.ReplaceAll(tt.command, "PIDFILE", pidFile),
					Timeout: tt.timeout,
				})
				pid := readPid(t, filepath.Join(e.cfg.Root, pidFile))
				if tt.timeout > 0 && !res.TimedOut {
					t.Errorf("TimedOut false: %+v", res)
				}
				if mode == CgroupOff && tt.setsid {
					if dead(pid) {
						t.Errorf("setsid process %d died without a cgroup; update the package doc", pid)
					}
					unix.Kill(pid, unix.SIGKILL)
					return
				}
				if !dead(pid) {
					t.Errorf("process %d survived the call (result %+v)", pid, res)
					unix.Kill(pid, unix.SIGKILL)
				}
			})
		}
	}
}

func TestIsolation(t *testing.T) {
	t.Parallel()
	for _, mode := range modes(t) {
		e := newExec(t, mode)
		want := map[CgroupMode]string{CgroupOff: "process group", CgroupV2: "cgroup2 ", CgroupV1: "cgroup1 "}[mode]
		if got := e.Isolation(); !strings.HasPrefix(got, want) {
			t.Errorf("mode %s: Isolation() = %q, want %q…", mode, got, want)
		}
	}
	auto := newExec(t, CgroupAuto)
	t.Logf("auto on this host: %s", auto.Isolation())
}

// TestV1BornInside checks that on cgroup v1 the leader is in its cgroup from
// its first instruction, and that no server thread stays behind in one. Not
// parallel: while another test starts a v1 command, one of our threads is in
// that command's cgroup for an instant, which is the design.
func TestV1BornInside(t *testing.T) {
	if _, _, err := detect(CgroupV1, "shellbox-test"); err != nil {
		t.Skipf("no cgroup v1 here: %v", err)
	}
	e := newExec(t, CgroupV1)
	h := e.hier.Load()
	before := threadCgroups(t, h.ctrl)
	for range 20 {
		// $$ is the leader; reading its cgroup first thing leaves no time
		// for a move after the fact.
		res := run(t, e, executor.Request{Command: "cat /proc/$$/cgroup"})
		line := ""
		for _, l := range strings.Split(res.Stdout, "\n") {
			if strings.Contains(l, ":"+h.ctrl+":") || strings.Contains(l, ","+h.ctrl) {
				line = l
			}
		}
		rel := strings.TrimPrefix(h.parent, h.mount.dir)
		if !strings.Contains(line, rel+"/"+owner+"-") {
			t.Fatalf("leader's %s cgroup is %q, want under %s", h.ctrl, line, rel)
		}
	}
	if after := threadCgroups(t, h.ctrl); after != before {
		t.Errorf("server threads moved: %s -> %s", before, after)
	}
}

// threadCgroups is the set of ctrl cgroups of this process's threads.
func threadCgroups(t *testing.T, ctrl string) string {
	tasks, _ := filepath.Glob("/proc/self/task/*/cgroup")
	seen := map[string]bool{}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, ":"+ctrl+":") {
				seen[l] = true
			}
		}
	}
	var out []string
	for l := range seen {
		out = append(out, l)
	}
	return strings.Join(out, ";")
}

// TestCleanup leaves a cgroup as a crashed server would (its creator gone, a
// process still in it) next to a live one and a foreign one: Cleanup kills
// and removes only the first.
func TestCleanup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root")
	}
	parent := "shellbox-test/cleanup-" + newID()
	var hs []*hierarchy
	for _, m := range []CgroupMode{CgroupV2, CgroupV1} {
		if h, _, err := detect(m, parent); err == nil {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		t.Skip("no usable cgroup hierarchy")
	}
	var victims []*exec.Cmd
	for _, h := range hs {
		orphan := filepath.Join(h.parent, "999999999-1-0123456789ab") // pid beyond pid_max: gone
		live := filepath.Join(h.parent, cgroupName("0123456789ab"))
		foreign := filepath.Join(h.parent, "not-ours")
		for _, d := range []string{orphan, live, foreign} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("sleep", "100")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		victims = append(victims, cmd)
		if err := (&cgroup{h: h, path: orphan}).add(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(live)
			os.Remove(foreign)
			os.Remove(orphan)
			os.Remove(h.parent)
		})
	}
	removed, err := Cleanup(parent)
	if err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if removed != len(hs) {
		t.Errorf("removed %d cgroups, want %d", removed, len(hs))
	}
	for _, cmd := range victims {
		err := cmd.Wait()
		if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("process in the orphaned cgroup ended with %v, want SIGKILL", err)
		}
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h.parent, "999999999-1-0123456789ab")); err == nil {
			t.Errorf("orphaned cgroup under %s still there", h.parent)
		}
		for _, keep := range []string{cgroupName("0123456789ab"), "not-ours"} {
			if _, err := os.Stat(filepath.Join(h.parent, keep)); err != nil {
				t.Errorf("%s under %s removed: %v", keep, h.parent, err)
			}
		}
	}
}

func TestParseProcStat(t *testing.T) {
	st, err := parseProcStat([]byte("42 (a) b (c) S 1 77 77 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0"))
	if err != nil || st.state != 'S' || st.pgrp != 77 || st.start != 12345 {
		t.Fatalf("parseProcStat = %+v, %v", st, err)
	}
	if _, err := parseProcStat([]byte("42 (x) S 1")); err == nil {
		t.Fatal("short stat parsed")
	}
}

func TestCgroupName(t *testing.T) {
	pid, start, ok := parseCgroupName(cgroupName("0123456789ab"))
	self, _ := readProcStat(os.Getpid())
	if !ok || pid != os.Getpid() || start != self.start {
		t.Fatalf("parseCgroupName(cgroupName(...)) = %d %d %v", pid, start, ok)
	}
	for _, bad := range []string{"not-ours", "1-2", "x-1-ab", "1-2-"} {
		if _, _, ok := parseCgroupName(bad); ok {
			t.Errorf("parseCgroupName(%q) accepted", bad)
		}
	}
}

// TestV2FallbackWhenCloneRefused: when clone3 into a cgroup is refused at run
// time (gVisor, seccomp), an auto executor starts the command with its
// fallback and keeps using that.
func TestV2FallbackWhenCloneRefused(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	if h := e.hier.Load(); h == nil || !h.v2 {
		t.Skipf("auto is not cgroup v2 here (%s)", e.Isolation())
	}
	// A "cgroup" directory that is not a cgroup: CLONE_INTO_CGROUP refuses it.
	broken := &hierarchy{v2: true, mount: mount{dir: t.TempDir(), root: "/"}}
	broken.parent = broken.mount.dir
	e.hier.Store(broken)
	res := run(t, e, executor.Request{Command: "echo ok"})
	if res.Stdout != "ok\n" || res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if got := e.hier.Load(); got != e.fallback {
		t.Errorf("isolation %s after a refused clone, want the fallback", e.Isolation())
	}
}

// TestV1MovedAfterStart covers the v1 fallback for a server whose own cgroup
// is not visible under the mount: the leader is moved in right after it
// starts. What it forks after that is tracked; signals still reach every
// process once. The command waits a second before forking: what it forked
// before the move would not be tracked (the mode's documented window), and a
// loaded machine can take a while to move it.
func TestV1MovedAfterStart(t *testing.T) {
	t.Parallel()
	if _, _, err := detect(CgroupV1, "shellbox-test"); err != nil {
		t.Skipf("no cgroup v1 here: %v", err)
	}
	e := newExec(t, CgroupV1)
	h := *e.hier.Load()
	h.mount.root = "/not-our-cgroup" // threadHome cannot map the server's cgroup
	e.hier.Store(&h)

	res := run(t, e, executor.Request{
		Command: "sleep 1; setsid sh -c 'echo $$ > pid; exec sleep 100' & " + waitPidFile("pid") + "; trap 'echo caught; exit 0' TERM; sleep 100 & wait",
		Timeout: 3 * time.Second,
	})
	if !res.TimedOut || res.Stdout != "caught\n" || res.ExitCode != 0 {
		t.Errorf("result %+v, want a timeout, the trap run once, exit 0", res)
	}
	if pid := readPid(t, filepath.Join(e.cfg.Root, "pid")); !dead(pid) {
		t.Errorf("setsid child %d survived", pid)
		unix.Kill(pid, unix.SIGKILL)
	}
}
