package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
)

// TestDockerPtrace: a command of one call cannot trace, nor read or write
// the memory of, nor take a descriptor of, a process of another call,
// although both run as the sandbox user (the agent's seccomp filter,
// agent/notrace.ConfineCommands). Opening /proc/<pid>/mem is not a system
// call the filter can tell apart: each call's Landlock domain refuses it on
// runc (agent/landlock), and gVisor's sentry does.
func TestDockerPtrace(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) { testPtrace(t, rt) })
	}
}

func testPtrace(t *testing.T, rt string) {
	cli := engine(t)
	requireRuntime(t, cli, rt)
	probe := filepath.Join(t.TempDir(), "ptrace")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-trimpath", "-o", probe, "./testdata/ptrace")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/ptrace: %v\n%s", err, out)
	}
	memory, pids := int64(64<<20), agentapi.PidsCgroupLimit(256)
	if rt == "runsc" {
		memory, pids = 256<<20, 1024 // as testDocker
	}
	sb := newSandboxPrep(t, cli, rt, memory, pids, func(hostDir string) {
		b, err := os.ReadFile(probe)
		if err == nil {
			err = os.WriteFile(filepath.Join(hostDir, "ptrace"), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	// The victim: another call, a background task.
	tk, err := sb.agent.Start(context.Background(), spec(executor.Request{Command: "echo $$ > /tmp/victim; exec sleep 100", Background: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Kill(context.Background())
	res := sb.run(waitFile("/tmp/victim")+"; /run/shellbox/ptrace $(cat /tmp/victim)", 0)
	got := res.Stdout + res.Stderr
	for _, want := range []string{"ptrace: EPERM\n", "process_vm_readv: EPERM\n", "pidfd_getfd: EPERM\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("%s: the other call's process:\n%s\nwant %q", rt, got, want)
		}
	}
	// Its memory file: refused by the calls' Landlock domains on runc,
	// by the sentry under gVisor.
	if !strings.Contains(got, "mem: EACCES\n") && !strings.Contains(got, "mem: EPERM\n") {
		t.Errorf("%s: the other call's /proc/<pid>/mem opens:\n%s\n%s", rt, got, sb.logs())
	}
	// The agent says which: a domain per call on runc, none under gVisor
	// (no Landlock there).
	logs := sb.logs()
	if on := strings.Contains(logs, ", a Landlock domain per call"); on != (rt == "runc") {
		t.Errorf("%s: Landlock domain per call %v; the agent's log:\n%s", rt, on, logs)
	}
	t.Logf("%s: %s", rt, strings.ReplaceAll(strings.TrimSpace(got), "\n", "; "))
}
