package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/images"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
)

// buildBinaries builds shellbox and, next to it, the static agent, as an
// operator would install them: once per test process (each build was two
// links, about 10 s of CPU on the 2-core CI machine, and twelve tests
// asked), in a directory that removeBinaries deletes after the tests. No
// test writes there.
func buildBinaries(t testing.TB) (shellbox string) {
	t.Helper()
	binsOnce.Do(func() { binsDir, binsErr = buildBinariesOnce() })
	if binsErr != nil {
		t.Fatal(binsErr)
	}
	return filepath.Join(binsDir, "shellbox")
}

var (
	binsOnce sync.Once
	binsDir  string
	binsErr  error
)

func buildBinariesOnce() (string, error) {
	dir, err := os.MkdirTemp("", "shellbox-test-bin-")
	if err != nil {
		return "", err
	}
	for _, b := range []struct{ out, pkg, cgo string }{
		{"shellbox", "github.com/shellbox/shellbox/cmd/shellbox", "1"},
		{"shellbox-agent", "github.com/shellbox/shellbox/cmd/shellbox-agent", "0"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("build %s: %v\n%s", b.out, err, out)
		}
	}
	return dir, nil
}

// removeBinaries removes what buildBinaries built; TestMain calls it
// after the tests.
func removeBinaries() {
	if binsDir != "" {
		os.RemoveAll(binsDir)
	}
}

// TestDockerRestartSurvival: a background task keeps running in its sandbox
// while the processes that talk to it come and go — one of them killed with
// SIGKILL in the middle of a call — and a new process reads its output and
// final status. Every `shellbox call` is a fresh process, so each one
// re-adopts the session's sandbox.
func TestDockerRestartSurvival(t *testing.T) { enginetest.Each(t, restartSurvival) }

func restartSurvival(t *testing.T, eng enginetest.Engine) {
	requireEngine(t)
	bin := buildBinaries(t)
	state := dockertest.StateDir(t)
	owner := dockertest.Owner(t)
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(eng.Config(t)+fmt.Sprintf(`tenant: %s
session: restart
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  labels:
    %s: "1"
`, dockerTenant, state, owner, dockertest.Image, dockertest.LabelTest)), 0o644)

	run := func(args ...string) (string, int) {
		t.Helper()
		out, errs, code := runBinary(t, bin, cfg, args...)
		if errs != "" {
			t.Logf("stderr of %v: %s", args, errs)
		}
		return out, code
	}
	t.Cleanup(func() { run("sessions", "rm", "--tenant", dockerTenant, "restart") })

	out, code := run("call", "bash", `{"command":"for i in 1 2 3; do echo tick $i; sleep 1; done; exit 3","description":"tick three times","run_in_background":true}`)
	m := regexp.MustCompile(`^started background task (\S+)$`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("start: %q (exit %d)", out, code)
	}
	id := m[1]

	// A second process holds the session in a long call and is killed -9.
	victim := exec.Command(bin, "--config", cfg, "call", "bash", `{"command":"sleep 120","description":"hold the session"}`)
	victim.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	victim.Process.Signal(syscall.SIGKILL)
	victim.Wait()

	// A new process finds the task, its output and its final status.
	deadline := time.Now().Add(60 * time.Second)
	var got strings.Builder
	for {
		out, code = run("call", "bash_output", fmt.Sprintf(`{"task_id":%q}`, id))
		if code != 0 {
			t.Fatalf("bash_output: %q (exit %d)", out, code)
		}
		got.WriteString(out + "\n")
		if strings.HasSuffix(out, "status: completed, exit code: 3") || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	text := got.String()
	for _, want := range []string{"tick 1", "tick 2", "tick 3", "status: completed, exit code: 3"} {
		if !strings.Contains(text, want) {
			// The whole status (the signal, if one ended the task) says
			// more than the text: seen twice in CI, not yet understood.
			js, _ := run("call", "--json", "bash_output", fmt.Sprintf(`{"task_id":%q}`, id))
			agentLog, _ := run("sessions", "logs", "--tenant", dockerTenant, "restart")
			t.Fatalf("reads after restart lack %q:\n%s\nthe task as JSON: %s\nthe agent's log:\n%s", want, text, js, agentLog)
		}
	}
	// The killed client's command did not outlive its connection.
	out, _ = run("call", "bash", `{"command":"for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 120' || true","description":"look for the victim"}`)
	if out != "0" {
		t.Errorf("the SIGKILLed client's command still runs: %q", out)
	}

	out, _ = run("sessions", "ls")
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(dockerTenant) + `\s+restart\s+runc\s+running`).MatchString(out) {
		t.Errorf("sessions ls: %q", out)
	}
	if out, code = run("sessions", "rm", "--tenant", dockerTenant, "restart"); code != 0 || out != "removed "+dockerTenant+"/restart" {
		t.Errorf("sessions rm: %q (exit %d)", out, code)
	}
	if out, _ = run("sessions", "ls"); strings.Contains(out, "restart") {
		t.Errorf("still listed after rm: %q", out)
	}
	// The session's workspace ended with it.
	if _, err := os.Lstat(filepath.Join(state, "workspaces", dockerTenant, "restart")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace after sessions rm: %v", err)
	}
}

// TestDockerPolicySandbox: the tenant's policy sets the sandbox (user,
// runtime, mounts, env) and caps the tenant's sessions, naming the limit.
func TestDockerPolicySandbox(t *testing.T) { enginetest.Each(t, policySandbox) }

func policySandbox(t *testing.T, eng enginetest.Engine) {
	requireEngine(t)
	bin := buildBinaries(t)
	state := dockertest.StateDir(t)
	owner := dockertest.Owner(t)
	pols := t.TempDir()
	data := dockertest.MountDir(t, 0, 0)
	os.WriteFile(filepath.Join(data, "hello"), []byte("mounted\n"), 0o644)
	polt := dockertest.Tenant("polt")
	os.WriteFile(filepath.Join(pols, polt+".yaml"), []byte(fmt.Sprintf(`default: allow
env: {GREETING: hi}
sandbox:
  images: [%s]
  runtime: runc
  user: {uid: 1234, gid: 1234}
  mounts: [{source: %s, target: /data}]
limits: {sessions: 1}
`, dockertest.Image, data)), 0o644)
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(eng.Config(t)+fmt.Sprintf(`tenant: %s
policies:
  dir: %s
audit:
  file: %s
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  labels:
    %s: "1"
`, polt, pols, filepath.Join(t.TempDir(), "audit.log"), state, owner, dockertest.Image, dockertest.LabelTest)), 0o644)
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return runBinary(t, bin, cfg, args...)
	}
	t.Cleanup(func() { run("sessions", "rm", "--tenant", polt, "p1") })

	if out, errs, code := run("call", "--session", "p1", "bash", `{"command":"id -u","description":"show uid"}`); out != "1234" || code != 0 {
		t.Fatalf("id -u: %q %q (exit %d)", out, errs, code)
	}
	if out, errs, code := run("call", "--session", "p1", "bash", `{"command":"cat /data/hello; echo $GREETING","description":"read the mount"}`); out != "mounted\nhi" || code != 0 {
		t.Errorf("the policy's mount and env: %q %q (exit %d)", out, errs, code)
	}
	if out, _, code := run("call", "--session", "p2", "bash", `{"command":"true","description":"second session"}`); code != 1 ||
		!strings.Contains(out, "session limit reached: limits.sessions = 1 (policy "+polt+")") {
		t.Errorf("second session: %q (exit %d)", out, code)
	}
	if _, errs, code := run("call", "--session", "p1", "--runtime", "runsc", "bash", `{"command":"true","description":"x"}`); code != 2 ||
		!strings.Contains(errs, "runtime runsc is not allowed by policy "+polt+" (sandbox.runtime: runc)") {
		t.Errorf("runtime: %q (exit %d)", errs, code)
	}
}

// dockerTenant is the tenant of this test process's sandboxes: container
// names derive from tenant and session, so test processes sharing an
// engine (two packages, two checkouts) must not share a tenant.
var dockerTenant = dockertest.Tenant("acme")

// requireEngine gates a test on the Docker engine (skip, or fail under
// CI=true), removes what crashed runs left, and builds the test image once
// per test process.
func requireEngine(t testing.TB) {
	t.Helper()
	dockertest.RemoveLeftovers(context.Background(), dockertest.Engine(t))
	testImageOnce.Do(func() { testImageErr = images.BuildTest(context.Background(), nil) })
	if testImageErr != nil {
		t.Fatalf("test image: %v", testImageErr)
	}
}

var (
	testImageOnce sync.Once
	testImageErr  error
)

// runBinary runs the built shellbox with --config cfg and args, with a bare
// environment, and returns its stdout (less the last newline), its stderr
// and its exit code.
func runBinary(t *testing.T, bin, cfg string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--config", cfg}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(out.String(), "\n"), errb.String(), code
}

// removeSandboxesAtEnd removes the sandboxes of tenant's sessions when t
// ends, whichever process created them (a server the test ran), with the
// test's config cfg (its engine and owner).
func removeSandboxesAtEnd(t testing.TB, cfg, tenant string, sessions ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		args := append([]string{"sessions", "rm", "--config", cfg, "--tenant", tenant}, sessions...)
		run(ctx, args, strings.NewReader(""), io.Discard, io.Discard)
	})
}
