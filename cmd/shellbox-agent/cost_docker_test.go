package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/execguard"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
)

// TestDockerAgentCost: in a runc sandbox whose commands may have 64
// processes (pids cgroup: 64 + agentapi.AgentTasks), an idle agent holds
// agentapi.AgentTasks threads; one command's tree can start 64 processes,
// not fewer and not more; and under load and a fork bomb the agent never
// needs a thread more, answers, and is not killed.
func TestDockerAgentCost(t *testing.T) {
	cli := engine(t)
	const limit = 64
	sb := newSandbox(t, cli, "runc", 64<<20, agentapi.PidsCgroupLimit(limit))
	info, err := cli.ContainerInspect(context.Background(), sb.id)
	if err != nil {
		t.Fatal(err)
	}
	pid := info.State.Pid
	threads, rss := agentCost(t, pid)
	t.Logf("idle agent: %d threads, VmRSS %s", threads, rss)
	if threads > agentapi.AgentTasks {
		t.Errorf("idle agent: %d threads, want at most agentapi.AgentTasks = %d", threads, agentapi.AgentTasks)
	}
	guard := guardPid(t, pid)
	gThreads, gRSS := agentCost(t, guard)
	t.Logf("its exec guard (pid %d): %d threads, VmRSS %s", guard, gThreads, gRSS)
	if gThreads > agentapi.GuardTasks {
		t.Errorf("exec guard: %d threads, want at most agentapi.GuardTasks = %d", gThreads, agentapi.GuardTasks)
	}

	n := treeMax(t, sb)
	t.Logf("a command's tree held %d processes under a limit of %d", n, limit)
	if n < limit || n > limit+2 {
		t.Errorf("a command's tree held %d processes, want the policy's %d", n, limit)
	}

	// Load: commands with output, background tasks and a fork bomb at
	// once; the agent must keep within its threads throughout.
	ctx := context.Background()
	stopSampling := make(chan struct{})
	peak := make(chan string, 1)
	go func() { peak <- threadPeak(pid, stopSampling) }()
	bomb, err := sb.agent.Start(ctx, spec(executor.Request{Command: `b() { b | b & }; b; sleep 3`, Background: true, Timeout: 3 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sb.agent.Run(ctx, spec(executor.Request{Command: fmt.Sprintf("head -c 200000 /dev/zero; exit %d", i%3), Timeout: 20 * time.Second}))
			if err != nil {
				// The bomb may hold every pid for the whole call: a
				// failed start is the fork's error, not the agent's end.
				if !strings.Contains(err.Error(), "resource temporarily unavailable") {
					t.Errorf("call %d: %v", i, err)
				}
				return
			}
			if res.ExitCode != i%3 && res.Signal == "" {
				t.Errorf("call %d: %+v", i, res)
			}
		}()
	}
	wg.Wait()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := bomb.Wait(wctx); err != nil {
		t.Fatalf("the bomb: %v\n%s", err, sb.logs())
	}
	// The bomb filled the cgroup (the host's view of it).
	ev, err := os.ReadFile("/sys/fs/cgroup/pids/docker/" + sb.id + "/pids.events")
	if err == nil {
		t.Logf("pids.events after the bomb: %s", strings.TrimSpace(string(ev)))
		if strings.TrimSpace(string(ev)) == "max 0" {
			t.Errorf("the bomb never reached the pids limit")
		}
	}
	if got := sb.run("echo alive", 10*time.Second).Stdout; got != "alive\n" {
		t.Errorf("after the bomb: %q", got)
	}
	close(stopSampling)
	threads, rss = agentCost(t, pid)
	t.Logf("agent after the load: %d threads, VmRSS %s", threads, rss)
	if n, _ := agentCost(t, guard); n > agentapi.GuardTasks {
		t.Errorf("exec guard after the load: %d threads, want at most agentapi.GuardTasks = %d", n, agentapi.GuardTasks)
	}
	if threads > agentapi.AgentTasks {
		t.Errorf("after the load: %d threads, want at most agentapi.AgentTasks = %d\nat the peak, system call/wait channel: thread count\n%s\n%s",
			threads, agentapi.AgentTasks, <-peak, sb.logs())
	}
}

// threadPeak samples the threads of the process pid (host pid) until stop,
// and describes them at the highest count seen: how many wait in which
// system call and kernel function (/proc/<pid>/task/<tid>/syscall, wchan).
func threadPeak(pid int, stop chan struct{}) string {
	peak := 0
	var where map[string]int
	for {
		select {
		case <-stop:
			return fmt.Sprintf("%d threads: %v", peak, where)
		case <-time.After(2 * time.Millisecond):
		}
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if len(ents) <= peak {
			continue
		}
		peak, where = len(ents), map[string]int{}
		for _, e := range ents {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, e.Name()))
			w, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", pid, e.Name()))
			if f := strings.Fields(string(b)); len(f) > 0 {
				where[f[0]+"/"+string(w)]++
			}
		}
	}
}

// agentCost reads the thread count and VmRSS of the process pid (host pid).
func agentCost(t *testing.T, pid int) (threads int, rss string) {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents), statusFields(string(b))["VmRSS"]
}

// guardPid is the host pid of the exec guard of the agent at host pid
// agent: its child whose command line names execguard.Arg.
func guardPid(t *testing.T, agent int) int {
	t.Helper()
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", agent))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", agent, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			cmd, _ := os.ReadFile("/proc/" + f + "/cmdline")
			if strings.Contains(string(cmd), "\x00"+execguard.Arg+"\x00") {
				n, _ := strconv.Atoi(f)
				return n
			}
		}
	}
	t.Fatalf("no exec guard among the children of the agent (pid %d)", agent)
	return 0
}

// treeMax starts sleeps from one command until a fork fails, and returns
// how many processes the command's tree held at its peak: bash, dash and
// the sleeps (dash does not retry a failed fork; bash would, for 15 s).
func treeMax(t *testing.T, sb *sandbox) int {
	t.Helper()
	res := sb.run(`rm -f /tmp/n; dash -c 'i=0; while :; do sleep 60 & i=$((i+1)); echo $i > /tmp/n; done' 2>/dev/null; read n < /tmp/n; echo $n`, 60*time.Second)
	n, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("count: %+v", res)
	}
	return n + 2
}
