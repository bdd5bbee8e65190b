package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/agentapi"
)

// TestDockerThreads: a command starts a thread with glibc's pthread_create
// on both runtimes. glibc tries clone3 first and falls back to clone only on
// ENOSYS; gVisor answers the runtime profile's SCMP_ACT_ERRNO with EPERM
// whatever its errnoRet, so before the agent's filter answered clone3 with
// ENOSYS itself (agent/notrace) no threaded program worked under gVisor
// (python3: "can't start new thread"). The probe is C, linked static by the
// host's gcc (the one cgo and -race need) from testdata/threads.
func TestDockerThreads(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc: %v (the race detector needs it too)", err)
	}
	probe := filepath.Join(t.TempDir(), "threads")
	if out, err := exec.Command(gcc, "-static", "-pthread", "-O2", "-o", probe, "testdata/threads/threads.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc -static testdata/threads/threads.c: %v\n%s", err, out)
	}
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			cli := engine(t)
			requireRuntime(t, cli, rt)
			memory, pids := int64(64<<20), agentapi.PidsCgroupLimit(256)
			if rt == "runsc" {
				memory, pids = 256<<20, 1024 // as testDocker
			}
			sb := newSandboxPrep(t, cli, rt, memory, pids, func(hostDir string) {
				b, err := os.ReadFile(probe)
				if err == nil {
					err = os.WriteFile(filepath.Join(hostDir, "threads"), b, 0o755)
				}
				if err != nil {
					t.Fatal(err)
				}
			})
			res := sb.run("/run/shellbox/threads", 0)
			got := res.Stdout + res.Stderr
			for _, want := range []string{"clone3: ENOSYS\n", "thread: ok\n"} {
				if !strings.Contains(got, want) {
					t.Errorf("%s: the probe said:\n%s\nwant %q\n%s", rt, got, want, sb.logs())
				}
			}
		})
	}
}
