package docker_test

// These tests run against the real Docker engine (skipped with the reason
// when none is reachable; failed instead when CI=true). Every container they
// create is labelled org.shellbox.test=1 and with a per-test owner, and is
// removed when its test ends; TestMain removes what crashed runs left.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// TestHardeningApplied inspects a sandbox's container: what the engine was
// told.
func TestHardeningApplied(t *testing.T) {
	runtimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt)
		sb := e.ensure(e.spec("hardening"))
		info := e.inspect(sb.ID)
		hc, cfg := info.HostConfig, info.Config

		excerpt, _ := json.MarshalIndent(map[string]any{
			"Name": info.Name, "Config.User": cfg.User, "Config.Entrypoint": cfg.Entrypoint,
			"Config.WorkingDir": cfg.WorkingDir, "Config.Labels": cfg.Labels,
			"HostConfig.CapDrop": hc.CapDrop, "HostConfig.CapAdd": hc.CapAdd,
			"HostConfig.SecurityOpt": hc.SecurityOpt, "HostConfig.ReadonlyRootfs": hc.ReadonlyRootfs,
			"HostConfig.Tmpfs": hc.Tmpfs, "HostConfig.NetworkMode": hc.NetworkMode,
			"HostConfig.Runtime": hc.Runtime, "HostConfig.Memory": hc.Memory,
			"HostConfig.MemorySwap": hc.MemorySwap, "HostConfig.CpuQuota": hc.CPUQuota, "HostConfig.CpuPeriod": hc.CPUPeriod,
			"HostConfig.PidsLimit": hc.PidsLimit, "HostConfig.LogConfig": hc.LogConfig,
			"HostConfig.Init": hc.Init, "HostConfig.Mounts": hc.Mounts,
			"HostConfig.OomScoreAdj": hc.OomScoreAdj, "HostConfig.CgroupnsMode": hc.CgroupnsMode,
			"HostConfig.IpcMode": hc.IpcMode, "HostConfig.Privileged": hc.Privileged, "HostConfig.Ulimits": hc.Ulimits,
		}, "", "  ")
		t.Logf("inspect excerpt:\n%s", excerpt)

		if got := strings.Join(hc.CapDrop, ","); got != "ALL" && got != "CAP_ALL" {
			t.Errorf("CapDrop = %v, want ALL", hc.CapDrop)
		}
		caps := slices.Clone(hc.CapAdd)
		slices.Sort(caps)
		want := []string{"CAP_KILL", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID"}
		if rt == sandbox.RuntimeRunsc {
			// The egress proxy's lookups (sandbox.GVisorLookupCaps).
			want = []string{"CAP_DAC_READ_SEARCH", "CAP_KILL", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_PTRACE"}
		}
		if !slices.Equal(caps, want) {
			t.Errorf("CapAdd = %v, want %v", hc.CapAdd, want)
		}
		if !slices.Equal(hc.SecurityOpt, []string{"no-new-privileges"}) {
			t.Errorf("SecurityOpt = %v, want only no-new-privileges (default seccomp kept)", hc.SecurityOpt)
		}
		checks := []struct {
			name      string
			got, want any
		}{
			{"ReadonlyRootfs", hc.ReadonlyRootfs, true},
			{"Privileged", hc.Privileged, false},
			{"NetworkMode", string(hc.NetworkMode), "none"},
			{"Runtime", hc.Runtime, rt},
			{"Memory", hc.Memory, 256 * sandbox.MiB},
			{"MemorySwap", hc.MemorySwap, 256 * sandbox.MiB},
			{"CPUQuota", hc.CPUQuota, int64(10000)}, // 1 core over sandbox.CPUPeriod
			{"CPUPeriod", hc.CPUPeriod, int64(10000)},
			{"PidsLimit", *hc.PidsLimit, map[string]int64{"runc": agentapi.PidsCgroupLimit(128), "runsc": 16*128 + 512}[rt]},
			{"nproc", nproc(hc.Ulimits), map[string]int64{"runc": 0, "runsc": 128}[rt]},
			{"LogConfig.Type", hc.LogConfig.Type, "none"},
			{"Init", hc.Init != nil && *hc.Init, false},
			{"OomScoreAdj", hc.OomScoreAdj, 0},
			{"User", cfg.User, "0:0"},
			{"WorkingDir", cfg.WorkingDir, "/workspace"},
			{"Entrypoint", strings.Join(cfg.Entrypoint, " "), sandbox.AgentPath},
			{"Tmpfs /tmp", hc.Tmpfs["/tmp"], fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", 16*sandbox.MiB)},
			// The session's workspace is on the host, bound in.
			{"Tmpfs /workspace", hc.Tmpfs["/workspace"], ""},
			{"label tenant", cfg.Labels[sandbox.LabelTenant], tenant},
			{"label session", cfg.Labels[sandbox.LabelSession], "hardening"},
			{"label owner", cfg.Labels[sandbox.LabelOwner], e.owner},
			{"label managed", cfg.Labels[sandbox.LabelManaged], "true"},
			{"label test", cfg.Labels[dockertest.LabelTest], "1"},
			{"Name", info.Name, "/" + docker.ContainerName(tenant, "hardening")},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
			}
		}
		for _, m := range hc.Mounts {
			if m.Target == sandbox.AgentPath && !m.ReadOnly {
				t.Errorf("agent mount is writable")
			}
		}
		ws := filepath.Join(e.stateDir, "workspaces", tenant, "hardening")
		if len(info.Mounts) != 3 || !slices.ContainsFunc(info.Mounts, func(m container.MountPoint) bool {
			return m.Destination == sandbox.WorkspacePath && m.Source == ws && m.RW
		}) {
			t.Errorf("mounts: %+v, want the agent, the host dir and the workspace %s", info.Mounts, ws)
		}
		var st unix.Statfs_t
		// By the workspace medium: a tmpfs of the size, or (disk, the
		// default where there are loop devices) an ext4 in an image of it.
		err := unix.Statfs(ws, &st)
		switch {
		case err == nil && st.Type == unix.TMPFS_MAGIC:
			if int64(st.Blocks)*st.Bsize != 32*sandbox.MiB {
				t.Errorf("workspace %s: a tmpfs of %d bytes, want %d", ws, int64(st.Blocks)*st.Bsize, 32*sandbox.MiB)
			}
		case err == nil && st.Type == unix.EXT4_SUPER_MAGIC:
			img := filepath.Join(e.stateDir, "workspace-images", tenant, "hardening.ext4")
			if fi, err := os.Stat(img); err != nil || fi.Size() != 32*sandbox.MiB {
				t.Errorf("workspace %s: image %s: %v %v; want %d bytes", ws, img, fi, err, 32*sandbox.MiB)
			}
		default:
			t.Errorf("workspace %s: type %#x, %v; want a tmpfs or an ext4", ws, st.Type, err)
		}
	})
}

// TestHardeningObserved looks from inside: what a command really gets.
func TestHardeningObserved(t *testing.T) {
	runtimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt)
		sb := e.ensure(e.spec("observed"))

		r := e.run(sb, 1000, "cat /proc/self/status", 10*time.Second)
		st := r.Stdout
		// The container's bounding set (SETUID, SETGID, KILL, SETPCAP; under
		// gVisor SYS_PTRACE and DAC_READ_SEARCH too): the stand-in agent
		// keeps it; the real one empties it at start (agent/capabilities.go;
		// executor/sandboxed's hostile suite checks a command's
		// CapBnd is 0).
		bnd := "00000000000001e0"
		if rt == sandbox.RuntimeRunsc {
			bnd = "00000000000801e4"
		}
		for field, want := range map[string]string{
			"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapInh": "0000000000000000",
			"CapBnd": bnd, "Uid": "1000\t1000\t1000\t1000", "Gid": "1000\t1000\t1000\t1000",
		} {
			if got := statusField(st, field); got != want {
				t.Errorf("command's %s = %q, want %q", field, got, want)
			}
		}
		// gVisor's /proc/self/status has no NoNewPrivs line; prctl answers
		// on both.
		probe := strings.TrimSpace(e.run(sb, 1000, sandbox.AgentPath+" probe", 10*time.Second).Stdout)
		t.Logf("command's prctl: %s", probe)
		if !strings.Contains(probe, "nnp=1") || !strings.Contains(probe, "uid=1000") {
			t.Errorf("probe = %q, want nnp=1 uid=1000", probe)
		}
		if rt == sandbox.RuntimeRunc {
			if got := statusField(st, "NoNewPrivs"); got != "1" {
				t.Errorf("NoNewPrivs = %q, want 1", got)
			}
		}
		t.Run("seccomp", func(t *testing.T) {
			if rt == sandbox.RuntimeRunsc {
				args, _, _ := dockertest.RuntimeArgs(context.Background(), e.cli, "runsc")
				dockertest.Require(t, ociSeccomp(args), fmt.Sprintf(
					"runsc runtimeArgs %q lack --oci-seccomp: gVisor does not apply the default seccomp profile inside the sandbox (Seccomp: 0)", args))
			}
			if got := statusField(st, "Seccomp"); got != "2" {
				t.Errorf("Seccomp = %q, want 2 (filter)", got)
			}
		})

		// The agent (PID 1) gets SETUID, SETGID, KILL and SETPCAP, nothing
		// else (the real agent drops SETPCAP once it used it); under gVisor
		// also SYS_PTRACE and DAC_READ_SEARCH (the real agent keeps them
		// permitted only: executor/sandboxed's egress test uses them).
		want := "00000000000001e0"
		if rt == sandbox.RuntimeRunsc {
			want = "00000000000801e4"
		}
		if got := statusField(e.run(sb, 1000, "cat /proc/1/status", 10*time.Second).Stdout, "CapEff"); got != want {
			t.Errorf("agent's CapEff = %q, want %s", got, want)
		}

		// Root filesystem: read-only even for uid 0.
		r = e.run(sb, 0, "touch /usr/bin/x || touch /x", 10*time.Second)
		if r.ExitCode == 0 || !strings.Contains(r.Stderr, "Read-only file system") {
			t.Errorf("writing the root fs as uid 0: %+v, want Read-only file system", r)
		}

		// /workspace and /tmp: writable, and full at their size.
		for _, c := range []struct {
			dir  string
			size int64
		}{{"/workspace", 32 * sandbox.MiB}, {"/tmp", 16 * sandbox.MiB}} {
			r = e.run(sb, 1000, fmt.Sprintf("echo hi > %s/f && cat %s/f", c.dir, c.dir), 10*time.Second)
			if r.Stdout != "hi\n" {
				t.Errorf("%s not writable: %+v", c.dir, r)
			}
			r = e.run(sb, 1000, fmt.Sprintf("head -c %d /dev/zero > %s/big; echo rc=$?; wc -c < %s/big", c.size+4*sandbox.MiB, c.dir, c.dir), 30*time.Second)
			if !strings.Contains(r.Stderr, "No space left on device") || !strings.HasPrefix(r.Stdout, "rc=1\n") {
				t.Errorf("filling %s past %d bytes: %+v, want ENOSPC", c.dir, c.size, r)
			}
			if n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(r.Stdout, "rc=1\n")), 10, 64); n > c.size {
				t.Errorf("%s holds %d bytes, over its %d", c.dir, n, c.size)
			}
			e.run(sb, 1000, "rm -f "+c.dir+"/big", 10*time.Second)
		}

		// The host dir: readable, not writable by commands.
		r = e.run(sb, 1000, "test -r /run/shellbox/spill && test -x /run/shellbox/spill && echo readable; echo x > /run/shellbox/spill/f; echo x > /run/shellbox/f", 10*time.Second)
		if r.Stdout != "readable\n" || strings.Count(r.Stderr, "Permission denied") != 2 {
			t.Errorf("host dir as uid 1000: %+v, want readable and 2× Permission denied", r)
		}

		// Network: loopback only, no egress, not even to the host.
		r = e.run(sb, 1000, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", 10*time.Second)
		if strings.TrimSpace(r.Stdout) != "lo" {
			t.Errorf("interfaces: %q, want lo only", r.Stdout)
		}
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				accepted <- struct{}{}
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		targets := []string{"1.1.1.1/53", fmt.Sprintf("127.0.0.1/%d", port)}
		if ip := hostBridgeIP(); ip != "" {
			targets = append(targets, fmt.Sprintf("%s/%d", ip, port))
		}
		for _, target := range targets {
			r = e.run(sb, 1000, "exec 3<>/dev/tcp/"+target+" && echo connected", 10*time.Second)
			if r.ExitCode == 0 || strings.Contains(r.Stdout, "connected") {
				t.Errorf("egress to %s: %+v, want a failure", target, r)
			}
		}
		select {
		case <-accepted:
			t.Errorf("the host's listener accepted a connection from the sandbox")
		case <-time.After(100 * time.Millisecond):
		}
	})
}

// hostBridgeIP is the host's address on docker0: what a container with a
// network reaches the host by.
func hostBridgeIP() string {
	ifc, err := net.InterfaceByName("docker0")
	if err != nil {
		return ""
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return ""
}

// forkBomb runs a bomb until one of its forks fails, then exits.
const forkBomb = `b(){ b | b & }
b 2>/tmp/bomb.err
while [[ ! -s /tmp/bomb.err ]] && (( SECONDS < 15 )); do :; done
n=0
while (( n < 5 )) && IFS= read -r l; do echo "$l" >&2; n=$((n+1)); done </tmp/bomb.err`

// TestForkBomb: the pids limit holds a fork bomb, and the sandbox is usable
// once the bomb is killed.
func TestForkBomb(t *testing.T) {
	runtimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt)
		sb := e.ensure(e.spec("forkbomb", sandbox.WithPidsLimit(64)))
		start := time.Now()
		// The bomb's stderr goes to a file; the leader, on builtins only (its
		// own forks fail once the limit holds), waits until a failure is
		// written there, copies the first lines to its stderr and exits, and
		// its group is killed. No fixed duration: a loaded machine under
		// gVisor forks slowly, and a 3 s window once ended before the bomb
		// reached the limit. 15 s bounds the wait if the limit never holds.
		r := e.run(sb, 1000, forkBomb, 30*time.Second)
		t.Logf("bomb: timed out %v, signal %q, after %v; stderr %d bytes", r.TimedOut, r.Signal, time.Since(start).Round(time.Millisecond), len(r.Stderr))
		if !strings.Contains(r.Stderr, "Resource temporarily unavailable") {
			t.Errorf("no fork failure in the bomb's stderr: the limit was never hit? %.300q", r.Stderr)
		}
		info := e.inspect(sb.ID)
		if !info.State.Running {
			t.Fatalf("sandbox died under the fork bomb: %+v", info.State)
		}
		if r := e.run(sb, 1000, "echo alive", 10*time.Second); r.Stdout != "alive\n" {
			t.Errorf("after the bomb: %+v", r)
		}
		cg := "/sys/fs/cgroup/pids/docker/" + sb.ID
		switch rt {
		case sandbox.RuntimeRunc:
			// The commands' 64 plus the agent's threads.
			if got, want := readFile(t, cg+"/pids.max"), strconv.FormatInt(agentapi.PidsCgroupLimit(64), 10); got != want {
				t.Errorf("pids.max = %q, want %s", got, want)
			}
			if ev := readFile(t, cg+"/pids.events"); ev == "max 0" {
				t.Errorf("pids.events = %q: the limit was never hit", ev)
			}
		case sandbox.RuntimeRunsc:
			// RLIMIT_NPROC held it (see translate.go); the host cgroup is a
			// backstop that must not be what stopped it.
			t.Logf("host pids.max %s, pids.events %s", readFile(t, cg+"/pids.max"), readFile(t, cg+"/pids.events"))
			if n := nproc(info.HostConfig.Ulimits); n != 64 {
				t.Errorf("nproc ulimit = %d, want 64", n)
			}
		}
	})
}

// TestMemoryBomb: a command allocating past the memory limit is OOM-killed;
// on runc the agent (PID 1) and the sandbox survive. gVisor 2022-12 has no
// OOM killer of its own: the host's kills the whole sandbox, which stays
// contained in its cgroup, and the Manager replaces it.
func TestMemoryBomb(t *testing.T) {
	runtimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt)
		spec := e.spec("membomb", sandbox.WithMemory(128*sandbox.MiB),
			sandbox.WithWorkspaceSize(16*sandbox.MiB), sandbox.WithTmpSize(16*sandbox.MiB))
		sb := e.ensure(spec)
		if rt == sandbox.RuntimeRunc {
			if got := readFile(t, "/sys/fs/cgroup/memory/docker/"+sb.ID+"/memory.limit_in_bytes"); got != strconv.FormatInt(128*sandbox.MiB, 10) {
				t.Errorf("memory.limit_in_bytes = %s", got)
			}
		}
		r, err := e.tryRun(sb, 1000, `x=$(head -c 400000000 /dev/zero | tr '\0' a); echo ${#x}`, 60*time.Second)
		t.Logf("memory bomb: %+v, err %v", r, err)
		info := e.inspect(sb.ID)
		// The agent's connection breaks before the engine notices the
		// sandbox died; give it a moment.
		for deadline := time.Now().Add(10 * time.Second); err != nil && info.State.Running && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			info = e.inspect(sb.ID)
		}
		if rt == sandbox.RuntimeRunsc && !info.State.Running {
			if !info.State.OOMKilled && info.State.ExitCode != 137 {
				t.Fatalf("the sandbox died, not of OOM: %+v", info.State)
			}
			t.Logf("runsc: the host OOM killer ended the sandbox (exit %d): contained, but the agent must cap commands (RLIMIT_AS) to keep a gVisor sandbox alive",
				info.State.ExitCode)
			if err := e.m.Remove(context.Background(), tenant, "membomb"); err != nil {
				t.Fatal(err)
			}
			sb = e.ensure(spec)
		} else {
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if r.ExitCode == 0 && r.Signal == "" {
				t.Errorf("memory bomb succeeded: %+v", r)
			}
			if !info.State.Running {
				t.Fatalf("sandbox died under the memory bomb: %+v", info.State)
			}
			if rt == sandbox.RuntimeRunc {
				oom := readFile(t, "/sys/fs/cgroup/memory/docker/"+sb.ID+"/memory.oom_control")
				if !strings.Contains(oom, "oom_kill ") || strings.Contains(oom, "oom_kill 0") {
					t.Errorf("memory.oom_control = %q: no OOM kill in the sandbox's cgroup", oom)
				}
			}
		}
		if r := e.run(sb, 1000, "echo alive", 10*time.Second); r.Stdout != "alive\n" {
			t.Errorf("after the bomb: %+v", r)
		}
	})
}

func nproc(us []*container.Ulimit) int64 {
	for _, u := range us {
		if u.Name == "nproc" {
			return u.Hard
		}
	}
	return 0
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestSpillCap: the session's spill directory holds at most SpillBytes, and
// only the agent (uid 0) writes there; the host sees what it wrote.
func TestSpillCap(t *testing.T) {
	dockertest.Require(t, os.Geteuid() == 0, "the spill tmpfs (SpillQuotaTmpfs) needs root")
	runtimes(t, func(t *testing.T, rt string) {
		e := newEnv(t, rt)
		sb := e.ensure(e.spec("spill", sandbox.WithSpillSize(1*sandbox.MiB)))
		r := e.run(sb, 0, "head -c 3000000 /dev/zero > /run/shellbox/spill/out.log; echo rc=$?", 10*time.Second)
		if !strings.Contains(r.Stderr, "No space left on device") || r.Stdout != "rc=1\n" {
			t.Errorf("writing 3 MB into a 1 MiB spill: %+v", r)
		}
		fi, err := os.Stat(filepath.Join(e.hostDir("spill"), "spill", "out.log"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > sandbox.MiB {
			t.Errorf("spill file is %d bytes on the host, over the 1 MiB cap", fi.Size())
		}
		if r := e.run(sb, 1000, "wc -c < /run/shellbox/spill/out.log", 10*time.Second); strings.TrimSpace(r.Stdout) != strconv.FormatInt(fi.Size(), 10) {
			t.Errorf("the command reads %q bytes of the spill file, the host %d", r.Stdout, fi.Size())
		}
		if got := e.inspect(sb.ID).Config.Env; !slices.Contains(got, sandbox.EnvSpillBytes+"=1048576") {
			t.Errorf("agent env %v lacks %s", got, sandbox.EnvSpillBytes)
		}
	})
}

// TestEnsureReuses: the first Ensure creates, later ones reuse the same
// container and mark it used.
func TestEnsureReuses(t *testing.T) {
	e := newEnv(t, sandbox.RuntimeRunc)
	spec := e.spec("reuse")
	first := e.ensure(spec)
	time.Sleep(10 * time.Millisecond)
	second := e.ensure(spec)
	if first.ID != second.ID {
		t.Fatalf("second Ensure made a new container: %s then %s", first.ID, second.ID)
	}
	if !second.LastUsed.After(first.LastUsed) {
		t.Errorf("LastUsed not advanced: %v then %v", first.LastUsed, second.LastUsed)
	}
	if first.State != sandbox.StateRunning || first.Agent != (agentapi.Endpoint{Network: "unix", Address: filepath.Join(e.stateDir, "sessions", tenant, "reuse", "agent.sock")}) {
		t.Errorf("sandbox: %+v", first)
	}
	got, err := e.rt.Get(context.Background(), tenant, "reuse")
	if err != nil || got.ID != first.ID {
		t.Errorf("Get = %+v, %v", got, err)
	}
}

// TestEnsureConcurrent: concurrent first uses of one session create one
// sandbox.
func TestEnsureConcurrent(t *testing.T) {
	e := newEnv(t, sandbox.RuntimeRunc)
	spec := e.spec("concurrent")
	ids := make([]string, 8)
	errs := make([]error, 8)
	parallel(8, func(i int) {
		sb, err := e.m.Ensure(context.Background(), spec)
		ids[i], errs[i] = sb.ID, err
	})
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("Ensure %d: %s, %v; Ensure 0: %s", i, ids[i], errs[i], ids[0])
		}
	}
	list, err := e.rt.List(context.Background(), e.owner)
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %d sandboxes, %v; want 1", len(list), err)
	}
}

// TestEnsureAbandonedByCaller: a caller that gives up does not cancel the
// creation; the next Ensure gets the sandbox it made.
func TestEnsureAbandonedByCaller(t *testing.T) {
	e := newEnv(t, sandbox.RuntimeRunc)
	spec := e.spec("abandoned")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.m.Ensure(ctx, spec); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ensure with a 20 ms deadline: %v", err)
	}
	sb := e.ensure(spec)
	if list, _ := e.rt.List(context.Background(), e.owner); len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("List = %+v, want just %s", list, sb.ID)
	}
}

// TestRemove deletes the container and the host dir; a second Remove finds
// nothing.
func TestRemove(t *testing.T) {
	e := newEnv(t, sandbox.RuntimeRunc)
	sb := e.ensure(e.spec("remove"))
	ctx := context.Background()
	if err := e.m.Remove(ctx, tenant, "remove"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.Get(ctx, tenant, "remove"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after Remove: %v, want ErrNotFound", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, sb.ID); err == nil {
		t.Errorf("container %s still exists", sb.ID)
	}
	if _, err := os.Lstat(e.hostDir("remove")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host dir still there: %v", err)
	}
	if err := e.m.Remove(ctx, tenant, "remove"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("second Remove: %v, want ErrNotFound", err)
	}
	if sb2 := e.ensure(e.spec("remove")); sb2.ID == sb.ID {
		t.Errorf("Ensure after Remove reused %s", sb.ID)
	}
}

// TestReap removes what was idle for the TTL, keeps what was used.
func TestReap(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	e := newEnv(t, sandbox.RuntimeRunc, func(c *sandbox.Config) { c.Now = func() time.Time { return clock() } })
	idle := e.ensure(e.spec("idle"))
	busy := e.ensure(e.spec("busy"))
	now = now.Add(10 * time.Minute)
	if !e.m.Touch(tenant, "busy") {
		t.Fatal("Touch: unknown sandbox")
	}
	reaped, err := e.m.Reap(context.Background(), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(reaped) != 1 || reaped[0].ID != idle.ID {
		t.Fatalf("reaped %+v, want only %s", reaped, idle.ID)
	}
	ctx := context.Background()
	if _, err := e.rt.Get(ctx, tenant, "idle"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("idle sandbox still there: %v", err)
	}
	if _, err := os.Lstat(e.hostDir("idle")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("idle host dir still there: %v", err)
	}
	if got, err := e.rt.Get(ctx, tenant, "busy"); err != nil || got.ID != busy.ID || got.State != sandbox.StateRunning {
		t.Errorf("busy sandbox: %+v, %v", got, err)
	}
}

// TestAdopt: a restarted server keeps its running sandbox, removes its dead
// one and the host dir without a sandbox, and leaves another owner's alone.
func TestAdopt(t *testing.T) {
	e := newEnv(t, sandbox.RuntimeRunc)
	ctx := context.Background()
	live := e.ensure(e.spec("live"))
	dead := e.ensure(e.spec("dead"))
	if err := e.cli.ContainerKill(ctx, dead.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	orphanDir := e.hostDir("orphan")
	if err := os.MkdirAll(filepath.Join(orphanDir, "spill"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Another server on the same engine, with its own state dir.
	other := newEnv(t, sandbox.RuntimeRunc)
	foreign := other.ensure(other.spec("foreign"))

	// The restarted server: same owner and state dir, a new Manager.
	m2, err := sandbox.NewManager(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, e, dead.ID, "exited")
	rep, err := m2.Adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Kept) != 1 || rep.Kept[0].ID != live.ID {
		t.Errorf("kept %+v, want %s", rep.Kept, live.ID)
	}
	if len(rep.Removed) != 1 || rep.Removed[0].ID != dead.ID {
		t.Errorf("removed %+v, want %s", rep.Removed, dead.ID)
	}
	// The dead sandbox's host directory went with it; the orphan was swept.
	if !slices.Equal(rep.Swept, []string{orphanDir}) {
		t.Errorf("swept %v, want %s", rep.Swept, orphanDir)
	}
	for _, d := range []string{orphanDir, e.hostDir("dead")} {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there", d)
		}
	}
	if _, err := e.cli.ContainerInspect(ctx, dead.ID); err == nil {
		t.Errorf("dead container still there")
	}
	if info, err := e.cli.ContainerInspect(ctx, foreign.ID); err != nil || !info.State.Running {
		t.Errorf("another owner's sandbox was touched: %v", err)
	}
	// The adopted sandbox is reused, and its agent still answers.
	sb, err := m2.Ensure(ctx, e.spec("live"))
	if err != nil || sb.ID != live.ID {
		t.Fatalf("Ensure after Adopt: %s, %v; want %s", sb.ID, err, live.ID)
	}
	if r := e.run(sb, 1000, "echo adopted", 10*time.Second); r.Stdout != "adopted\n" {
		t.Errorf("adopted agent: %+v", r)
	}
	// The other server's sandbox cannot be taken over by name.
	if _, err := e.m.Ensure(ctx, e.spec("foreign")); err == nil || !errors.Is(err, sandbox.ErrConflict) {
		// Different names per owner would make this moot; same-name sessions
		// of two servers are a conflict, reported as such.
		t.Errorf("Ensure of another owner's session: %v, want ErrConflict", err)
	}
}

func waitState(t *testing.T, e *env, id, state string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if info := e.inspect(id); string(info.State.Status) == state {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("container %s never reached %s", id, state)
}

// TestReadyFailure: a sandbox whose agent never becomes ready is removed,
// host dir and all, and Ensure says why.
func TestReadyFailure(t *testing.T) {
	e := newEnv(t, sandbox.RuntimeRunc, func(c *sandbox.Config) {
		c.Ready = func(context.Context, sandbox.Sandbox) error { return errors.New("agent says no") }
	})
	_, err := e.m.Ensure(context.Background(), e.spec("unready"))
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "agent says no") {
		t.Fatalf("Ensure: %v, want ErrUnavailable with the cause", err)
	}
	if list, _ := e.rt.List(context.Background(), e.owner); len(list) != 0 {
		t.Errorf("left behind: %+v", list)
	}
	if _, err := os.Lstat(e.hostDir("unready")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host dir left behind: %v", err)
	}
}

// TestCreateErrors: the Runtime's failures come in the package's classes.
func TestCreateErrors(t *testing.T) {
	e := newEnv(t, sandbox.RuntimeRunc)
	ctx := context.Background()
	e.ensure(e.spec("dup"))

	spec := e.spec("dup")
	spec.Owner = e.owner
	if _, err := e.rt.Create(ctx, spec); !errors.Is(err, sandbox.ErrAlreadyExists) {
		t.Errorf("second Create: %v, want ErrAlreadyExists", err)
	}

	spec = e.spec("noimage", sandbox.WithImage("shellbox-no-such-image:never"))
	if _, err := e.m.Ensure(ctx, spec); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "does not pull") {
		t.Errorf("missing image: %v, want ErrUnavailable", err)
	}
	if _, err := os.Lstat(e.hostDir("noimage")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host dir left behind after a failed create: %v", err)
	}

	// A container shellbox did not make, under a sandbox's name.
	name := docker.ContainerName(tenant, "squatted")
	if _, err := e.cli.ContainerCreate(ctx, &container.Config{Image: e.image, Labels: map[string]string{dockertest.LabelTest: "1", sandbox.LabelOwner: e.owner}}, nil, nil, nil, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.rt.Remove(context.Background(), name) })
	if _, err := e.rt.Get(ctx, tenant, "squatted"); !errors.Is(err, sandbox.ErrConflict) {
		t.Errorf("Get of a foreign container: %v, want ErrConflict", err)
	}

	if err := e.rt.Remove(ctx, "0123456789ab-no-such-container"); err != nil {
		t.Errorf("Remove of a missing container: %v, want nil", err)
	}
	if _, err := e.rt.Get(ctx, tenant, "never"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get of a missing sandbox: %v, want ErrNotFound", err)
	}
}
