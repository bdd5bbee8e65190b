package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
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
	requireEngine(t)
	dockertest.Require(t, os.Geteuid() == 0, "quickstart needs root")
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // where it builds the agent
	owner := dockertest.Owner(t)
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`tenant: %s
sandbox:
  stateDir: %s
  owner: %s
  labels:
    %s: "1"
`, dockerTenant, dockertest.StateDir(t), owner, dockertest.LabelTest)), 0o644)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	code := run(ctx, []string{"quickstart", "--config", cfg, "--test-image"}, strings.NewReader(""), &out, &errs)
	t.Logf("stderr:\n%s", errs.String())
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s", code, out.String())
	}
	for _, want := range []string{
		"hello from a shellbox sandbox", "uid=1000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1",
		"network interfaces: lo\n", "Read-only file system", "[exit code: 1]",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{"built from", "CGO_ENABLED=0", "sandbox ready in", "first sandboxed result", "removed session quickstart-"} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	var ls bytes.Buffer
	run(ctx, []string{"sessions", "ls", "--config", cfg}, strings.NewReader(""), &ls, &errs)
	if strings.Contains(ls.String(), "quickstart-") {
		t.Errorf("the quickstart session was left behind:\n%s", ls.String())
	}
}
