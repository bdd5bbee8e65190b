//go:build linux && amd64

package execguard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/internal/clip"
	"github.com/shellbox/shellbox/internal/cmdmatch"
)

// The tests run commands in a child process of the test binary that plays
// the agent (childMain): it starts the guard, installs the filter, and
// runs each case with a local executor whose ExecGuard is the guard. The
// test process itself is never traced, and nothing it does afterwards
// needs a tracer.

const childEnv = "SHELLBOX_EXECGUARD_CHILD"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Arg {
		os.Exit(Main(os.Args[2:], os.Stderr))
	}
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

// gcase is one command the child runs; gresult what came of it.
type gcase struct {
	Command string        `json:"command"`
	Rules   *cmdmatch.Set `json:"rules,omitempty"`
	// Timeout is the call's, in seconds (0: 60).
	Timeout float64 `json:"timeout,omitempty"`
}

type gresult struct {
	Stdout, Stderr string
	ExitCode       int
	Signal         string
	Err            string
	Seconds        float64
	// GuardCPU is the guard process's CPU time (user and system, all its
	// threads) while the case ran, in seconds; CPU the same of the
	// agent stand-in and what it started and waited for.
	GuardCPU, CPU float64
	// GuardThreads is the guard process's number of threads after the
	// case (the Go runtime ends none of those it made: the most it had).
	GuardThreads int
}

// procCPU is the user and system time of process pid so far, in seconds
// (0 if unknown).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := bytes.Cut(b, []byte(") "))
	f := bytes.Fields(rest) // from field 3, state
	if len(f) < 13 {
		return 0
	}
	var ut, st float64
	fmt.Sscan(string(f[11]), &ut)
	fmt.Sscan(string(f[12]), &st)
	return (ut + st) / 100 // USER_HZ
}

// procThreads is the number of threads of process pid (0 if unknown).
func procThreads(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := bytes.Cut(b, []byte("\nThreads:"))
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	var n int
	fmt.Sscan(string(line), &n)
	return n
}

// selfCPU is this process's and its waited-for children's CPU time.
func selfCPU() float64 {
	var s, c unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &s)
	unix.Getrusage(unix.RUSAGE_CHILDREN, &c)
	tv := func(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(s.Utime) + tv(s.Stime) + tv(c.Utime) + tv(c.Stime)
}

// childMain is the agent stand-in: mode "guard" or "none", then
// "-reaper" to adopt orphans as the agent does, "-concurrent" to run all
// cases at once; cases on stdin, results on stdout, one
// JSON each. Its working directory is the root.
func childMain(mode string) int {
	logger := log.New(os.Stderr, "child: ", 0)
	mode, concurrent := strings.CutSuffix(mode, "-concurrent")
	mode, reaper := strings.CutSuffix(mode, "-reaper")
	if reaper {
		// As the agent: orphans are handed to it. (Not reaped here: the
		// executor's leaders are not to be taken; they stay zombies until
		// the child exits.)
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "SUBREAPER:", err)
			return 3
		}
	}
	var g *Guard
	if mode == "guard" {
		var err error
		if g, err = Start(-1, -1, logger.Printf); err != nil {
			fmt.Fprintln(os.Stderr, "START:", err)
			return 3
		}
		if err := InstallFilter(); err != nil {
			fmt.Fprintln(os.Stderr, "FILTER:", err)
			return 3
		}
	}
	root, _ := os.Getwd()
	cfg := local.Config{Root: root, Home: root, SpillDir: filepath.Join(root, ".spill"), Cgroup: local.CgroupOff}
	if g != nil {
		cfg.ExecGuard = g
	}
	e, err := local.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "NEW:", err)
		return 3
	}
	run := func(c gcase) gresult {
		timeout := 60 * time.Second
		if c.Timeout > 0 {
			timeout = time.Duration(c.Timeout * float64(time.Second))
		}
		spec, err := e.Resolve(context.Background(), executor.Request{Session: "s", Shell: executor.Bash, Command: c.Command,
			Timeout: timeout, ExecRules: c.Rules})
		var r gresult
		if err == nil {
			gpid := 0
			if g != nil {
				gpid = g.cmd.Process.Pid
			}
			c0, g0 := selfCPU(), procCPU(gpid)
			t0 := time.Now()
			var res executor.Result
			res, err = e.Run(context.Background(), spec)
			r = gresult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode, Signal: res.Signal, Seconds: time.Since(t0).Seconds()}
			r.CPU = selfCPU() - c0
			if gpid != 0 {
				r.GuardCPU = procCPU(gpid) - g0
				r.GuardThreads = procThreads(gpid)
			}
		}
		if err != nil {
			r.Err = err.Error()
		}
		return r
	}
	dec, enc := json.NewDecoder(os.Stdin), json.NewEncoder(os.Stdout)
	var cases []gcase
	for {
		var c gcase
		if err := dec.Decode(&c); err != nil {
			break
		}
		if !concurrent {
			enc.Encode(run(c))
			continue
		}
		cases = append(cases, c)
	}
	// Concurrent: every case at once (the agent runs a session's calls
	// so), results in the cases' order.
	rs := make([]gresult, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() { rs[i] = run(c) })
	}
	wg.Wait()
	for _, r := range rs {
		enc.Encode(r)
	}
	return 0
}

// runChild runs cases in a child in mode, in dir; it fails t (or skips it
// where this host cannot trace, outside CI) on the child's failure.
func runChild(tb testing.TB, mode, dir string, cases []gcase) []gresult {
	tb.Helper()
	rs, _ := runChildLog(tb, mode, dir, cases)
	return rs
}

// runChildLog is runChild, and also returns the child's stderr (the
// guard's log).
func runChildLog(tb testing.TB, mode, dir string, cases []gcase) ([]gresult, string) {
	tb.Helper()
	var in bytes.Buffer
	for _, c := range cases {
		json.NewEncoder(&in).Encode(c)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.Dir = dir
	cmd.Stdin = &in
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if strings.Contains(errb.String(), "START:") && os.Getenv("CI") == "" {
			tb.Skipf("this host cannot run the exec guard (outside CI, skipped): %s", errb.String())
		}
		tb.Fatalf("child: %v\n%s", err, errb.String())
	}
	var rs []gresult
	dec := json.NewDecoder(&out)
	for {
		var r gresult
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			tb.Fatalf("child's output: %v\n%s", err, out.String())
		}
		rs = append(rs, r)
	}
	if len(rs) != len(cases) {
		tb.Fatalf("%d results for %d cases; child's stderr:\n%s", len(rs), len(cases), errb.String())
	}
	return rs, errb.String()
}

func denyRm() *cmdmatch.Set {
	return &cmdmatch.Set{Policy: "acme", Rules: []cmdmatch.Spec{
		{Rule: "no-rm", Decision: cmdmatch.Deny, Reason: "files are not deleted here", Command: []string{"rm", "unlink", "shred"}},
		{Rule: "no-force-push", Decision: cmdmatch.Deny, Prefix: []string{"git push --force"}},
		{Rule: "ask-curl", Decision: cmdmatch.Ask, Command: []string{"curl"}},
	}}
}

// TestDeniedAtExec: whatever produced the exec, a denied command fails
// with EPERM, its stderr names the rule, the file survives, and the call
// goes on. One case per class the reader was bypassed by (and siblings).
func TestDeniedAtExec(t *testing.T) {
	rm, err := exec.LookPath("rm")
	if err != nil {
		t.Skip("no rm")
	}
	dir := t.TempDir()
	classes := []struct{ name, cmd string }{
		{"plain", "rm victim"},
		{"command substitution", "$(echo rm) victim"},
		{"variable", "r=rm; $r victim"},
		{"tilde", "HOME=" + filepath.Dir(rm) + "; ~/rm victim"},
		{"brace split by a quote", `/bin/{r''m,x} victim 2>/dev/null; /usr/bin/r''m victim`},
		{"glob", "/usr/bin/r? victim"},
		{"heredoc backslash layer", "bash <<EOF\n\\rm victim\nEOF"},
		{"sh script", "printf 'rm victim\\n' > s.sh; sh s.sh"},
		{"dash -c", "dash -c 'rm victim' || sh -c 'rm victim'"},
		{"arithmetic", "a[$(rm victim)]=1; echo $((a[0]))"},
		{"env runner", "env rm victim"},
		{"xargs", "echo victim | xargs rm"},
		{"find -exec", "find . -maxdepth 1 -name victim -exec rm {} \\;"},
		{"editor variable", "EDITOR=rm; $EDITOR victim"},
		{"eval", "eval 'r''m victim'"},
		{"exec builtin", "(exec rm victim)"},
		{"python", "python3 -c 'import os; os.execvp(\"rm\", [\"rm\", \"victim\"])'"},
		{"copy by another name", "cp " + rm + " ./del; ./del victim"},
		{"symlink", "ln -sf " + rm + " ./del2; ./del2 victim"},
		{"absolute path", rm + " victim"},
		{"unlink", "unlink victim"},
		{"git option spelling", "git push --forc origin main"},
		{"the dynamic loader", "/lib64/ld-linux-x86-64.so.2 " + rm + " victim"},
		{"the loader with --argv0", "/lib64/ld-linux-x86-64.so.2 --argv0 ls " + rm + " victim"},
		{"a copy of the loader", "cp /lib64/ld-linux-x86-64.so.2 ./l; ./l " + rm + " victim"},
		{"busybox applet", "printf '#!/bin/sh\\nshift; exec \"$@\"\\n' > busybox; chmod +x busybox; ./busybox rm victim"},
		{"exec -a", "(exec -a ls rm victim)"},
		{"hard link", "ln " + rm + " ./hl 2>/dev/null || cp " + rm + " ./hl; ./hl victim"},
	}
	var cases []gcase
	for _, c := range classes {
		cases = append(cases, gcase{Command: "touch victim; " + c.cmd + "; echo after; test -e victim && echo survived", Rules: denyRm()})
	}
	// Without the guard the same cases delete the file: the test sees it.
	if r := runChild(t, "none", dir, cases[:1])[0]; strings.Contains(r.Stdout, "survived") {
		t.Fatalf("without the guard rm did not delete: %+v", r)
	}
	rs := runChild(t, "guard", dir, cases)
	t.Logf("what the plain case shows: %q", rs[0].Stderr)
	for i, c := range classes {
		r := rs[i]
		t.Run(c.name, func(t *testing.T) {
			if r.Err != "" {
				t.Fatalf("%s: %s", c.cmd, r.Err)
			}
			if !strings.Contains(r.Stdout, "after") || !strings.Contains(r.Stdout, "survived") {
				t.Errorf("%s: the file is gone or the call stopped:\nstdout %q\nstderr %q", c.cmd, r.Stdout, r.Stderr)
			}
			want := "by policy acme/no-rm"
			switch {
			case strings.HasPrefix(c.cmd, "git"):
				want = "by policy acme/no-force-push"
			case strings.Contains(c.cmd, "ld-linux"):
				want = "by policy acme/exec-check"
			}
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("%s: stderr does not name the rule (%s):\n%s", c.cmd, want, r.Stderr)
			}
		})
	}
}

// TestAskUnseenRefused: an ask rule's command the reader did not see is
// refused with a reason that says to run it as a call of its own.
func TestAskUnseenRefused(t *testing.T) {
	rs := runChild(t, "guard", t.TempDir(), []gcase{{Command: "c=curl; $c --version >/dev/null; echo rc=$?", Rules: denyRm()}})
	if !strings.Contains(rs[0].Stdout, "rc=126") && !strings.Contains(rs[0].Stdout, "rc=1") {
		t.Errorf("curl ran: %+v", rs[0])
	}
	if !strings.Contains(rs[0].Stderr, "acme/ask-curl") || !strings.Contains(rs[0].Stderr, "run it as a call of its own") {
		t.Errorf("stderr: %q", rs[0].Stderr)
	}
}

// TestAllowedRunsAsBefore: what no rule refuses runs, with the same output
// and exit status as without the guard; and with no rules, everything
// does, rm included.
func TestAllowedRunsAsBefore(t *testing.T) {
	cmds := []gcase{
		{Command: "echo hi; ls / >/dev/null; printf '%s\\n' a b | sort -r; exit 3", Rules: denyRm()},
		{Command: "touch f; rm f; test -e f || echo gone"},
		{Command: "sleep 0.1 & wait; (sh -c 'kill -STOP $$; echo resumed' & p=$!; sleep 0.2; kill -CONT $p; wait $p)", Rules: denyRm()},
		{Command: "git --version >/dev/null && echo git-ok", Rules: denyRm()},
	}
	dir := t.TempDir()
	with := runChild(t, "guard", dir, cmds)
	without := runChild(t, "none", dir, cmds)
	for i := range cmds {
		if with[i].Stdout != without[i].Stdout || with[i].ExitCode != without[i].ExitCode || with[i].Err != without[i].Err {
			t.Errorf("%q:\nwith the guard    %+v\nwithout the guard %+v", cmds[i].Command, with[i], without[i])
		}
	}
	if !strings.Contains(with[1].Stdout, "gone") {
		t.Errorf("with no rules rm did not run: %+v", with[1])
	}
}

// BenchmarkExecLoop: the guard's cost per exec, side by side: `for i in
// $(seq 1000); do /bin/true; done` (1000 forks and execs) without and with
// it, alternately, each run in a fresh agent stand-in (so load on the
// machine hits both alike), under a rule set that names rm (every exec is
// read and matched). Reports the median time per fork and exec of each,
// and the median of the pairwise differences; and the CPU time of each
// (the loop's and, with it, the guard process's), and the machine's load
// average at the end.
func BenchmarkExecLoop(b *testing.B) {
	// A loaded machine (a CI run beside it) can take a minute for it.
	loop := []gcase{{Command: "for i in $(seq 1000); do /bin/true; done", Rules: benchRules(), Timeout: 600}}
	var none, guard, added, guardCPU, cpuNone, cpuGuard []float64
	for range b.N {
		n := runChild(b, "none", b.TempDir(), loop)[0]
		g := runChild(b, "guard", b.TempDir(), loop)[0]
		for _, r := range []gresult{n, g} {
			if r.Err != "" || r.ExitCode != 0 {
				b.Fatalf("%+v", r)
			}
		}
		none, guard = append(none, n.Seconds*1e3), append(guard, g.Seconds*1e3)
		added = append(added, (g.Seconds-n.Seconds)*1e3)
		guardCPU = append(guardCPU, g.GuardCPU*1e3)
		cpuNone, cpuGuard = append(cpuNone, n.CPU*1e3), append(cpuGuard, (g.CPU+g.GuardCPU)*1e3)
	}
	med := func(x []float64) float64 { x = slices.Clone(x); slices.Sort(x); return x[len(x)/2] }
	b.ReportMetric(med(none), "none-p50-µs/exec")
	b.ReportMetric(med(guard), "guard-p50-µs/exec")
	b.ReportMetric(med(added), "added-p50-µs/exec")
	// CPU: what a machine's budget pays (the loop's, and the guard's).
	b.ReportMetric(med(cpuNone), "cpu-none-p50-µs/exec")
	b.ReportMetric(med(cpuGuard), "cpu-guard-p50-µs/exec")
	b.ReportMetric(med(guardCPU), "guard-process-cpu-p50-µs/exec")
	var l [3]float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(b), &l[0], &l[1], &l[2])
	}
	b.ReportMetric(l[0], "loadavg-1m")
}

// benchRules are BenchmarkExecLoop's rules: denyRm's, or none with
// SHELLBOX_EXECGUARD_BENCH_NORULES set (the floor: the stops alone).
func benchRules() *cmdmatch.Set {
	if os.Getenv("SHELLBOX_EXECGUARD_BENCH_NORULES") != "" {
		return nil
	}
	return denyRm()
}

// TestConcurrentCallsEnd: calls that fork, exec, stop and kill at once, as
// an agent's sessions do, all end with their output under the guard, none
// held in a stop: the guard sees every process's first stop, its parent's
// event and its exit in any order.
func TestConcurrentCallsEnd(t *testing.T) {
	// Continues process $p until it has ended: a CONT sent before its
	// STOP does not count, with or without a guard.
	stopCont := `for i in $(seq 20); do sh -c 'kill -STOP $$; echo r' & p=$!; ` +
		`while kill -CONT $p 2>/dev/null && ! grep -qs '^State:[[:space:]]*Z' /proc/$p/status; do sleep 0.01; done; wait $p; done >/dev/null`
	cmds := []string{
		"for i in $(seq 300); do /bin/true; done",
		"for i in $(seq 100); do echo x | cat | tr x y >/dev/null; done",
		"for i in $(seq 50); do sleep 0.01 & done; wait",
		"for i in $(seq 100); do x=$(echo $i); done",
		stopCont,
		// Threads exec'ing at once, and a thread other than the leader
		// replacing the process.
		`python3 -c 'import subprocess,threading
ts=[threading.Thread(target=lambda: [subprocess.run(["true"]) for _ in range(30)]) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]'`,
		`python3 -c 'import os,threading,time
threading.Thread(target=lambda: os.execvp("true", ["true"])).start(); time.sleep(5)'`,
		// Parents killed while they fork: a child whose parent's fork
		// event never comes must not stay stopped (it holds the call's
		// output open).
		`for i in $(seq 30); do sh -c 'while :; do /bin/true & done' >/dev/null 2>&1 & p=$!; sleep 0.02; kill -9 $p; wait $p 2>/dev/null; done`,
	}
	var cases []gcase
	for range 2 {
		for _, c := range cmds {
			cases = append(cases, gcase{Command: c + "\necho done", Rules: denyRm()})
		}
	}
	rs := runChild(t, "guard-concurrent", t.TempDir(), cases)
	for i, r := range rs {
		if r.Err != "" || r.ExitCode != 0 || !strings.HasSuffix(r.Stdout, "done\n") {
			t.Errorf("%q did not end as without the guard (%.1fs): exit %d %s %s\nstdout %q\nstderr %q",
				cases[i].Command, r.Seconds, r.ExitCode, r.Signal, r.Err, r.Stdout, clip.To(r.Stderr, 2000))
		}
		// Its threads share the sandbox's pids cgroup: it holds to its
		// share with two processors (Main) under this load too.
		if r.GuardThreads == 0 || r.GuardThreads > agentapi.GuardTasks {
			t.Errorf("the guard had %d threads, its share is %d", r.GuardThreads, agentapi.GuardTasks)
		}
	}
	t.Logf("the guard's threads: %d (its share %d)", rs[len(rs)-1].GuardThreads, agentapi.GuardTasks)
}

// TestKilledForkParentsEnd: parents SIGKILLed as they fork, with children
// that hold the call's output open (a command substitution's pipe, which
// bash reads to its end). A parent killed in its fork event stop before
// the guard waited for it never reports the event, so its child, stopped
// at its first stop before that event (a placeholder), was never named
// and never continued: it held the pipe, and the call, forever. It must
// be taken for an orphan (continued, its execs refused) and the call end.
func TestKilledForkParentsEnd(t *testing.T) {
	killer := `out=$(for i in $(seq 30); do sh -c 'while :; do /bin/true & done' & p=$!; ` +
		`sleep 0.0$((RANDOM % 5)); kill -9 $p; done; wait) 2>/dev/null
echo done`
	var cases []gcase
	for range 4 {
		cases = append(cases, gcase{Command: killer, Rules: denyRm()})
	}
	// The orphans go to a reaper outside, or, as in a sandbox, to the
	// agent.
	for _, mode := range []string{"guard-concurrent", "guard-reaper-concurrent"} {
		rs, stderr := runChildLog(t, mode, t.TempDir(), cases)
		for i, r := range rs {
			if r.Err != "" || r.ExitCode != 0 || !strings.HasSuffix(r.Stdout, "done\n") {
				t.Errorf("%s: call %d did not end (%.1fs): exit %d %s %s\nstdout %q\nstderr %q",
					mode, i, r.Seconds, r.ExitCode, r.Signal, r.Err, r.Stdout, clip.To(r.Stderr, 2000))
			}
		}
		t.Logf("%s: the guard took %d processes for orphans, %d of them after %s", mode,
			strings.Count(stderr, "it goes on, every exec"), strings.Count(stderr, "named it within"), nameTimeout)
	}
}

// TestGroupStopHolds: a process that stops itself (SIGSTOP) stays stopped
// until a SIGCONT, as without the guard: its first stop under the guard
// is PTRACE_EVENT_STOP with SIGTRAP, which must count as its first, or
// its first real group-stop is taken for it and continued.
func TestGroupStopHolds(t *testing.T) {
	cmd := `sh -c 'kill -STOP $$; echo resumed' >out & p=$!
until grep -qs '^State:[[:space:]]*[tTZ]' /proc/$p/status || ! kill -0 $p 2>/dev/null; do sleep 0.01; done
sleep 0.5
echo "before CONT: [$(cat out)]"
while kill -CONT $p 2>/dev/null && ! grep -qs '^State:[[:space:]]*Z' /proc/$p/status; do sleep 0.01; done; wait $p
echo "after CONT: [$(cat out)]"`
	const want = "before CONT: []\nafter CONT: [resumed]\n"
	dir := t.TempDir()
	for _, mode := range []string{"none", "guard"} {
		r := runChild(t, mode, dir, []gcase{{Command: cmd, Rules: denyRm()}})[0]
		if r.Stdout != want || r.Err != "" {
			t.Errorf("%s: stdout %q (want %q), err %q, stderr %q", mode, r.Stdout, want, r.Err, r.Stderr)
		}
	}
}

// TestStopContEnds: a SIGSTOP and then a SIGCONT from outside leave a
// process running, as without the guard, however close together: a
// SIGCONT that comes while the SIGSTOP waits in the guard (its
// signal-delivery stop) must not be lost to the SIGSTOP delivered after
// it, which would leave the process stopped for good.
func TestStopContEnds(t *testing.T) {
	cmd := `for i in $(seq 10); do sleep 0.5 & p=$!; for j in $(seq 30); do kill -STOP $p; for ((k = RANDOM % 300; k > 0; k--)); do :; done; kill -CONT $p; done; wait $p; done; echo done`
	var cases []gcase
	for range 4 {
		cases = append(cases, gcase{Command: cmd, Rules: denyRm()})
	}
	for i, r := range runChild(t, "guard-concurrent", t.TempDir(), cases) {
		if r.Err != "" || r.ExitCode != 0 || r.Stdout != "done\n" {
			t.Errorf("call %d did not end (%.1fs): exit %d %s %s\nstdout %q\nstderr %q",
				i, r.Seconds, r.ExitCode, r.Signal, r.Err, r.Stdout, clip.To(r.Stderr, 2000))
		}
	}
}

// TestHashNotKeptForRecentChange: a file the check hashed, rewritten in
// place with a named program's bytes (same inode, same size), is known
// for that program, even where the rewrite's ctime and mtime are those
// the hash was kept for: a kernel without fine-grained timestamps (Linux
// before 6.13, or a file system of coarse granularity) gives a change in
// the same tick the same ones, so the identity stat'ed at the next exec
// is the old one. The old identity is passed here as that stat would
// give it.
func TestHashNotKeptForRecentChange(t *testing.T) {
	rm, err := exec.LookPath("rm")
	if err != nil {
		t.Skip("no rm")
	}
	body, err := os.ReadFile(rm)
	if err != nil {
		t.Skip(err)
	}
	ids := newIdentities()
	if len(ids.programs("rm")) == 0 {
		t.Skip("rm is not among the programs' directories' files")
	}
	f := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(f, make([]byte, len(body)), 0o755); err != nil {
		t.Fatal(err)
	}
	before, ok := statID(f)
	if !ok {
		t.Fatal("no stat of", f)
	}
	if n := ids.nameOf(f, before, []string{"rm"}); n != "" {
		t.Fatalf("zeros taken for %q", n)
	}
	// In place: the same inode and size (os.WriteFile truncates the file).
	if err := os.WriteFile(f, body, 0o755); err != nil {
		t.Fatal(err)
	}
	if n := ids.nameOf(f, before, []string{"rm"}); n != "rm" {
		t.Fatalf("a copy of rm written over a file hashed just before passed as %q", n)
	}
}
