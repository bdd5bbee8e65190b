package containerd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	// Leftovers of crashed runs first, so they neither leak nor confuse.
	if addr := os.Getenv(containerdtest.EnvAddress); addr != "" {
		if rt, err := containerd.New(containerd.Config{Address: addr, Namespace: containerdtest.Namespace(),
			StateDir: "/nonexistent", AgentBinary: "/nonexistent"}); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			if n, err := containerdtest.RemoveLeftovers(ctx, rt); n > 0 || err != nil {
				fmt.Fprintf(os.Stderr, "removed %d leftover test sandboxes (err: %v)\n", n, err)
			}
			cancel()
			rt.Close()
		}
	}
	code := m.Run()
	dockertest.RemoveAgent()
	removeProbe()
	os.Exit(code)
}

// agentArgs are the agent's arguments as the server passes them.
var agentArgs = []string{"--uid", "1000", "--gid", "1000"}

func spec(t testing.TB, runtime, tenant, session, owner string) sandbox.Spec {
	t.Helper()
	s, err := sandbox.NewSpec(tenant, session,
		sandbox.WithImage(containerdtest.Image),
		sandbox.WithRuntime(runtime),
		sandbox.WithMemory(512*sandbox.MiB),
		sandbox.WithWorkspaceSize(64*sandbox.MiB),
		sandbox.WithTmpSize(32*sandbox.MiB),
		sandbox.WithPidsLimit(128),
		sandbox.WithLabels(map[string]string{containerdtest.LabelTest: "1"}),
		sandbox.WithAgentArgs(agentArgs...),
	)
	if err != nil {
		t.Fatal(err)
	}
	s.Owner = owner
	return s
}

// dial waits until the sandbox's agent answers its hello.
func dial(t testing.TB, sb sandbox.Sandbox, within time.Duration) *agentapi.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last error
	for {
		c, err := agentapi.Dial(ctx, sb.Agent.Address)
		if err == nil {
			return c
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("the agent of %s (%s) did not answer within %s: %v", sb.ID, sb.Agent, within, last)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// exec runs a bash command as the sandbox's commands run (through the
// agent, as the sandbox user) and returns its stdout.
func exec(t testing.TB, sb sandbox.Sandbox, command string) string {
	t.Helper()
	c := dial(t, sb, 30*time.Second)
	defer c.Close()
	lim := executor.DefaultLimits()
	req := executor.Request{Session: sb.Session, Command: command, Timeout: 20 * time.Second}
	s, err := lim.Resolve(context.Background(), req, sandbox.WorkspacePath,
		[]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + sandbox.WorkspacePath, "LANG=C.UTF-8"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background(), s)
	if err != nil {
		t.Fatalf("run %q: %v", command, err)
	}
	if res.ExitCode != 0 || res.Signal != "" {
		t.Logf("run %q: exit %d %s, stderr %q", command, res.ExitCode, res.Signal, res.Stderr)
	}
	return res.Stdout
}

var runtimes = []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc}

// variants are the runtimes as configured: runsc also under the runc shim
// with the checkpoint wrapper (Config.Checkpoint), which must harden a
// sandbox as gVisor's shim does.
var variants = []struct {
	name, runtime string
	checkpoint    bool
}{
	{sandbox.RuntimeRunc, sandbox.RuntimeRunc, false},
	{sandbox.RuntimeRunsc, sandbox.RuntimeRunsc, false},
	{"runsc-checkpoint", sandbox.RuntimeRunsc, true},
}

// TestConformance runs the runtime conformance suite on containerd, with
// runc and with gVisor.
func TestConformance(t *testing.T) {
	addr := containerdtest.Address(t)
	for _, v := range variants {
		runtime := v.runtime
		t.Run(v.name, func(t *testing.T) {
			cfg := containerdtest.Config(t, addr)
			cfg.Checkpoint = v.checkpoint
			containerdtest.New(t, cfg, runtime) // gate: runsc available
			sandboxtest.Run(t, sandboxtest.Harness{
				New: func(t *testing.T) sandbox.Runtime { return containerdtest.New(t, cfg, runtime) },
				Spec: func(t *testing.T, tenant, session, owner string) sandbox.Spec {
					return spec(t, runtime, tenant, session, owner)
				},
				Tenant: dockertest.Tenant("ctrd-conf-" + v.name),
				Foreign: func(t *testing.T, tenant, session string) func() bool {
					return containerdtest.Foreign(t, addr, tenant, session)
				},
				Exec:      func(t *testing.T, sb sandbox.Sandbox, cmd string) string { return exec(t, sb, cmd) },
				Gvisor:    runtime == sandbox.RuntimeRunsc,
				RealAgent: true,
			})
		})
	}
}

// TestHardening checks from inside what translate_test checks in the spec:
// the agent's own privileges, a command's, the file system, the network,
// the limits.
func TestHardening(t *testing.T) {
	addr := containerdtest.Address(t)
	for _, v := range variants {
		runtime := v.runtime
		t.Run(v.name, func(t *testing.T) {
			cfg := containerdtest.Config(t, addr)
			cfg.Checkpoint = v.checkpoint
			rt := containerdtest.New(t, cfg, runtime)
			owner := dockertest.Owner(t)
			s := spec(t, runtime, dockertest.Tenant("ctrd-hard"), "h-"+v.name, owner)
			ctx := context.Background()
			sb, err := rt.Create(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rt.Remove(context.Background(), sb.ID) })
			gvisor := runtime == sandbox.RuntimeRunsc
			// The agent (PID 1, root) keeps SETUID, SETGID and KILL: bits 5-7.
			checks := []struct{ name, cmd, want string }{
				{"agent capabilities", "grep ^CapEff /proc/1/status | tr -d '\\t '", "CapEff:00000000000000e0"},
				// Under gVisor SYS_PTRACE and DAC_READ_SEARCH too, permitted
				// only (the egress proxy raises them for its lookups).
				{"agent permitted capabilities", "grep ^CapPrm /proc/1/status | tr -d '\\t '", "CapPrm:" + agentPermitted(runtime)},
				{"agent bounding set", "grep ^CapBnd /proc/1/status | tr -d '\\t '", "CapBnd:0000000000000000"},
				{"agent seccomp", "grep ^Seccomp: /proc/1/status | tr -d '\\t '", "Seccomp:2"},
				{"command capabilities", "grep ^CapEff /proc/self/status | tr -d '\\t '", "CapEff:0000000000000000"},
				{"command bounding set", "grep ^CapBnd /proc/self/status | tr -d '\\t '", "CapBnd:0000000000000000"},
				{"no message queues", "touch /dev/mqueue/q 2>/dev/null && echo created || echo refused", "refused"},
				{"command user", "id -u; id -g", "1000\n1000"},
				{"read-only root", "touch /rootfs-write 2>/dev/null && echo writable || echo read-only", "read-only"},
				{"read-only agent", "test -w /.shellbox/agent && echo writable || echo read-only", "read-only"},
				{"host dir not writable by commands", "touch /run/shellbox/x 2>/dev/null && echo writable || echo read-only", "read-only"},
				{"workspace owner", "stat -c %u:%g /workspace", "1000:1000"},
				// At most its size, most of it: an ext4 image of the size
				// (whose journal and inode tables take some) or a tmpfs.
				{"workspace size", fmt.Sprintf("n=$(df -B1 --output=size /workspace | tail -n 1); [ $n -le %d ] && [ $n -gt %d ] && echo bounded || echo $n", s.WorkspaceBytes, s.WorkspaceBytes/2), "bounded"},
				{"tmp size", "df -B1 --output=size /tmp | tail -n 1 | tr -d ' '", fmt.Sprint(s.TmpBytes)},
				{"loopback only", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '", "lo"},
				// Up: a closed port refuses; a down lo would be unreachable.
				{"loopback up", "(echo > /dev/tcp/127.0.0.1/9) 2>&1 | grep -o 'Connection refused' | head -n 1", "Connection refused"},
				{"hostname", "cat /proc/sys/kernel/hostname", "sandbox"},
				{"agent's environment closed to commands", "cat /proc/1/environ >/dev/null 2>&1 && echo readable || echo closed", "closed"},
				{"shm", "stat -f -c %T /dev/shm", "tmpfs"},
			}
			if gvisor {
				checks = append(checks, struct{ name, cmd, want string }{"nproc", "ulimit -u", fmt.Sprint(s.PidsLimit)})
			} else {
				checks = append(checks,
					struct{ name, cmd, want string }{"no new privileges", "grep ^NoNewPrivs /proc/1/status | tr -d '\\t '", "NoNewPrivs:1"},
					struct{ name, cmd, want string }{"pids limit", "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max", fmt.Sprint(agentapi.PidsCgroupLimit(s.PidsLimit))},
					struct{ name, cmd, want string }{"memory limit", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max", fmt.Sprint(s.MemoryBytes)},
					struct{ name, cmd, want string }{"cgroupfs read-only", "touch /sys/fs/cgroup/x 2>/dev/null && echo writable || echo read-only", "read-only"},
				)
			}
			for _, c := range checks {
				if got := strings.TrimSpace(exec(t, sb, c.cmd)); got != c.want {
					t.Errorf("%s: %q gave %q, want %q", c.name, c.cmd, got, c.want)
				}
			}
			if gvisor {
				// Guest syscalls never reach the host kernel; the sentry
				// that serves them is itself confined.
				pid := containerdtest.TaskPid(t, addr, sb.ID)
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
				if err != nil {
					t.Fatal(err)
				}
				for _, re := range []string{`NoNewPrivs:\s+1`, `Seccomp:\s+2`} {
					if !regexp.MustCompile(re).Match(b) {
						t.Errorf("gVisor sentry (host pid %d): want %s", pid, re)
					}
				}
			}
		})
	}
}

// TestMounts: Spec.Mounts are bound, read-only where asked, and reported.
func TestMounts(t *testing.T) {
	addr := containerdtest.Address(t)
	rt := containerdtest.New(t, containerdtest.Config(t, addr), sandbox.RuntimeRunc)
	ro, rw := dockertest.MountDir(t, 1000, 1000), dockertest.MountDir(t, 1000, 1000)
	if err := os.WriteFile(ro+"/hello", []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := spec(t, sandbox.RuntimeRunc, dockertest.Tenant("ctrd-mnt"), "m", dockertest.Owner(t))
	s.Mounts = []sandbox.Mount{{Source: ro, Target: "/data", ReadOnly: true}, {Source: rw, Target: "/out"}}
	ctx := context.Background()
	sb, err := rt.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Remove(context.Background(), sb.ID) })
	if !slices.Equal(sb.Mounts, s.Mounts) {
		t.Errorf("reported mounts %+v, want %+v", sb.Mounts, s.Mounts)
	}
	if got := strings.TrimSpace(exec(t, sb, "cat /data/hello; touch /data/x 2>/dev/null && echo rw || echo ro; echo hi > /out/y && echo wrote")); got != "from the host\nro\nwrote" {
		t.Errorf("inside: %q", got)
	}
	if b, err := os.ReadFile(rw + "/y"); err != nil || string(b) != "hi\n" {
		t.Errorf("host side of /out/y: %q, %v", b, err)
	}
}

// TestRemoveCleansUp: Remove leaves no container, snapshot or host dir, and
// a second Remove is fine.
func TestRemoveCleansUp(t *testing.T) {
	addr := containerdtest.Address(t)
	cfg := containerdtest.Config(t, addr)
	rt := containerdtest.New(t, cfg, sandbox.RuntimeRunc)
	tenant := dockertest.Tenant("ctrd-rm")
	ctx := context.Background()
	sb, err := rt.Create(ctx, spec(t, sandbox.RuntimeRunc, tenant, "r", dockertest.Owner(t)))
	if err != nil {
		t.Fatal(err)
	}
	dir := rt.Dirs().Path(tenant, "r")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("host dir: %v", err)
	}
	if err := rt.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host dir after Remove: %v", err)
	}
	c, cctx := containerdtest.Client(t, addr)
	if _, err := c.SnapshotService("").Stat(cctx, sb.ID); err == nil {
		t.Errorf("snapshot %s left", sb.ID)
	}
	if err := rt.Remove(ctx, sb.ID); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// TestErrors: a daemon that is not there, an image that is not imported, a
// runtime that is not installed: clear errors, nothing left behind.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("no daemon", func(t *testing.T) {
		rt, err := containerd.New(containerd.Config{Address: "/nonexistent/containerd.sock", StateDir: t.TempDir(), AgentBinary: "/bin/true"})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		err = rt.Ping(ctx)
		if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "does not answer: is it running?") {
			t.Errorf("Ping: %v", err)
		}
		if _, err := rt.Get(ctx, "t", "s"); !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("Get: %v", err)
		}
	})
	addr := containerdtest.Address(t)
	t.Run("no image", func(t *testing.T) {
		rt := containerdtest.New(t, containerdtest.Config(t, addr), sandbox.RuntimeRunc)
		s := spec(t, sandbox.RuntimeRunc, dockertest.Tenant("ctrd-err"), "noimg", dockertest.Owner(t))
		s.Image = "shellbox-test-absent:latest"
		_, err := rt.Create(ctx, s)
		if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "shellbox image build --containerd") {
			t.Errorf("Create: %v", err)
		}
		if _, err := os.Stat(rt.Dirs().Path(s.Tenant, s.Session)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host dir left: %v", err)
		}
	})
	t.Run("no runtime", func(t *testing.T) {
		cfg := containerdtest.Config(t, addr)
		cfg.RuntimeNames = map[string]string{sandbox.RuntimeRunsc: "io.containerd.shellbox-absent.v1"}
		cfg.RuntimeConfigs = nil
		rt := containerdtest.New(t, cfg, sandbox.RuntimeRunc)
		if have, err := rt.Runtimes(ctx); err != nil || slices.Contains(have, sandbox.RuntimeRunsc) {
			t.Errorf("Runtimes: %v, %v: want no runsc", have, err)
		}
		s := spec(t, sandbox.RuntimeRunsc, dockertest.Tenant("ctrd-err"), "nort", dockertest.Owner(t))
		_, err := rt.Create(ctx, s)
		if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "io.containerd.shellbox-absent.v1") {
			t.Errorf("Create: %v", err)
		}
		if _, err := rt.Get(ctx, s.Tenant, s.Session); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("a failed Create left a container: %v", err)
		}
		if _, err := os.Stat(rt.Dirs().Path(s.Tenant, s.Session)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host dir left: %v", err)
		}
	})
}

// TestSweep: a host dir without a container goes, one with a container
// stays.
func TestSweep(t *testing.T) {
	addr := containerdtest.Address(t)
	rt := containerdtest.New(t, containerdtest.Config(t, addr), sandbox.RuntimeRunc)
	tenant := dockertest.Tenant("ctrd-sweep")
	ctx := context.Background()
	sb, err := rt.Create(ctx, spec(t, sandbox.RuntimeRunc, tenant, "kept", dockertest.Owner(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Remove(context.Background(), sb.ID) })
	orphan, err := rt.Dirs().Prepare(tenant, "orphan", 0)
	if err != nil {
		t.Fatal(err)
	}
	removed, err := rt.Sweep(ctx, "", func(string, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{orphan}) {
		t.Errorf("swept %q, want %q", removed, orphan)
	}
	if !rt.Dirs().Exists(tenant, "kept") {
		t.Error("the host dir of a live container was swept")
	}
}

// TestCreateLatency logs create → agent hello, a few runs of each runtime
// (the numbers of the report; benchmarks measure them properly).
func TestCreateLatency(t *testing.T) {
	addr := containerdtest.Address(t)
	for _, runtime := range runtimes {
		t.Run(runtime, func(t *testing.T) {
			rt := containerdtest.New(t, containerdtest.Config(t, addr), runtime)
			owner := dockertest.Owner(t)
			var took []time.Duration
			for i := range 5 {
				ctx := context.Background()
				start := time.Now()
				sb, err := rt.Create(ctx, spec(t, runtime, dockertest.Tenant("ctrd-lat"), fmt.Sprintf("l%d-%s", i, runtime), owner))
				if err != nil {
					t.Fatal(err)
				}
				created := time.Since(start)
				c := dial(t, sb, 30*time.Second)
				hello := time.Since(start)
				c.Close()
				took = append(took, hello)
				t.Logf("%s: Create %v, agent hello %v", runtime, created.Round(time.Millisecond), hello.Round(time.Millisecond))
				start = time.Now()
				if err := rt.Remove(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: Remove %v", runtime, time.Since(start).Round(time.Millisecond))
			}
			slices.Sort(took)
			t.Logf("%s: create → hello median %v (min %v, max %v)", runtime, took[len(took)/2].Round(time.Millisecond),
				took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
		})
	}
}

// TestOOMKilled: under gVisor a command over the memory limit makes the
// host's OOM killer take the whole sandbox (the sentry); Get then reports
// it exited and OOMKilled.
func TestOOMKilled(t *testing.T) {
	addr := containerdtest.Address(t)
	rt := containerdtest.New(t, containerdtest.Config(t, addr), sandbox.RuntimeRunsc)
	s := spec(t, sandbox.RuntimeRunsc, dockertest.Tenant("ctrd-oom"), "o", dockertest.Owner(t))
	s.MemoryBytes, s.WorkspaceBytes, s.TmpBytes = 96*sandbox.MiB, 8*sandbox.MiB, 8*sandbox.MiB
	ctx := context.Background()
	sb, err := rt.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Remove(context.Background(), sb.ID) })
	c := dial(t, sb, 30*time.Second)
	lim := executor.DefaultLimits()
	req, err := lim.Resolve(ctx, executor.Request{Session: sb.Session, Command: "head -c 400m /dev/zero | tail > /dev/null", Timeout: 20 * time.Second},
		sandbox.WorkspacePath, []string{"PATH=/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Run(ctx, req) // the agent dies with the sandbox
	c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := rt.Get(ctx, sb.Tenant, sb.Session)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == sandbox.StateExited {
			if !got.OOMKilled {
				t.Errorf("exited, OOMKilled false: %+v", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %s after the command outgrew the memory limit", got.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agentPermitted is the real agent's CapPrm once it started: SETUID, SETGID
// and KILL (bits 5-7), and under gVisor SYS_PTRACE (19) and DAC_READ_SEARCH
// (2) for the egress proxy's lookups.
func agentPermitted(runtime string) string {
	if runtime == sandbox.RuntimeRunsc {
		return "00000000000800e4"
	}
	return "00000000000000e0"
}
