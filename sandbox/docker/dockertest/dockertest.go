// Package dockertest holds what tests against a real Docker engine share:
// the gate (skip with the reason when no engine is reachable, fail instead
// when CI=true), the per-run owner id and test label every test sandbox
// carries, cleanup of what crashed runs left behind, the test image, and a
// stand-in for the in-sandbox agent.
package dockertest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/internal/mountinfo"
	"github.com/shellbox/shellbox/sandbox"
)

// LabelTest marks every container a test creates ("1").
const LabelTest = "org.shellbox.test"

// Image is the test image (images/testimage/build.sh builds it from the
// host's binaries: bash, coreutils, user sandbox 1000, /workspace).
const Image = "shellbox-test:latest"

// ownerPrefix starts every test owner id: test-<pid>-<start time>, so a
// leftover can be traced to its run, and the run checked for being alive.
const ownerPrefix = "test-"

// InCI reports whether CI=true: gates fail instead of skipping there.
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips the test with reason unless ok; under CI=true it fails.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("CI=true, so not skipping: %s", reason)
	}
	t.Skip(reason)
}

// Engine returns a client of a reachable Docker engine (from the environment,
// with API version negotiation), closed when the test ends. Without an
// engine the test is skipped with the reason (failed under CI=true).
func Engine(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = cli.Ping(ctx)
		cancel()
		if err != nil {
			cli.Close()
		}
	}
	Require(t, err == nil, fmt.Sprintf("no Docker engine reachable (set DOCKER_HOST, or run dockerd): %v", err))
	t.Cleanup(func() { cli.Close() })
	return cli
}

var (
	runOnce sync.Once
	runID   string
)

// RunID is this test process's id, test-<pid>-<start time>.
func RunID() string {
	runOnce.Do(func() {
		start, _ := startTime(os.Getpid())
		runID = fmt.Sprintf("%s%d-%d", ownerPrefix, os.Getpid(), start)
	})
	return runID
}

// Tenant returns base made unique to this test process (base-p<pid>). A
// sandbox is named by its tenant and session on the whole engine, so test
// packages that run at the same time (go test runs packages in parallel)
// must not share a tenant, or their sessions collide.
func Tenant(base string) string { return fmt.Sprintf("%s-p%d", base, os.Getpid()) }

// Owner returns an owner id for one test: the run id plus a random suffix,
// so the Managers of parallel tests never adopt each other's sandboxes.
func Owner(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return RunID() + "-" + hex.EncodeToString(b[:])
}

// Labels returns the labels every test sandbox carries.
func Labels() map[string]string { return map[string]string{LabelTest: "1"} }

// StateDir returns a fresh state directory for a Manager, short enough for
// the agent socket path, named after the run so RemoveLeftovers can tell a
// crashed run's from a live one's. It is removed (tmpfs mounts in it
// unmounted first) when the test ends.
func StateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sbx"+strings.TrimPrefix(RunID(), "test")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := RemoveTree(dir); err != nil {
			t.Errorf("removing state dir: %v", err)
		}
	})
	return dir
}

// RemoveTree unmounts whatever is mounted under dir, then removes it.
func RemoveTree(dir string) error {
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	// Deepest first.
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	return os.RemoveAll(dir)
}

// RemoveLeftovers removes what test runs that are gone (crashed, killed)
// left behind: containers labelled LabelTest whose owner run is no longer
// alive, with their host directories, and state directories of such runs
// under /tmp. Sandboxes of live runs (parallel `go test`) are left alone. It
// returns how many containers it removed.
func RemoveLeftovers(ctx context.Context, cli client.APIClient) (int, error) {
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelTest+"=1"))})
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, c := range cs {
		if runAlive(c.Labels[sandbox.LabelOwner]) {
			continue
		}
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	dirs, _ := filepath.Glob("/tmp/sbx-*")
	for _, d := range dirs {
		// sbx-<pid>-<start>-<random>
		f := strings.SplitN(strings.TrimPrefix(filepath.Base(d), "sbx-"), "-", 3)
		if len(f) == 3 && !runAlive(ownerPrefix+f[0]+"-"+f[1]) {
			if err := RemoveTree(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errors.Join(errs...)
}

// runAlive reports whether the run an owner id (test-<pid>-<start>[-x])
// names is still alive. Ids it cannot parse count as alive: never remove
// what might not be a test's.
func runAlive(owner string) bool {
	f := strings.Split(strings.TrimPrefix(owner, ownerPrefix), "-")
	if !strings.HasPrefix(owner, ownerPrefix) || len(f) < 2 {
		return true
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	got, err := startTime(pid)
	return err == nil && got == start
}

// startTime is field 22 of /proc/<pid>/stat: with the pid, a process's
// identity (pids are reused, start times with them are not).
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("bad stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// repoRoot is the module root, found from this file's path.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

var imageMu sync.Mutex

// EnsureImage makes sure the test image is on the engine: if it is absent it
// runs images/testimage/build.sh, and while that script does not exist yet
// it polls for the image (someone else may be building it) for up to five
// minutes.
func EnsureImage(t testing.TB, cli client.APIClient) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	ctx := context.Background()
	present := func() bool {
		_, err := cli.ImageInspect(ctx, Image)
		return err == nil
	}
	if present() {
		return Image
	}
	script := filepath.Join(repoRoot(), "images", "testimage", "build.sh")
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, err := os.Stat(script); err == nil {
			out, err := exec.Command("bash", script).CombinedOutput()
			if err != nil {
				t.Fatalf("building %s: %v\n%s", Image, err, out)
			}
			if present() {
				return Image
			}
			t.Fatalf("%s ran but %s is still absent:\n%s", script, Image, out)
		}
		if present() {
			return Image
		}
		if time.Now().After(deadline) {
			Require(t, false, fmt.Sprintf("test image %s absent and %s missing", Image, script))
		}
		time.Sleep(5 * time.Second)
	}
}

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// Agent builds the real agent, cmd/shellbox-agent, statically (as every
// sandbox needs it), once per test process, and returns its path. The
// directory is removed by the OS's temp cleaning or RemoveAgent.
func Agent(t testing.TB) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "shellbox-agent-")
		if err != nil {
			agentErr = err
			return
		}
		agentPath = filepath.Join(dir, "shellbox-agent")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", agentPath, "github.com/shellbox/shellbox/cmd/shellbox-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("build agent: %v\n%s", err, out)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentPath
}

// Main is a TestMain for packages that use Agent: it runs the tests,
// removes the agent they built, and exits with the tests' code.
func Main(m *testing.M) {
	code := m.Run()
	RemoveAgent()
	os.Exit(code)
}

// RemoveAgent removes what Agent built; call it from TestMain after m.Run.
func RemoveAgent() {
	if agentPath != "" {
		os.RemoveAll(filepath.Dir(agentPath))
	}
}

var (
	standInOnce sync.Once
	standInPath string
	standInErr  error
)

// StandIn builds the stand-in agent (testdata/standin: a static PID 1 that
// serves Call on /run/shellbox/agent.sock and reaps zombies) and returns its
// path. The binary is cached under the temp dir by a hash of its source, so
// runs share one build and nothing piles up.
func StandIn(t testing.TB) string {
	t.Helper()
	standInOnce.Do(func() { standInPath, standInErr = buildStandIn() })
	if standInErr != nil {
		t.Fatal(standInErr)
	}
	return standInPath
}

func buildStandIn() (string, error) {
	src := filepath.Join(repoRoot(), "sandbox", "docker", "testdata", "standin")
	h := sha256.New()
	for _, f := range []string{filepath.Join(src, "main.go"), filepath.Join(repoRoot(), "go.sum")} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	h.Write([]byte(runtime.Version()))
	path := filepath.Join(os.TempDir(), "shellbox-standin-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "./sandbox/docker/testdata/standin")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the stand-in agent: %v\n%s", err, out)
	}
	// Atomic: parallel test processes may build it at the same time.
	return path, os.Rename(tmp, path)
}

// Request and Response are the stand-in's protocol.
type Request struct {
	Argv      []string `json:"argv"`
	UID       int      `json:"uid"`
	GID       int      `json:"gid"`
	TimeoutMs int      `json:"timeout_ms"`
}

type Response struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Call sends req to the stand-in listening on socket and returns its answer.
func Call(ctx context.Context, socket string, req Request) (Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return Response{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return Response{}, err
	}
	var resp Response
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return Response{}, err
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return Response{}, err
	}
	if resp.Error != "" {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// WaitSocket is a sandbox.Manager Ready hook: it waits until the agent's
// endpoint accepts a connection.
func WaitSocket(ctx context.Context, sb sandbox.Sandbox) error {
	for {
		c, err := sb.Agent.Dial(ctx)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent %s: %w (last: %v)", sb.Agent, ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// RuntimeArgs returns the runtimeArgs the engine has for runtime name, and
// whether it has that runtime at all.
func RuntimeArgs(ctx context.Context, cli client.APIClient, name string) ([]string, bool, error) {
	info, err := cli.Info(ctx)
	if err != nil {
		return nil, false, err
	}
	rt, ok := info.Runtimes[name]
	return rt.Args, ok, nil
}

// MountDir makes a host directory a sandbox can have mounted: under /tmp
// (t.TempDir's parents are 0700, so the sandbox user could not reach it),
// mode 0755, owned by uid:gid, symlinks resolved, removed when t ends.
func MountDir(t testing.TB, uid, gid int) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sbxmnt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return real
}
