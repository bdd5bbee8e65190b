package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// What the Docker tests share: the engine gate, the agent build, and
// hardened sandboxes made exactly as sandbox/docker makes them (the agent
// bind-mounted read-only as PID 1, root with SETUID/SETGID/KILL only,
// no-new-privileges, read-only rootfs, tmpfs /workspace and /tmp, no
// network, the session's host directory at /run/shellbox).

const (
	testImage = "shellbox-test:latest"
	labelTest = "org.shellbox.test"
	// namePrefix starts the names of this package's test containers; the
	// creating test process's pid follows, so leftovers of a dead run can be
	// told from a live run's.
	namePrefix = "shellbox-agent-test-"
	workspace  = "/workspace"
	// sessionID is the session of every test call.
	sessionID = "s1"
)

// require skips (fails under CI=true) unless ok: the gate every engine test
// in the project shares.
func require(t testing.TB, ok bool, reason string) { t.Helper(); dockertest.Require(t, ok, reason) }

// engine returns a client of the local Docker engine, or skips (fails under
// CI=true) when `docker info` would fail.
func engine(t testing.TB) *client.Client {
	t.Helper()
	cli := dockertest.Engine(t)
	ctx := context.Background()
	_, err := cli.ImageInspect(ctx, testImage)
	require(t, err == nil, fmt.Sprintf("image %s missing (%v): run bash images/testimage/build.sh", testImage, err))
	sweep(cli)
	return cli
}

// runtimeArgs returns the runtimeArgs the engine has for runtime, and
// whether it has the runtime at all.
func runtimeArgs(t testing.TB, cli *client.Client, name string) ([]string, bool) {
	t.Helper()
	info, err := cli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rt, ok := info.Runtimes[name]
	return rt.Args, ok
}

func hasArg(args []string, want ...string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return slices.Contains(want, strings.TrimLeft(a, "-")) })
}

// requireRuntime gates a runtime: runc always; runsc must be registered with
// --host-uds=create (or all), without which the host cannot connect to a
// socket the agent creates inside gVisor.
func requireRuntime(t testing.TB, cli *client.Client, name string) []string {
	t.Helper()
	if name == "runc" {
		return nil
	}
	args, ok := runtimeArgs(t, cli, name)
	require(t, ok, fmt.Sprintf("runtime %s is not registered with the engine: run .ci/setup-docker.sh", name))
	require(t, hasArg(args, "host-uds=create", "host-uds=all"),
		fmt.Sprintf("runtime %s has runtimeArgs %q, without --host-uds=create: the agent's socket is not reachable from the host; run .ci/setup-docker.sh", name, args))
	return args
}

// sweep removes this package's test containers left by test processes that
// are gone.
func sweep(cli *client.Client) {
	ctx := context.Background()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelTest+"=1"))})
	if err != nil {
		return
	}
	for _, c := range list {
		for _, n := range c.Names {
			rest, ok := strings.CutPrefix(strings.TrimPrefix(n, "/"), namePrefix)
			if !ok {
				continue
			}
			pid, _ := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
			if pid > 0 && pid != os.Getpid() && syscall.Kill(pid, 0) == nil {
				continue
			}
			if pid != os.Getpid() {
				cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			}
		}
	}
}

var (
	agentOnce sync.Once
	agentDir  string
	agentErr  error
)

// buildAgent builds this command statically, and the connect probe
// (testdata/connect), once per test binary; it returns their directory.
func buildAgent(t testing.TB) string {
	t.Helper()
	agentOnce.Do(func() {
		agentDir, agentErr = os.MkdirTemp("", "sbagent-bin")
		if agentErr != nil {
			return
		}
		os.Chmod(agentDir, 0o755)
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(gobin); err != nil {
			gobin = "go"
		}
		for _, b := range [][]string{
			{"-ldflags", "-X main.version=test", "-o", filepath.Join(agentDir, "shellbox-agent"), "."},
			{"-o", filepath.Join(agentDir, "connect"), "./testdata/connect"},
		} {
			cmd := exec.Command(gobin, append([]string{"build", "-trimpath"}, b...)...)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				agentErr = fmt.Errorf("go build %s: %v\n%s", b[len(b)-1], err, out)
				return
			}
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentDir
}

func cleanupAgentBuild() {
	if agentDir != "" {
		os.RemoveAll(agentDir)
	}
}

// sandbox is one hardened container running the agent, and a client of it.
type sandbox struct {
	t       testing.TB
	cli     *client.Client
	id      string
	runtime string
	args    []string // the runtime's runtimeArgs
	hostDir string
	socket  string
	agent   *agentapi.Client
	memory  int64
}

// newSandbox creates and starts a sandbox on runtime with memory and pids
// limits, and dials its agent. It is removed when the test ends.
func newSandbox(t testing.TB, cli *client.Client, rt string, memory, pids int64) *sandbox {
	t.Helper()
	return newSandboxPrep(t, cli, rt, memory, pids, nil)
}

// newSandboxPrep is newSandbox with prep run on the session's host
// directory before the sandbox starts (nil: nothing).
func newSandboxPrep(t testing.TB, cli *client.Client, rt string, memory, pids int64, prep func(hostDir string)) *sandbox {
	t.Helper()
	args := requireRuntime(t, cli, rt)
	bins := buildAgent(t)
	// Short: the socket path must fit in 108 bytes.
	hostDir, err := os.MkdirTemp("", "sbhost")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	// The sandbox user must traverse it to read spill files.
	os.Chmod(hostDir, 0o755)
	if prep != nil {
		prep(hostDir)
	}

	var b [4]byte
	rand.Read(b[:])
	name := namePrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	noInit := false
	cfg := &container.Config{
		Image:      testImage,
		Hostname:   "sandbox",
		Entrypoint: []string{"/.shellbox/agent"},
		Cmd:        []string{},
		Env:        []string{"SHELLBOX_SPILL_BYTES=67108864"},
		User:       "0:0",
		WorkingDir: workspace,
		Labels:     map[string]string{labelTest: "1"},
	}
	hc := &container.HostConfig{
		NetworkMode:    "none",
		Runtime:        rt,
		CapDrop:        []string{"ALL"},
		CapAdd:         []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			"/tmp":    "rw,exec,nosuid,nodev,size=16m,mode=1777",
			workspace: "rw,exec,nosuid,nodev,size=16m,uid=1000,gid=1000,mode=0755",
		},
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: filepath.Join(bins, "shellbox-agent"), Target: "/.shellbox/agent", ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
			// Not part of a real sandbox: the probe that shows a command
			// cannot connect to the agent.
			{Type: mount.TypeBind, Source: filepath.Join(bins, "connect"), Target: "/.shellbox/connect", ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
			{Type: mount.TypeBind, Source: hostDir, Target: "/run/shellbox",
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
		},
		Resources: container.Resources{
			Memory:     memory,
			MemorySwap: memory,
			PidsLimit:  &pids,
			Ulimits:    []*container.Ulimit{{Name: "core", Soft: 0, Hard: 0}},
		},
		Init:          &noInit,
		IpcMode:       container.IPCModePrivate,
		CgroupnsMode:  container.CgroupnsModePrivate,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	ctx := context.Background()
	created, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		t.Fatalf("create the sandbox: %v", err)
	}
	sb := &sandbox{t: t, cli: cli, id: created.ID, runtime: rt, args: args, hostDir: hostDir,
		socket: filepath.Join(hostDir, "agent.sock"), memory: memory}
	t.Cleanup(func() {
		if err := cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("remove the sandbox: %v", err)
		}
	})
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start the sandbox: %v", err)
	}
	sb.agent = sb.dial(30 * time.Second)
	t.Cleanup(func() { sb.agent.Close() })
	return sb
}

// dial waits for the agent's socket to answer the handshake.
func (sb *sandbox) dial(within time.Duration) *agentapi.Client {
	sb.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last error
	for {
		c, err := agentapi.Dial(ctx, sb.socket)
		if err == nil {
			return c
		}
		last = err
		select {
		case <-ctx.Done():
			sb.t.Fatalf("the agent did not answer within %s: %v\n%s", within, last, sb.logs())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// logs returns the container's state and the agent's stderr, for failures.
func (sb *sandbox) logs() string {
	ctx := context.Background()
	var b strings.Builder
	if info, err := sb.cli.ContainerInspect(ctx, sb.id); err == nil && info.State != nil {
		fmt.Fprintf(&b, "container %.12s: %s (exit code %d, OOMKilled %v)\n", sb.id, info.State.Status, info.State.ExitCode, info.State.OOMKilled)
	}
	if rc, err := sb.cli.ContainerLogs(ctx, sb.id, container.LogsOptions{ShowStdout: true, ShowStderr: true}); err == nil {
		var out bytes.Buffer
		stdcopy.StdCopy(&out, &out, rc)
		rc.Close()
		b.WriteString(out.String())
	}
	return b.String()
}

// spec resolves a request as the server does.
func spec(req executor.Request) executor.Spec {
	lim := executor.DefaultLimits()
	lim.Grace = 300 * time.Millisecond
	if req.Session == "" {
		req.Session = sessionID
	}
	s, err := lim.Resolve(context.Background(), req, workspace,
		[]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + workspace, "LANG=C.UTF-8"})
	if err != nil {
		panic(err)
	}
	return s
}

// run runs command in the sandbox through the agent.
func (sb *sandbox) run(command string, timeout time.Duration) executor.Result {
	sb.t.Helper()
	res, err := sb.agent.Run(context.Background(), spec(executor.Request{Command: command, Timeout: timeout}))
	if err != nil {
		sb.t.Fatalf("run %q: %v\n%s", command, err, sb.logs())
	}
	return res
}

// gone is shell that prints "gone" or "alive" for the pid in file.
func gone(file string) string {
	return fmt.Sprintf(`p=$(cat %s); if kill -0 "$p" 2>/dev/null && [ "$(cut -d' ' -f3 /proc/$p/stat)" != Z ]; then echo alive; else echo gone; fi`, file)
}

// waitFile is shell that waits until file is non-empty.
func waitFile(file string) string {
	return fmt.Sprintf("while [ ! -s %s ]; do sleep 0.01; done", file)
}

// zombies is shell that counts the zombies in the sandbox, with builtins
// only (a fork would make one).
const zombies = `n=0; for f in /proc/[0-9]*/stat; do read -r l < "$f" 2>/dev/null || continue; s=${l##*) }; [ "${s%% *}" = Z ] && n=$((n+1)); done; echo $n`

// statusFields parses /proc/self/status text.
func statusFields(s string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// The restart-survival helper: a throw-away "server" process that starts a
// background task through the agent, prints its id, and waits to be killed.
const (
	helperEnv     = "SHELLBOX_AGENT_TEST_HELPER"
	helperSocket  = "SHELLBOX_AGENT_TEST_SOCKET"
	helperCommand = "SHELLBOX_AGENT_TEST_COMMAND"
)

func helperMain(mode string) int {
	if mode != "start" {
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		return 2
	}
	ctx := context.Background()
	c, err := agentapi.Dial(ctx, os.Getenv(helperSocket))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tk, err := c.Start(ctx, spec(executor.Request{Command: os.Getenv(helperCommand), Background: true}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// A wait in flight, as a server's completion watcher has, when the
	// SIGKILL comes.
	go tk.Wait(ctx)
	fmt.Println(tk.ID())
	select {}
}

// startInHelper starts command as a background task from a helper process,
// returns the task id and the helper, still running.
func startInHelper(t testing.TB, socket, command string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=start", helperSocket+"="+socket, helperCommand+"="+command)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	return strings.TrimSpace(line), cmd
}
