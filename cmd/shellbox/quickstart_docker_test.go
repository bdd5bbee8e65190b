package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// TestDockerQuickstart: `shellbox quickstart --test-image` in a checkout
// builds the agent from source and runs the demo call in a hardened
// sandbox: uid 1000, no capabilities, no-new-privileges, loopback only, a
// read-only root; the session is removed afterwards.
func TestDockerQuickstart(t *testing.T) {
	out, errs := quickstartRun(t, "--test-image")
	for _, want := range []string{
		"hello from a shellbox sandbox", "uid=1000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1",
		"network interfaces: lo\n", "Read-only file system", "[exit code: 1]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"built from", "CGO_ENABLED=0", "sandbox ready in", "first sandboxed result", "removed session quickstart-"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
}

// Without debootstrap, a missing default image is not built: quickstart
// prints the line that installs debootstrap and runs on the test image.
func TestDockerQuickstartNoDebootstrap(t *testing.T) {
	defer func(d string) { defaultImage = d }(defaultImage)
	defaultImage = "shellbox-test-no-such-image:" + dockertest.RunID()
	var path []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "debootstrap")); err != nil {
			path = append(path, d)
		}
	}
	t.Setenv("PATH", strings.Join(path, string(filepath.ListSeparator)))
	out, errs := quickstartRun(t, "")
	if !strings.Contains(out, "hello from a shellbox sandbox") {
		t.Errorf("stdout:\n%s", out)
	}
	for _, want := range []string{"debootstrap, which is not installed", "    apt-get install -y debootstrap\n", "building the test image shellbox-test:latest"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
}

// quickstartRun runs quickstart with extra (if not empty) on the test
// engine, owner and state directory, as sandbox.image defaultImage, and
// returns its stdout and stderr; it fails the test unless it exits 0 and
// removes its session.
func quickstartRun(t *testing.T, extra string) (stdout, stderr string) {
	t.Helper()
	requireEngine(t)
	dockertest.Require(t, os.Geteuid() == 0, "quickstart needs root")
	// Where it puts the agent it builds: a directory of the test's. The
	// go command's build cache stays the machine's (GOCACHE named, since
	// its default is under XDG_CACHE_HOME): with an empty one, the two
	// quickstart tests compiled the agent and its dependencies from
	// nothing, 62 s and 39 s of a CI run.
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil || strings.TrimSpace(string(gocache)) == "" {
		t.Fatalf("go env GOCACHE: %q %v", gocache, err)
	}
	t.Setenv("GOCACHE", strings.TrimSpace(string(gocache)))
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	owner := dockertest.Owner(t)
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`tenant: %s
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  labels:
    %s: "1"
`, dockerTenant, dockertest.StateDir(t), owner, defaultImage, dockertest.LabelTest)), 0o644)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"quickstart", "--config", cfg}
	if extra != "" {
		args = append(args, extra)
	}
	var out, errs bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &out, &errs)
	t.Logf("stderr:\n%s", errs.String())
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s", code, out.String())
	}
	var ls bytes.Buffer
	run(ctx, []string{"sessions", "ls", "--config", cfg}, strings.NewReader(""), &ls, io.Discard)
	if strings.Contains(ls.String(), "quickstart-") {
		t.Errorf("the quickstart session was left behind:\n%s", ls.String())
	}
	return out.String(), errs.String()
}
