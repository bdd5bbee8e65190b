package pid1

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/executor/local/localtest"
)

// The tests of the abilities an agent (a sandbox's PID 1) uses: tag groups,
// the inherited OOM score, OOM reporting, orphan reaping. They run as root on
// the host, standing in for the agent: commands run as uid 1000 as they do in
// a sandbox.

const tagFirst = 2000000000

// tagRanges gives each test executor its own tags: two executors sharing a
// range would take each other's commands for their own.
var tagRanges atomic.Uint32

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: commands switch to uid 1000")
	}
}

// agentExec is an executor configured as the agent configures it, without
// cgroups (as in a container, where the cgroupfs is read-only), with a root
// uid 1000 can write to.
func agentExec(t *testing.T, mut ...func(*Config)) *Executor {
	t.Helper()
	e := newExec(t, CgroupOff, append([]func(*Config){func(c *Config) {
		c.Credential = &syscall.Credential{Uid: 1000, Gid: 1000}
		c.TagGroups = GroupRange{First: tagFirst + 1000*tagRanges.Add(1), Count: 8}
	}}, mut...)...)
	// t.TempDir and its parent are 0700; the command's user must write here.
	os.Chmod(filepath.Dir(e.cfg.Root), 0o755)
	os.Chmod(e.cfg.Root, 0o777)
	return e
}

func TestAgentConfig(t *testing.T) {
	t.Parallel()
	cred := &syscall.Credential{Uid: 1000, Gid: 1000}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"tags without credential", Config{TagGroups: GroupRange{First: 5, Count: 1}}, "TagGroups needs a Credential with a non-zero Uid"},
		{"tags as root", Config{TagGroups: GroupRange{First: 5, Count: 1}, Config: local.Config{Credential: &syscall.Credential{}}}, "TagGroups needs a Credential with a non-zero Uid"},
		{"tags without setgroups", Config{TagGroups: GroupRange{First: 5, Count: 1}, Config: local.Config{Credential: &syscall.Credential{Uid: 1, NoSetGroups: true}}}, "NoSetGroups"},
		{"tags from gid 0", Config{TagGroups: GroupRange{First: 0, Count: 1}, Config: local.Config{Credential: cred}}, "non-zero gids"},
		{"tags past the top", Config{TagGroups: GroupRange{First: 1<<32 - 2, Count: 4}, Config: local.Config{Credential: cred}}, "non-zero gids"},
		{"inherit without a score", Config{OOMScoreAdjInherit: true}, "OOMScoreAdjInherit needs a non-zero OOMScoreAdj"},
		{"relative memory cgroup", Config{MemoryCgroup: "memory"}, "MemoryCgroup must be"},
		{"missing memory cgroup", Config{MemoryCgroup: "/nonexistent/cgroup"}, "MemoryCgroup /nonexistent/cgroup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Root = t.TempDir()
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestTagTreeKilled: without a cgroup, the tag catches what leaves the
// process group, which the process group alone lets escape (TestTreeKilled,
// mode off).
func TestTagTreeKilled(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := agentExec(t)
	tests := []struct {
		name    string
		command string
		timeout time.Duration
	}{
		{"setsid escapee, timeout",
			"setsid sh -c 'echo $$ > PIDFILE; exec sleep 100' & " + localtest.WaitPidFile("PIDFILE") + "; sleep 100", time.Second},
		{"setsid daemon, leader exits",
			"setsid sh -c 'echo $$ > PIDFILE; exec sleep 100' >/dev/null 2>&1 & " + localtest.WaitPidFile("PIDFILE") + "; echo bye", 0},
		{"double-forked orphan",
			"setsid sh -c 'sleep 100 >/dev/null 2>&1 & echo $! > PIDFILE'; " + localtest.WaitPidFile("PIDFILE"), 0},
		{"setsid daemon ignoring SIGTERM, timeout",
			"setsid sh -c 'trap \"\" TERM; echo $$ > PIDFILE; exec sleep 100' & " + localtest.WaitPidFile("PIDFILE") + "; sleep 100", time.Second},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pidFile := fmt.Sprintf("tagpid-%d", i)
			res := localtest.Run(t, e, executor.Request{Command: strings.ReplaceAll(tt.command, "PIDFILE", pidFile), Timeout: tt.timeout})
			pid := localtest.ReadPid(t, filepath.Join(e.cfg.Root, pidFile))
			if tt.timeout > 0 && !res.TimedOut {
				t.Errorf("TimedOut false: %+v", res)
			}
			if !dead(pid) {
				t.Errorf("process %d survived the call (result %+v)", pid, res)
				unix.Kill(pid, unix.SIGKILL)
			}
		})
	}
}

// TestTagIdentity: a command runs as the credential's user, with its tag and
// no capabilities, and cannot drop the tag; tags are freed when trees end.
func TestTagIdentity(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := agentExec(t)
	res := localtest.Run(t, e, executor.Request{Command: "id -u; id -G; grep CapEff /proc/self/status"})
	f := strings.Fields(res.Stdout)
	if len(f) < 5 || f[0] != "1000" || f[len(f)-1] != "0000000000000000" {
		t.Fatalf("stdout %q stderr %q: want uid 1000 and CapEff 0", res.Stdout, res.Stderr)
	}
	groups := f[1 : len(f)-2]
	if tag := strconv.Itoa(int(e.cfg.TagGroups.First)); !slices.Contains(groups, tag) {
		t.Errorf("groups %q lack the first tag %s", groups, tag)
	}
	// Concurrent commands get distinct tags.
	var wg sync.WaitGroup
	tags := make([]string, 4)
	for i := range tags {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := localtest.Run(t, e, executor.Request{Command: "sleep 0.3; id -G"})
			tags[i] = strings.TrimSpace(r.Stdout)
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, g := range tags {
		if seen[g] {
			t.Errorf("two concurrent commands share groups %q: %q", g, tags)
		}
		seen[g] = true
	}
	e.tags.mu.Lock()
	left := len(e.tags.used)
	e.tags.mu.Unlock()
	if left != 0 {
		t.Errorf("%d tags still in use after every command ended", left)
	}
}

// TestTagPoolExhausted: more live commands than tags is a limit, named.
func TestTagPoolExhausted(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := agentExec(t, func(c *Config) { c.TagGroups.Count = 1 })
	tk := localtest.Start(t, e, executor.Request{Command: "sleep 100"})
	defer tk.Kill(context.Background())
	_, err := localtest.RunErr(t, e, executor.Request{Command: "true"})
	if err == nil || !strings.Contains(err.Error(), "all 1 tag groups") {
		t.Fatalf("Run with no tag free: %v, want a limit error", err)
	}
	if _, err := tk.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	localtest.Run(t, e, executor.Request{Command: "true"})
}

// TestOOMScoreInherit: the command is born with the raised score although
// it runs as another user, and this process's own score is back after.
// Not parallel: the test process's score is raised for an instant at every
// fork, which other tests' children would inherit.
func TestOOMScoreInherit(t *testing.T) {
	requireRoot(t)
	before, err := readScore(selfScoreFile)
	if err != nil {
		t.Fatal(err)
	}
	e := agentExec(t, func(c *Config) { c.OOMScoreAdj = 900; c.OOMScoreAdjInherit = true })
	res := localtest.Run(t, e, executor.Request{Command: "cat /proc/self/oom_score_adj; cat /proc/$PPID/oom_score_adj 2>/dev/null; id -u"})
	if f := strings.Fields(res.Stdout); len(f) < 2 || f[0] != "900" || f[len(f)-1] != "1000" {
		t.Errorf("stdout %q stderr %q: want 900 ... 1000", res.Stdout, res.Stderr)
	}
	if after, _ := readScore(selfScoreFile); after != before {
		t.Errorf("own oom_score_adj %d after the command, was %d", after, before)
	}
}

// TestOOMReported: a command the OOM killer ends reports OOMKilled and a
// last stderr line with the limit; a plain SIGKILL does not. The command
// moves itself into a small v1 memory cgroup the executor watches.
func TestOOMReported(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	memDir := ""
	for _, line := range strings.Split(mustRead(t, "/proc/self/mountinfo"), "\n") {
		if pre, post, ok := strings.Cut(line, " - "); ok && strings.HasPrefix(post, "cgroup ") && strings.Contains(post, "memory") {
			memDir = strings.Fields(pre)[4]
		}
	}
	if memDir == "" {
		t.Skip("no cgroup v1 memory hierarchy here")
	}
	dir := filepath.Join(memDir, "shellbox-test-oom-"+localtest.NewID())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		for range 100 {
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	const limit = 32 << 20
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.Itoa(limit)), 0); err != nil {
		t.Fatal(err)
	}
	e := newExec(t, CgroupAuto, func(c *Config) { c.MemoryCgroup = dir })

	res := localtest.Run(t, e, executor.Request{Command: fmt.Sprintf("echo $$ > %s/cgroup.procs && echo -n partial >&2 && exec tail /dev/zero", dir)})
	if !res.OOMKilled || res.Signal != "SIGKILL" {
		t.Fatalf("memory bomb: %+v, want OOMKilled and SIGKILL", res)
	}
	want := fmt.Sprintf("partial\nshellbox: the command was killed by the out-of-memory killer (memory limit: %d bytes)\n", limit)
	if res.Stderr != want {
		t.Errorf("stderr %q, want %q", res.Stderr, want)
	}

	res = localtest.Run(t, e, executor.Request{Command: fmt.Sprintf("echo $$ > %s/cgroup.procs && kill -9 $$", dir)})
	if res.OOMKilled || res.Signal != "SIGKILL" || res.Stderr != "" {
		t.Errorf("kill -9: %+v, want SIGKILL without OOM", res)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReapOrphans: with this process as the orphans' reaper (a child
// subreaper, as PID 1 is), a zombie storm leaves no zombie behind while
// concurrent commands keep their exact statuses. Not parallel: the subreaper
// setting is process-wide, and ReapOrphans would reap the children other
// tests wait for with os/exec.
func TestReapOrphans(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a child subreaper: %v", err)
	}
	e := newExec(t, CgroupOff)
	t.Cleanup(func() {
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		ReapOrphans()
	})

	stop := make(chan struct{})
	reaped := make(chan int)
	go func() {
		total := 0
		for {
			select {
			case <-stop:
				reaped <- total
				return
			default:
			}
			n, err := ReapOrphans()
			if err != nil {
				t.Errorf("ReapOrphans: %v", err)
			}
			total += n
			time.Sleep(time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := localtest.Run(t, e, executor.Request{Command: "for i in $(seq 200); do (sleep 0 &); done; echo storm" + strconv.Itoa(i)})
			if res.Stdout != "storm"+strconv.Itoa(i)+"\n" || res.ExitCode != 0 {
				t.Errorf("storm: %+v", res)
			}
		}()
	}
	statuses := []struct {
		command string
		code    int
		signal  string
	}{
		{"exit 7", 7, ""},
		{"kill -TERM $$", -1, "SIGTERM"},
		{"(sleep 0 &); exit 3", 3, ""},
		{"true", 0, ""},
	}
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := statuses[i%len(statuses)]
			res := localtest.Run(t, e, executor.Request{Command: s.command})
			if res.ExitCode != s.code || res.Signal != s.signal {
				t.Errorf("%q: exit %d signal %q, want %d %q", s.command, res.ExitCode, res.Signal, s.code, s.signal)
			}
		}()
	}
	wg.Wait()
	// The last orphans may still be exiting.
	deadline := time.Now().Add(10 * time.Second)
	for {
		z, err := zombieChildren(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if len(z) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d zombies left: %v", len(z), z)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	// Not every one of the storm's 800 sleeps is an orphan: one that exits
	// while its subshell still runs is reaped by that bash (its SIGCHLD
	// handler), and how many do depends on the machine's load (786–793
	// seen on a loaded CI machine). That none is left is checked above.
	if n := <-reaped; n == 0 {
		t.Errorf("reaped no orphans: the storm made none, or ReapOrphans missed them all")
	}
	left := local.Leaders()
	if left != 0 {
		t.Errorf("%d leaders still registered after every command ended", left)
	}
}

func TestStatStateParent(t *testing.T) {
	t.Parallel()
	st, pp, err := statStateParent([]byte("12 (a) b) (c) Z 1 12 12 0"))
	if err != nil || st != 'Z' || pp != 1 {
		t.Errorf("statStateParent = %c %d %v", st, pp, err)
	}
}

// TestForkRetried: a fork refused for a moment (EAGAIN: here RLIMIT_NPROC
// of the command's user, in a sandbox its pids limit) is retried until it
// passes, also through the Landlock shim (whose own exec is the one
// refused). Not parallel: the limit is the test process's, and other tests'
// commands would inherit it.
func TestForkRetried(t *testing.T) {
	requireRoot(t)
	t.Run("direct", func(t *testing.T) { testForkRetried(t, nil) })
	t.Run("shim", func(t *testing.T) { testForkRetried(t, landlockShim(t)) })
}

func testForkRetried(t *testing.T, shim *os.File) {
	// RLIMIT_NPROC counts every process of the uid on the machine: a uid of
	// this test alone, so that other packages' commands (sandboxes run as
	// 1000) cannot keep it over the limit.
	uid := uint32(61000 + os.Getpid()%1000)
	e := agentExec(t, func(c *Config) { c.Credential = &syscall.Credential{Uid: uid, Gid: uid}; c.ExecShim = shim })
	tk := localtest.Start(t, e, executor.Request{Command: "sleep 100"})
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &old); err != nil {
		t.Fatal(err)
	}
	// The uid has one process (the task), over a limit of 0: a command's
	// switch to it is flagged, and its exec fails with EAGAIN, until
	// the task is gone (root, starting it, is exempt).
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: 0, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NPROC, &old)
	go func() {
		time.Sleep(150 * time.Millisecond)
		tk.Kill(context.Background())
	}()
	t0 := time.Now()
	res := localtest.Run(t, e, executor.Request{Command: "echo ok"})
	if res.Stdout != "ok\n" {
		t.Errorf("after the retries: %+v", res)
	}
	if d := time.Since(t0); d < 100*time.Millisecond {
		t.Errorf("ran after %s: the limit did not hold it back, the test proves nothing", d)
	}
}

// TestTagForeignNamespace: outside a sandbox, /proc shows other sandboxes'
// commands, which carry tags of the same range as this executor's (every
// agent starts at the range's first gid). A process of another pid namespace
// that carries this executor's tag is not of its trees: ending a tree leaves
// it alone. (Seen in CI: a test's agent on the host ended a sandbox's
// background task whose tag it shared.)
func TestTagForeignNamespace(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := agentExec(t)
	tag := e.cfg.TagGroups.First // the first command's
	foreign := exec.Command("sleep", "100")
	foreign.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID,
		Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{tag}},
	}
	if err := foreign.Start(); err != nil {
		t.Skipf("cannot start a process in a new pid namespace here: %v", err)
	}
	t.Cleanup(func() { foreign.Process.Kill(); foreign.Wait() })
	res := localtest.Run(t, e, executor.Request{Command: "sleep 30", Timeout: 300 * time.Millisecond})
	if !res.TimedOut {
		t.Fatalf("not timed out: %+v", res)
	}
	if err := foreign.Process.Signal(syscall.Signal(0)); err != nil {
		ws, _ := foreign.ProcessState.Sys().(syscall.WaitStatus)
		t.Fatalf("the foreign process carrying tag %d was ended with the tree: %v %v", tag, err, ws)
	}
	// Still alive, and unsignalled: it would have died of SIGTERM.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", foreign.Process.Pid)); err != nil || !strings.Contains(string(b), "State:\tS") {
		t.Errorf("foreign process state: %v\n%s", err, b)
	}
}
