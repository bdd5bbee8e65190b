package main

import (
	"strings"
	"testing"

	"github.com/shellbox/shellbox/agentapi"
)

// TestDockerThreads: a command starts a thread with glibc's pthread_create
// on both runtimes. glibc tries clone3 first and falls back to clone only on
// ENOSYS; gVisor answers the runtime profile's SCMP_ACT_ERRNO with EPERM
// whatever its errnoRet, so before the agent's filter answered clone3 with
// ENOSYS itself (agent/notrace) no threaded program worked under gVisor
// (python3: "can't start new thread"). The probe is the test image's
// threads-probe (images/testimage/build.sh); the sandbox suites run it on
// containerd and pods too (sandboxtest, HardeningFromInside).
func TestDockerThreads(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			cli := engine(t)
			requireRuntime(t, cli, rt)
			memory, pids := int64(64<<20), agentapi.PidsCgroupLimit(256)
			if rt == "runsc" {
				memory, pids = 256<<20, 1024 // as testDocker
			}
			sb := newSandbox(t, cli, rt, memory, pids)
			res := sb.run("threads-probe", 0)
			got := res.Stdout + res.Stderr
			for _, want := range []string{"clone3: ENOSYS\n", "thread: ok\n"} {
				if !strings.Contains(got, want) {
					t.Errorf("%s: threads-probe said:\n%s\nwant %q\n%s", rt, got, want, sb.logs())
				}
			}
		})
	}
}
