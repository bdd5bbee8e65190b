package faults_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/tools"
)

// The engine tests restart a daemon under a running server. CI's test
// packages run in parallel against the shared dockerd and containerd, so
// these tests never touch those: each starts a private daemon of its
// own (its socket, data root, state, pid file and cgroups in one
// directory, /tmp/sbeng-<pid>-<start>-<random>, named after the test run
// like dockertest's state directories), imports the test image into it
// from the shared Docker, and restarts that one. removeEngineLeftovers
// finds what a crashed run left by that name.

// engineDirPrefix starts the directory of every private engine.
const engineDirPrefix = "/tmp/sbeng-"

// daemon is a private engine daemon: one process at a time, started
// again on the same directory.
type daemon struct {
	name string   // "dockerd", "containerd"
	argv []string // the command line
	env  []string
	sock string // the socket it serves its API on
	log  string // its log file (stdout and stderr, appended)
	// ping tells that it answers on sock.
	ping func(ctx context.Context) error

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
}

// engineDir makes a private engine's directory; the test's end removes
// it (unmounting what is left mounted below it first), after the
// daemon's teardown, which its caller registers later.
func engineDir(t *testing.T) string {
	t.Helper()
	removeEngineLeftovers(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	dir := engineDirPrefix + strings.TrimPrefix(dockertest.RunID(), "test-") + "-" + hex.EncodeToString(b[:])
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dockertest.RemoveTree(dir); err != nil {
			t.Errorf("removing the private engine's directory: %v", err)
		}
	})
	return dir
}

// start starts d and waits until it answers on its socket.
func (d *daemon) start(t *testing.T) time.Duration {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd != nil {
		t.Fatalf("%s is running already", d.name)
	}
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(d.argv, " "))
	cmd := exec.Command(d.argv[0], d.argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = d.env, logf, logf
	// Its own process group: a signal to the test's group is not one to
	// the daemon (its teardown is the test's).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", d.name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	d.cmd, d.done = cmd, done
	for deadline := time.Now().Add(hung); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			d.cmd = nil
			t.Fatalf("%s exited at start: %v\n%s", d.name, err, tail(d.log))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := d.ping(ctx)
		cancel()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer on %s within %s: %v\n%s", d.name, d.sock, hung, err, tail(d.log))
		}
	}
}

// stop sends sig to d and waits for it to exit; it returns how long that
// took (dockerd's SIGTERM stops its containers first).
func (d *daemon) stop(t *testing.T, sig syscall.Signal) time.Duration {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return 0
	}
	start := time.Now()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s to %s: %v", sig, d.name, err)
	}
	select {
	case <-d.done:
	case <-time.After(hung):
		d.cmd.Process.Kill()
		<-d.done
		t.Errorf("%s did not exit within %s of %s", d.name, hung, sig)
	}
	d.cmd = nil
	return time.Since(start)
}

// teardown ends d whatever state the test left it in: SIGTERM, then
// SIGKILL after a minute.
func (d *daemon) teardown() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		d.cmd.Process.Kill()
		<-d.done
	}
	d.cmd = nil
}

// tail is the end of a log file, for a failure's message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// importImage copies the test image from the shared Docker into a
// private engine: load reads a `docker save` stream.
func importImage(t *testing.T, load func(ctx context.Context, r io.Reader) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hung)
	defer cancel()
	shared := dockertest.Engine(t)
	rc, err := shared.ImageSave(ctx, []string{dockertest.Image})
	if err != nil {
		t.Fatalf("saving %s from the shared Docker: %v", dockertest.Image, err)
	}
	defer rc.Close()
	if err := load(ctx, rc); err != nil {
		t.Fatalf("importing %s into the private engine: %v", dockertest.Image, err)
	}
}

// sharedRunsc is how the shared Docker runs gVisor (daemon.json's
// "runsc" runtime: its path and flags), which the private engines copy;
// ok is false where it has none.
func sharedRunsc(t *testing.T, cli *client.Client) (path string, args []string, ok bool) {
	t.Helper()
	info, err := cli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rt, ok := info.Runtimes["runsc"]
	return rt.Path, rt.Args, ok
}

// removeEngineLeftovers ends what private engines of runs that are gone
// (crashed, killed) left: every process whose command line names such a
// run's directory (the daemons, their shims, gVisor's sandboxes and
// gofers) or that is in its cgroups (the containers' processes: dockerd
// is given the directory's name as its cgroup parent, and containerd's
// namespace is that name), then the directory with its mounts.
func removeEngineLeftovers(t *testing.T) {
	dirs, _ := filepath.Glob(engineDirPrefix + "*")
	for _, dir := range dirs {
		// sbeng-<pid>-<start>-<random>
		f := strings.SplitN(strings.TrimPrefix(dir, engineDirPrefix), "-", 3)
		if len(f) != 3 || runAlive(f[0], f[1]) {
			continue
		}
		base := filepath.Base(dir)
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range procs {
			pid, err := strconv.Atoi(filepath.Base(p))
			if err != nil || pid == os.Getpid() {
				continue
			}
			cmdline, _ := os.ReadFile(p + "/cmdline")
			cgroup, _ := os.ReadFile(p + "/cgroup")
			if bytes.Contains(cmdline, []byte(dir)) || bytes.Contains(cgroup, []byte("/"+base+"/")) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if err := dockertest.RemoveTree(dir); err != nil {
			t.Logf("removing a crashed run's private engine %s: %v", dir, err)
		} else {
			t.Logf("removed a crashed run's private engine %s", dir)
		}
	}
}

// runAlive reports whether the process pid, started at start (field 22
// of its stat), still runs.
func runAlive(pid, start string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return true
	}
	f := strings.Fields(string(b[i+1:]))
	return len(f) < 20 || f[19] == start
}

// errNamesSocket reports whether a call's error text names the engine's
// socket.
func errNamesSocket(text, sock string) bool { return strings.Contains(text, sock) }

// privateDockerd starts a dockerd of the test's own (its managed
// containerd with it, under its exec root), with the shared Docker's
// gVisor runtime and the test image, live-restore as given; its end
// removes every container on it and stops it. No bridge, no iptables:
// sandboxes have no network but loopback.
func privateDockerd(t *testing.T, liveRestore bool) (*daemon, *client.Client) {
	t.Helper()
	shared := dockertest.Engine(t)
	dockertest.EnsureImage(t, shared)
	dir := engineDir(t)
	cfg := map[string]any{"live-restore": liveRestore}
	if path, args, ok := sharedRunsc(t, shared); ok {
		cfg["runtimes"] = map[string]any{"runsc": map[string]any{"path": path, "runtimeArgs": args}}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "docker.sock")
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+sock), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	dockerd, err := exec.LookPath("dockerd")
	dockertest.Require(t, err == nil, "no dockerd binary to start a private engine with: "+fmt.Sprint(err))
	d := &daemon{
		name: "dockerd",
		argv: []string{dockerd, "--config-file", filepath.Join(dir, "daemon.json"),
			"--host", "unix://" + sock, "--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
			"--pidfile", filepath.Join(dir, "docker.pid"), "--cgroup-parent", "/" + filepath.Base(dir),
			"--bridge", "none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
			// The kernel's overlay on the directory's disk: starts in a
			// second, nothing of fuse-overlayfs's daemons to clean up.
			"--storage-driver", "overlay2"},
		env:  []string{"PATH=" + os.Getenv("PATH")},
		sock: sock,
		log:  filepath.Join(dir, "dockerd.log"),
		ping: func(ctx context.Context) error { _, err := cli.Ping(ctx); return err },
	}
	d.start(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		d.mu.Lock()
		running := d.cmd != nil
		d.mu.Unlock()
		if running {
			cs, _ := cli.ContainerList(ctx, container.ListOptions{All: true})
			for _, c := range cs {
				cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			}
		}
		d.teardown()
	})
	importImage(t, func(ctx context.Context, r io.Reader) error {
		resp, err := cli.ImageLoad(ctx, r)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	})
	return d, cli
}

// privateDockerEngine is the Docker engine at cli for newServed: the
// test's view of it, and the servers it starts find it by DOCKER_HOST
// (served.env).
func privateDockerEngine(cli *client.Client) enginetest.Engine {
	return enginetest.Engine{
		Name: "docker",
		Runtime: func(t testing.TB, stateDir, agent, runtime string) sandbox.Runtime {
			t.Helper()
			rt, err := docker.New(cli, docker.Config{StateDir: stateDir, AgentBinary: agent})
			if err != nil {
				t.Fatal(err)
			}
			have, err := rt.Runtimes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			dockertest.Require(t, slices.Contains(have, runtime),
				fmt.Sprintf("the private dockerd has no %q runtime (%v): the shared Docker has none to copy (.ci/setup-docker.sh registers runsc)", runtime, have))
			return rt
		},
		Config: func(testing.TB) string { return "backend: docker\n" },
	}
}

// engineCase is a server on a private engine, and what a restart of the
// engine should leave of the session's sandbox.
type engineCase struct {
	d       *daemon
	s       *served
	adopted bool   // the session's sandbox survives the restart (else: a new one)
	what    string // the engine and its setting, for the figures
}

// restartUnder runs the engine-restart scenario of c: a session with a
// file in its workspace, a background task printing and a foreground call
// running when the engine is stopped (SIGTERM) and its socket is gone;
// calls while it is gone; then the engine started again.
//
// During: the call in flight gets its result or a clear error saying the
// sandbox died during it (never a transport error: the server stays);
// every call gets an answer, and every error names the engine's socket
// (a new session's first call cannot succeed: it needs the engine). No
// panic, the server does not die.
//
// After: the session's first call succeeds with the workspace's files,
// in the sandbox that survived (c.adopted) or in a new one; a new
// session works; the task is read to its end where its sandbox survived;
// one sandbox per session on the engine, the dead one gone; the audit log
// has every call.
func restartUnder(t *testing.T, c engineCase) {
	s, d := c.s, c.d
	p := s.start(t)
	const session, fresh = "eng", "eng-fresh"
	t.Cleanup(func() { p.deleteSessions(t, session, fresh) })
	p.bash(t, session, "echo kept > /workspace/kept")
	r, _, err := p.call(t, session, tools.ToolBash,
		`{"command":"for i in $(seq 1 24); do echo tick $i; sleep 0.5; done; exit 3","description":"ticks","run_in_background":true}`)
	if err != nil || r.IsError {
		t.Fatalf("starting the task: %v %q", err, r.Text)
	}
	task := r.Value.(*tools.Background).TaskID
	before := s.sandboxes(t)
	if len(before) != 1 || before[0].Session != session {
		t.Fatalf("before the fault the owner has %+v, want the session's sandbox", before)
	}

	type outcome struct {
		r    tools.Result
		err  error
		took time.Duration
	}
	inflight := make(chan outcome, 1)
	go func() {
		r, took, err := p.call(t, session, tools.ToolBash,
			`{"command":"touch /workspace/started; sleep 5; echo slept","description":"in flight","timeoutMs":60000}`)
		inflight <- outcome{r, err, took}
	}()
	started := filepath.Join(s.stateDir, "workspaces", s.tenant, session, "started")
	for deadline := time.Now().Add(hung); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call in flight did not start")
		}
	}

	fault := time.Now()
	stopped := d.stop(t, syscall.SIGTERM)
	// Gone entirely: a daemon that left its socket file behind would
	// refuse connections; the fault is the file gone.
	os.Remove(d.sock)
	var o outcome
	select {
	case o = <-inflight:
	case <-time.After(hung):
		t.Fatalf("the call in flight did not end %s after the engine stopped", hung)
	}
	switch {
	case o.err != nil:
		t.Errorf("the call in flight when the engine stopped: a transport error %v, want the server's answer", o.err)
	case c.adopted && (o.r.IsError || o.r.Text != "slept"):
		t.Errorf("the call in flight when the engine stopped: %q, want its result (its sandbox outlives the engine)", o.r.Text)
	case !c.adopted && !(o.r.IsError && strings.Contains(o.r.Text, "during the call")) && o.r.Text != "slept":
		t.Errorf("the call in flight when the engine stopped: %q, want its result or an error saying its sandbox died during it", o.r.Text)
	}

	// While the engine is gone.
	during := map[string]string{}
	var out strings.Builder // the task's output, as read
	for _, call := range []struct{ name, session, tool, args string }{
		{"the session's call", session, tools.ToolBash, `{"command":"cat /workspace/kept","description":"during"}`},
		{"the task's output", session, tools.ToolBashOutput, fmt.Sprintf(`{"task_id":%q}`, task)},
		{"a new session", fresh, tools.ToolBash, `{"command":"echo new","description":"new"}`},
	} {
		r, took, err := p.call(t, call.session, call.tool, call.args)
		if err != nil {
			t.Errorf("%s with the engine gone: a transport error %v (the server: %s)", call.name, err, p.log())
			continue
		}
		during[call.name] = fmt.Sprintf("%q in %s", r.Text, took.Round(time.Millisecond))
		if call.tool == tools.ToolBashOutput && !r.IsError {
			out.WriteString(r.Text + "\n")
		}
		if r.IsError && !errNamesSocket(r.Text, d.sock) {
			t.Errorf("%s with the engine gone: %q, want an error naming the engine's socket %s", call.name, r.Text, d.sock)
		}
		if call.session == fresh && !r.IsError {
			t.Errorf("a new session's first call with the engine gone: %q, want an error naming the engine's socket", r.Text)
		}
	}

	back := d.start(t)
	up := time.Now()
	next, took, err := p.call(t, session, tools.ToolBash, `{"command":"cat /workspace/kept /workspace/started && echo ok","description":"after"}`)
	recovery := time.Since(fault)
	if err != nil || next.IsError || !strings.HasSuffix(next.Text, "ok") {
		t.Errorf("the session's first call after the engine is back: %v %q, want the workspace's files", err, next.Text)
	}
	// A new session needs the engine itself: its calls are made again
	// until one succeeds. Docker's client dials afresh for each request;
	// containerd's gRPC connection dials again at most 500 ms apart
	// (containerd.reconnect; with grpc's default backoff, capped at the
	// client's 5 s timeout, calls failed for 1.9-3.4 s after the daemon
	// answered), failing calls with the daemon's absence meanwhile.
	var freshTries int
	var freshAfter time.Duration
	for deadline := up.Add(hung); ; time.Sleep(250 * time.Millisecond) {
		freshTries++
		r, _, err := p.call(t, fresh, tools.ToolBash, `{"command":"echo new","description":"new"}`)
		if err != nil {
			t.Fatalf("a new session after the engine is back: a transport error %v", err)
		}
		if !r.IsError && r.Text == "new" {
			freshAfter = time.Since(up)
			break
		}
		if !errNamesSocket(r.Text, d.sock) {
			t.Errorf("a new session after the engine is back: %q, want its result or an error naming the engine's socket", r.Text)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new session %s after the engine is back: %q", hung, r.Text)
		}
	}

	// The task: read to its end where its sandbox survived; where it did
	// not, its end is a clear answer (the task died with its sandbox).
	var last string
	for deadline := time.Now().Add(hung); ; time.Sleep(500 * time.Millisecond) {
		r, _, err := p.call(t, session, tools.ToolBashOutput, fmt.Sprintf(`{"task_id":%q}`, task))
		if err != nil {
			t.Fatalf("bash_output after the engine is back: %v", err)
		}
		last = r.Text
		out.WriteString(r.Text + "\n")
		if r.IsError || !strings.Contains(r.Text, "status: running") || time.Now().After(deadline) {
			break
		}
	}
	if c.adopted {
		for i := 1; i <= 24; i++ {
			if want := fmt.Sprintf("tick %d\n", i); !strings.Contains(out.String(), want) {
				t.Errorf("the task's output read after the restart lacks %q:\n%s", want, out.String())
				break
			}
		}
		if !strings.Contains(out.String(), "status: completed, exit code: 3") {
			t.Errorf("the task's status after the restart:\n%s", out.String())
		}
	} else if last == "" {
		t.Errorf("bash_output of the task whose sandbox died: an empty answer")
	}

	after := s.sandboxes(t)
	var mine sandbox.Sandbox
	for _, sb := range after {
		if sb.Session == session {
			mine = sb
		}
	}
	if len(after) != 2 || mine.State != sandbox.StateRunning {
		t.Errorf("after the restart the owner has %+v, want one running sandbox per session (2)", after)
	}
	if got := same(mine, before[0]); got != c.adopted {
		t.Errorf("after the restart the session's sandbox is %s (before %s): adopted %v, want %v", mine.ID, before[0].ID, got, c.adopted)
	}
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("the server died: %v\n%s", err, p.log())
	default:
	}
	if strings.Contains(p.log(), "panic") {
		t.Errorf("the server's log has a panic:\n%s", p.log())
	}
	audit, err := os.ReadFile(s.audit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"echo kept", "for i in $(seq 1 24)", "touch /workspace/started; sleep 5", "cat /workspace/kept /workspace/started"} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("the audit log has no line of %q", want)
		}
	}
	t.Logf("fault %s/%s/engine restarted: stopping it took %s; the call in flight: %v %q after %s; with it gone: %v; it answered again %s after its start; the session's next call took %s (recovery %s, fault to that call's end), in the %s; a new session's call succeeded %s after the engine answered, at try %d; the task's last answer: %q",
		c.what, s.runtime, stopped.Round(time.Millisecond), o.err, o.r.Text, o.took.Round(time.Millisecond), during,
		back.Round(time.Millisecond), took.Round(time.Millisecond), recovery.Round(time.Millisecond),
		map[bool]string{true: "same sandbox (adopted)", false: "new sandbox " + mine.ID}[same(mine, before[0])],
		freshAfter.Round(time.Millisecond), freshTries, last)
}

// TestDockerdRestarted: a private dockerd is stopped (SIGTERM), its
// socket gone, and started again, under a server whose session has a
// sandbox, a background task and a call running (restartUnder), on runc
// and gVisor. With Docker's default (no live-restore, as the shared
// engine runs) dockerd stops every container when it stops: the call in
// flight ends with an error saying its sandbox died during it, the task
// dies with it, and the session's next call gets a new sandbox with the
// workspace. With live-restore the sandbox outlives dockerd: the call in
// flight gets its result, the task runs on, and the next call is served
// by the same sandbox.
func TestDockerdRestarted(t *testing.T) {
	for _, live := range []bool{false, true} {
		name := map[bool]string{false: "default", true: "live-restore"}[live]
		t.Run(name, func(t *testing.T) {
			d, cli := privateDockerd(t, live)
			for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
				t.Run(runtime, func(t *testing.T) {
					s := newServed(t, privateDockerEngine(cli), runtime, "")
					s.env = []string{"DOCKER_HOST=unix://" + d.sock}
					restartUnder(t, engineCase{d: d, s: s, adopted: live, what: "docker(" + name + ")"})
				})
			}
		})
	}
}

// privateContainerd starts a containerd of the test's own, on the
// binaries the shared one runs (.ci/setup-containerd.sh builds them) and
// configured as that one is (runc, and gVisor's shim with the shared
// runsc.toml's flags), everything of it in one directory: config, root,
// state, socket, the shims' sockets, runc's and runsc's state; its
// namespace is the directory's name (the sandboxes' cgroups are
// /<namespace>/<id>), with the test image imported. Its end removes
// every container of the namespace and stops it.
func privateContainerd(t *testing.T) (*daemon, containerd.Config) {
	t.Helper()
	shared := containerdtest.Address(t)
	dockertest.EnsureImage(t, dockertest.Engine(t))
	// The shared daemon's binary: setup-containerd.sh records its pid
	// beside its socket.
	pid, err := os.ReadFile(filepath.Join(filepath.Dir(shared), "containerd.pid"))
	var bin string
	if err == nil {
		bin, err = os.Readlink("/proc/" + strings.TrimSpace(string(pid)) + "/exe")
	}
	dockertest.Require(t, err == nil, fmt.Sprintf("the shared containerd's binary (from the pid file beside %s, as .ci/setup-containerd.sh writes it): %v", shared, err))
	bindir := filepath.Dir(strings.TrimSuffix(bin, " (deleted)"))
	dir := engineDir(t)
	ns := filepath.Base(dir)
	sock := filepath.Join(dir, "containerd.sock")
	conf := filepath.Join(dir, "config.toml")
	toml := fmt.Sprintf(`# A private containerd of test/faults (engine_test.go).
version = 3
root = %[1]q
state = %[2]q
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.cri.v1.images",
  "io.containerd.cri.v1.runtime",
  "io.containerd.podsandbox.controller.v1.podsandbox",
  "io.containerd.nri.v1.nri",
]
[grpc]
  address = %[3]q
[ttrpc]
  address = ""
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = %[4]q
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = %[5]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, filepath.Join(dir, "root", "opt"), filepath.Join(dir, "s"))
	if err := os.WriteFile(conf, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := containerdtest.Config(t, shared)
	cfg.Address, cfg.Namespace, cfg.RuncRoot = sock, ns, filepath.Join(dir, "runc")
	path := []string{bindir}
	if runsc := cfg.RuntimeConfigs[sandbox.RuntimeRunsc]; runsc != "" {
		// The shared runsc.toml, its root made the test's.
		b, err := os.ReadFile(runsc)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, "=")
			switch strings.TrimSpace(k) {
			case "root":
				l = fmt.Sprintf("root = %q", filepath.Join(dir, "runsc"))
			case "binary_name":
				if bin, err := strconv.Unquote(strings.TrimSpace(v)); err == nil {
					path = append(path, filepath.Dir(bin))
				}
			}
			lines = append(lines, l)
		}
		own := filepath.Join(dir, "runsc.toml")
		if err := os.WriteFile(own, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeConfigs = map[string]string{sandbox.RuntimeRunsc: own}
	}
	d := &daemon{
		name: "containerd",
		argv: []string{filepath.Join(bindir, "containerd"), "--config", conf},
		// It finds its shims, and the runc shim its runc, on PATH.
		env:  []string{"PATH=" + strings.Join(path, ":") + ":" + os.Getenv("PATH")},
		sock: sock,
		log:  filepath.Join(dir, "containerd.log"),
		ping: func(ctx context.Context) error {
			c, err := ctrd.New(sock, ctrd.WithTimeout(2*time.Second))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Version(ctx)
			return err
		},
	}
	d.start(t)
	t.Cleanup(func() {
		d.mu.Lock()
		running := d.cmd != nil
		d.mu.Unlock()
		if !running {
			// A test that failed while it was stopped: its shims still
			// run the containers, which only the daemon removes.
			d.start(t)
		}
		ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ns), 2*time.Minute)
		defer cancel()
		if c, err := ctrd.New(sock); err == nil {
			cs, _ := c.Containers(ctx)
			for _, ctr := range cs {
				if task, err := ctr.Task(ctx, nil); err == nil {
					task.Delete(ctx, ctrd.WithProcessKill)
				}
				ctr.Delete(ctx, ctrd.WithSnapshotCleanup)
			}
			c.Close()
		}
		d.teardown()
	})
	// Imported as setup-containerd.sh does it, with the same ctr: under
	// both names policies and tests use.
	importImage(t, func(ctx context.Context, r io.Reader) error {
		ctr := func(stdin io.Reader, args ...string) error {
			cmd := exec.CommandContext(ctx, filepath.Join(bindir, "ctr"), append([]string{"--address", sock, "--namespace", ns}, args...)...)
			cmd.Stdin = stdin
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
			}
			return nil
		}
		if err := ctr(r, "images", "import", "-"); err != nil {
			return err
		}
		return ctr(nil, "images", "tag", "--force", "docker.io/library/"+dockertest.Image, dockertest.Image)
	})
	return d, cfg
}

// privateContainerdEngine is the containerd of cfg for newServed.
func privateContainerdEngine(cfg containerd.Config) enginetest.Engine {
	return enginetest.Engine{
		Name: "containerd",
		Runtime: func(t testing.TB, stateDir, agent, runtime string) sandbox.Runtime {
			t.Helper()
			c := cfg
			c.StateDir, c.AgentBinary = stateDir, agent
			return containerdtest.New(t, c, runtime)
		},
		Config: func(testing.TB) string {
			s := fmt.Sprintf("backend: containerd\ncontainerd:\n  address: %q\n  namespace: %q\n  runcRoot: %q\n", cfg.Address, cfg.Namespace, cfg.RuncRoot)
			if runsc := cfg.RuntimeConfigs[sandbox.RuntimeRunsc]; runsc != "" {
				s += fmt.Sprintf("  runtimeConfigs:\n    runsc: %q\n", runsc)
			}
			return s
		},
	}
}

// TestContainerdRestarted: a private containerd is stopped (SIGTERM), its
// socket gone, and started again, under a server whose session has a
// sandbox, a background task and a call running (restartUnder), on runc
// and gVisor. Its shims keep the sandboxes running meanwhile: the call in
// flight gets its result, the task runs on, calls that need the daemon
// fail naming its socket, and after the restart the server goes on with
// the same sandbox.
func TestContainerdRestarted(t *testing.T) {
	d, cfg := privateContainerd(t)
	for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		t.Run(runtime, func(t *testing.T) {
			s := newServed(t, privateContainerdEngine(cfg), runtime, "")
			restartUnder(t, engineCase{d: d, s: s, adopted: true, what: "containerd"})
		})
	}
}
