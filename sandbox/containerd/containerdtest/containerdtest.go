// Package containerdtest holds what tests against a real containerd share:
// the gate (the daemon's address comes from SHELLBOX_CONTAINERD_ADDRESS;
// without it tests skip with the reason, and fail under CI=true), runtimes
// configured as .ci/setup-containerd.sh sets the daemon up, cleanup of
// what crashed runs left, and a container shellbox did not create.
package containerdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// Environment the tests read.
const (
	EnvAddress     = "SHELLBOX_CONTAINERD_ADDRESS"
	EnvNamespace   = "SHELLBOX_CONTAINERD_NAMESPACE"    // default "shellbox"
	EnvRunscConfig = "SHELLBOX_CONTAINERD_RUNSC_CONFIG" // default /etc/shellbox-containerd/runsc.toml if present
	EnvRuncRoot    = "SHELLBOX_CONTAINERD_RUNC_ROOT"    // default <address's dir>/runc
	defaultRunscTo = "/etc/shellbox-containerd/runsc.toml"
)

// Image is the test image, imported by .ci/setup-containerd.sh.
const Image = dockertest.Image

// LabelTest marks what tests create ("1").
const LabelTest = dockertest.LabelTest

// Address returns the daemon's address, after checking that it answers.
// Without SHELLBOX_CONTAINERD_ADDRESS, or with a daemon that does not
// answer, the test is skipped with the reason (failed under CI=true).
func Address(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvAddress)
	dockertest.Require(t, addr != "", EnvAddress+" is not set: no containerd to test against (.ci/setup-containerd.sh starts one at "+
		containerd.DefaultAddress+" and prints the variables to export)")
	c, err := client.New(addr, client.WithDefaultNamespace(Namespace()), client.WithTimeout(5*time.Second))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = c.Version(ctx)
		cancel()
		c.Close()
	}
	dockertest.Require(t, err == nil, fmt.Sprintf("containerd at %s (%s) does not answer: %v", addr, EnvAddress, err))
	return addr
}

// Namespace is the namespace the tests use.
func Namespace() string {
	if ns := os.Getenv(EnvNamespace); ns != "" {
		return ns
	}
	return containerd.DefaultNamespace
}

// Config returns a runtime config for the daemon at addr, configured as
// .ci/setup-containerd.sh sets it up, with a fresh state directory (removed
// when t ends) and the real agent. Tests that play a restarted server
// share one Config.
func Config(t testing.TB, addr string) containerd.Config {
	t.Helper()
	cfg := containerd.Config{
		Address:     addr,
		Namespace:   Namespace(),
		StateDir:    dockertest.StateDir(t),
		AgentBinary: dockertest.Agent(t),
		RuncRoot:    os.Getenv(EnvRuncRoot),
	}
	if cfg.RuncRoot == "" {
		cfg.RuncRoot = filepath.Join(filepath.Dir(addr), "runc")
	}
	runsc := os.Getenv(EnvRunscConfig)
	if runsc == "" {
		if _, err := os.Stat(defaultRunscTo); err == nil {
			runsc = defaultRunscTo
		}
	}
	if runsc != "" {
		cfg.RuntimeConfigs = map[string]string{sandbox.RuntimeRunsc: runsc}
	}
	return cfg
}

// RequireRunscConfig skips t (fails it under CI=true) without a
// runsc.toml in cfg: checkpoints (Config.Checkpoint) make their runsc
// wrapper from it.
func RequireRunscConfig(t testing.TB, cfg containerd.Config) {
	t.Helper()
	dockertest.Require(t, cfg.RuntimeConfigs[sandbox.RuntimeRunsc] != "",
		"no runsc.toml to make the checkpoint wrapper from (set "+EnvRunscConfig+"; .ci/setup-containerd.sh writes "+defaultRunscTo+")")
}

// New returns a Runtime on cfg, closed when t ends. For runsc it requires
// the runtime to be available and its shim options (runsc.toml) set: the
// host reaches the agent's socket only with host-uds.
func New(t testing.TB, cfg containerd.Config, runtime string) *containerd.Runtime {
	t.Helper()
	rt, err := containerd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	if runtime == sandbox.RuntimeRunsc {
		dockertest.Require(t, cfg.RuntimeConfigs[sandbox.RuntimeRunsc] != "",
			"no runsc.toml for gVisor's shim (set "+EnvRunscConfig+"; .ci/setup-containerd.sh writes "+defaultRunscTo+")")
		have, err := rt.Runtimes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		dockertest.Require(t, contains(have, runtime), fmt.Sprintf("runtime runsc is not available on containerd at %s (have %v)", cfg.Address, have))
	}
	return rt
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Client returns a raw client of the daemon, in the test namespace, closed
// when t ends, and a context in that namespace.
func Client(t testing.TB, addr string) (*client.Client, context.Context) {
	t.Helper()
	c, err := client.New(addr, client.WithDefaultNamespace(Namespace()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, namespaces.WithNamespace(context.Background(), Namespace())
}

// Foreign creates, under the id the runtime gives tenant/session, a bare
// container shellbox did not create (no labels, no snapshot, no task),
// removed when t ends; it returns a func that reports whether it is still
// there.
func Foreign(t testing.TB, addr, tenant, session string) func() bool {
	t.Helper()
	c, ctx := Client(t, addr)
	id := containerd.ContainerID(tenant, session)
	_, err := c.NewContainer(ctx, id, client.WithContainerLabels(map[string]string{"org.example.foreign": "1"}),
		client.WithNewSpec(oci.WithProcessArgs("/bin/true")))
	if err != nil {
		t.Fatalf("foreign container %s: %v", id, err)
	}
	t.Cleanup(func() {
		if err := c.ContainerService().Delete(ctx, id); err != nil && !errdefs.IsNotFound(err) {
			t.Errorf("removing the foreign container %s: %v", id, err)
		}
	})
	return func() bool {
		_, err := c.ContainerService().Get(ctx, id)
		return err == nil
	}
}

// RemoveLeftovers removes what test runs that are gone left behind:
// sandboxes labelled LabelTest whose owner (dockertest.Owner: the run's
// pid and start time) is no longer alive. Sandboxes of live runs are left
// alone. It returns how many it removed.
func RemoveLeftovers(ctx context.Context, rt *containerd.Runtime) (int, error) {
	list, err := rt.List(ctx, "")
	if err != nil {
		return 0, err
	}
	c, err := client.New(os.Getenv(EnvAddress), client.WithDefaultNamespace(Namespace()))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx = namespaces.WithNamespace(ctx, Namespace())
	n := 0
	var errs []error
	for _, sb := range list {
		info, err := c.ContainerService().Get(ctx, sb.ID)
		if err != nil || info.Labels[LabelTest] != "1" || runAlive(sb.Owner) && tenantAlive(sb.Tenant) {
			continue
		}
		if err := rt.Remove(ctx, sb.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		// Its host directory was in that run's state directory.
		if dir := info.Labels[containerd.LabelHostDir]; strings.HasPrefix(dir, "/tmp/sbx-") {
			if err := dockertest.RemoveTree(dir); err != nil {
				errs = append(errs, err)
			}
		}
		n++
	}
	return n, errors.Join(errs...)
}

// tenantAlive reports whether the test process a tenant of
// dockertest.Tenant (base-p<pid>) names is alive: the conformance suite's
// owner is the same for every run, its tenant is not. Tenants without the
// suffix count as alive.
func tenantAlive(tenant string) bool {
	i := strings.LastIndex(tenant, "-p")
	if i < 0 {
		return true
	}
	pid, err := strconv.Atoi(tenant[i+2:])
	if err != nil || pid <= 0 {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	// A reused pid is a process that is not a Go test binary.
	return err == nil && strings.Contains(string(b), ".test")
}

// runAlive reports whether the run an owner id (test-<pid>-<start>[-x])
// names is still alive. Ids it cannot parse count as alive.
func runAlive(owner string) bool {
	f := strings.Split(strings.TrimPrefix(owner, "test-"), "-")
	if !strings.HasPrefix(owner, "test-") || len(f) < 2 {
		return true
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return true
	}
	fs := strings.Fields(string(b[i+1:]))
	if len(fs) < 20 {
		return true
	}
	got, err := strconv.ParseUint(fs[19], 10, 64)
	return err == nil && got == start
}

// TaskPid returns the host pid of a sandbox's task: the agent under runc,
// gVisor's sentry (the sandbox process) under runsc.
func TaskPid(t testing.TB, addr, id string) uint32 {
	t.Helper()
	c, ctx := Client(t, addr)
	ctr, err := c.LoadContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return task.Pid()
}

// RemoveBehind removes a sandbox's task, container and snapshot through the
// daemon itself, as an operator would, behind shellbox's back: the
// runtime's state for it (its host directory, the session's workspace)
// stays.
func RemoveBehind(t testing.TB, addr, id string) {
	t.Helper()
	c, ctx := Client(t, addr)
	ctr, err := c.LoadContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if task, err := ctr.Task(ctx, nil); err == nil {
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			t.Fatalf("delete task %s: %v", id, err)
		}
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil {
		t.Fatalf("delete container %s: %v", id, err)
	}
}
