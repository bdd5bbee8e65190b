package files

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// asAgent runs fn on a locked thread whose effective set lacks what the
// agent does not hold effective: CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH
// (lowered by cmd/shellbox-agent, kept permitted), and CAP_DAC_OVERRIDE
// (never given), as in a gVisor sandbox. The thread gets its sets back
// after.
func asAgent(t *testing.T, fn func(agent capSets)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	full, err := threadCaps()
	if err != nil {
		t.Fatal(err)
	}
	if full.prm&tracerCaps != tracerCaps || full.eff&(1<<unix.CAP_DAC_OVERRIDE) == 0 {
		t.Skipf("needs CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_DAC_OVERRIDE (CapPrm %#x, CapEff %#x)", full.prm, full.eff)
	}
	agent := full
	agent.eff &^= tracerCaps | 1<<unix.CAP_DAC_OVERRIDE
	if err := setThreadCaps(agent); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := setThreadCaps(full); err != nil {
			t.Fatalf("restoring the test thread's capabilities: %v", err)
		}
	}()
	fn(agent)
}

// userProcess starts a process of uid 4242 with a pipe as its fd 0 and
// returns its pid and what its fd 0 links to.
func userProcess(t *testing.T) (pid int, link string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); w.Close() })
	r.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, "pipe:[" + strconv.FormatUint(st.Ino, 10) + "]"
}

// TestAsTracer: a root thread without CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH
// and CAP_DAC_OVERRIDE in its effective set cannot read another user's fd
// links; AsTracer raises the first two for fn (the ids stay root's) and
// lowers them after, leaving the thread's sets as they were.
func TestAsTracer(t *testing.T) {
	asAgent(t, func(agent capSets) {
		pid, want := userProcess(t)
		fd0 := "/proc/" + strconv.Itoa(pid) + "/fd/0"
		if _, err := os.Readlink(fd0); !errors.Is(err, os.ErrPermission) {
			t.Fatalf("readlink %s without the capabilities: %v, want permission denied", fd0, err)
		}
		if !TracerCaps() {
			t.Fatal("TracerCaps() = false with both permitted")
		}
		var got string
		var during capSets
		err := AsTracer(func() error {
			var err error
			during, _ = threadCaps()
			got, err = os.Readlink(fd0)
			return err
		})
		if err != nil || got != want {
			t.Errorf("AsTracer: readlink %s = %q, %v; want %q", fd0, got, err, want)
		}
		if during.eff != agent.eff|tracerCaps {
			t.Errorf("CapEff during AsTracer %#x, want %#x", during.eff, agent.eff|tracerCaps)
		}
		if r, e, s := unix.Getresuid(); r != 0 || e != 0 || s != 0 {
			t.Errorf("uids %d/%d/%d after AsTracer, want root's", r, e, s)
		}
		if after, _ := threadCaps(); after != agent {
			t.Errorf("capabilities after AsTracer %+v, want %+v", after, agent)
		}
		if _, err := os.Readlink(fd0); !errors.Is(err, os.ErrPermission) {
			t.Errorf("readlink %s after AsTracer: %v, want permission denied", fd0, err)
		}
	})
}

// TestAsUserKeepsCaps: coming back from the user's ids (setfsuid, or the
// effective ids as under gVisor) would raise what is permitted; AsUser puts
// the thread's sets back as they were, so the capabilities the agent keeps
// permitted only stay out of its effective set.
func TestAsUserKeepsCaps(t *testing.T) {
	for _, effective := range []bool{false, true} {
		t.Run(map[bool]string{false: "setfsuid", true: "effective-ids"}[effective], func(t *testing.T) {
			forceEffectiveIDs = effective
			defer func() { forceEffectiveIDs = false }()
			asAgent(t, func(agent capSets) {
				var during capSets
				if err := AsUser(4242, 4242, func() error { during, _ = threadCaps(); return nil }); err != nil {
					t.Fatal(err)
				}
				if effective && during.eff != 0 {
					t.Errorf("CapEff as the user %#x, want none", during.eff)
				}
				if after, _ := threadCaps(); after != agent {
					t.Errorf("capabilities after AsUser %+v, want %+v", after, agent)
				}
			})
		})
	}
}
