package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/images"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/tools"
)

// modulePath is this module's path: a checkout of it is where quickstart
// can build the agent from source.
const modulePath = "github.com/shellbox/shellbox"

// quickstartCommand is the demo call: who runs it, with which privileges,
// on which file system and network.
const quickstartCommand = `echo "hello from a shellbox sandbox"; id; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; echo "network interfaces: $(ls /sys/class/net)"; touch /etc/x`

func newQuickstartCmd() *cobra.Command {
	var testImage, keep bool
	cmd := &cobra.Command{
		Use:   "quickstart",
		Short: "Run a first tool call in a hardened sandbox, preparing what is missing",
		Long: `Run one bash call in a new hardened sandbox (docker backend) and print what the
model would see, preparing what is missing first:

  - the static agent binary: built from source (CGO_ENABLED=0 go build) when run
    in a checkout of shellbox, else found as sandbox.agent, next to shellbox or
    on PATH;
  - the sandbox image (sandbox.image): the default one is built on first use
    (root and debootstrap; a few minutes, once); without debootstrap, or with
    --test-image, the test image is built instead (seconds, from this host's
    binaries);
  - runsc (gVisor) is not needed: the sandbox runs on runc unless --runtime says.

Progress goes to stderr, the model's text to stdout. The session is removed
afterwards unless --keep.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if !isSandboxed(cfg.Backend) {
				cfg.Backend = "docker"
			}
			if r, _ := cmd.Flags().GetString("runtime"); r != "" {
				cfg.Sandbox.Runtime = r
			}
			return quickstart(cmd.Context(), cfg, testImage, keep, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().String("backend", "docker", "docker or containerd")
	cmd.Flags().String("runtime", "", "runc (default) or runsc (gVisor, if registered with the engine)")
	cmd.Flags().BoolVar(&testImage, "test-image", false, "use the test image (built in seconds from this host's binaries) instead of sandbox.image")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the session's sandbox (remove it with `shellbox sessions rm SESSION`)")
	return cmd
}

func quickstart(ctx context.Context, cfg config.Config, testImage, keep bool, stdout, stderr io.Writer) error {
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(stderr, "==> [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("quickstart: run as root (sudo): sandboxes keep their agent socket and spill files in %s (sandbox.stateDir), on a tmpfs shellbox mounts, and the default image is built with debootstrap and chroot", cfg.Sandbox.StateDir)
	}

	// 1. The engine.
	rt, err := openRuntime(cfg, "", nil)
	if err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	err = rt.Ping(ctx)
	rt.Close()
	if err != nil {
		return fmt.Errorf("quickstart: the %s engine is not reachable (is it running? DOCKER_HOST, containerd.address): %w", cfg.Backend, err)
	}
	step("%s engine reachable", cfg.Backend)

	// 2. The agent.
	agent, how, err := ensureAgent(ctx, cfg.Sandbox.Agent)
	if err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	cfg.Sandbox.Agent = agent
	step("agent %s (%s)", agent, how)

	// 3. The image.
	image, err := ensureImage(ctx, cfg, testImage, step, stderr)
	if err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	cfg.Sandbox.Image = image

	// 4. A new session, its sandbox, one call.
	sess := "quickstart-" + randomHex(3)
	cfg.Session = sess
	l, closeRuntime, err := newLayerShared(cfg, nil, nil)
	if err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	defer closeRuntime()
	defer l.Close(context.Background())
	if !keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := l.DeleteSession(cctx, cfg.Tenant, sess); err != nil {
				fmt.Fprintf(stderr, "shellbox: removing session %s: %v\n", sess, err)
				return
			}
			step("removed session %s (--keep keeps it)", sess)
		}()
	}
	step("creating a hardened sandbox for session %s (image %s, runtime %s)", sess, image, cfg.Sandbox.Runtime)
	t := time.Now()
	if _, err := l.CreateSession(ctx, cfg.Tenant, sess, server.SessionOptions{}); err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	step("sandbox ready in %s", time.Since(t).Round(time.Millisecond))
	ts, err := l.Toolset(ctx, cfg.Tenant)
	if err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	args, _ := json.Marshal(map[string]string{"command": quickstartCommand, "description": "Show the sandbox"})
	step("bash %s", args)
	res := ts.Call(ctx, tools.Invocation{Tenant: cfg.Tenant, Session: sess, Tool: "bash", Args: args})
	fmt.Fprintln(stdout, strings.TrimRight(res.Text, "\n"))
	step("first sandboxed result %s after start", time.Since(start).Round(100*time.Millisecond))
	if res.IsError {
		return exitError{1}
	}
	fmt.Fprintf(stderr, "\nNext: `CGO_ENABLED=0 go build -o bin/ ./cmd/...` (shellbox and the static agent side by side), then\n"+
		"  bin/shellbox call --backend %s --session s1 bash '{\"command\":\"id\",\"description\":\"who am I\"}'\n"+
		"Configuration: docs/configuration.md; the server: docs/server.md.\n", cfg.Backend)
	return nil
}

// ensureAgent returns the static agent binary and how it was found: built
// from source in a checkout (go build's cache makes a rebuild of an
// unchanged agent take about a second), else configured, next to shellbox
// or on PATH.
func ensureAgent(ctx context.Context, configured string) (path, how string, err error) {
	if configured != "" {
		p, err := agentBinary(configured)
		return p, "sandbox.agent", err
	}
	root, inCheckout := moduleRoot()
	goBin, goErr := exec.LookPath("go")
	if inCheckout && goErr == nil {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		out := filepath.Join(dir, "shellbox", "bin", "shellbox-agent")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return "", "", err
		}
		t := time.Now()
		build := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", out, "./cmd/shellbox-agent")
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		var msg bytes.Buffer
		build.Stdout, build.Stderr = &msg, &msg
		if err := build.Run(); err != nil {
			return "", "", fmt.Errorf("building the agent (CGO_ENABLED=0 go build ./cmd/shellbox-agent in %s): %w\n%s", root, err, tail(msg.String(), 2000))
		}
		return out, fmt.Sprintf("built from %s with CGO_ENABLED=0 go build in %s", root, time.Since(t).Round(100*time.Millisecond)), nil
	}
	if p, err := agentBinary(""); err == nil {
		return p, "found", nil
	}
	if inCheckout {
		return "", "", errors.New("the agent must be built from this checkout, and the go command is not on PATH (install Go 1.26), or set sandbox.agent to a static shellbox-agent")
	}
	return "", "", errors.New("no shellbox-agent next to shellbox or on PATH, and this is not a shellbox checkout to build it from: " +
		"`CGO_ENABLED=0 go install " + modulePath + "/cmd/shellbox-agent@latest` puts it beside a go-installed shellbox, or set sandbox.agent")
}

// moduleRoot finds a checkout of this module at or above the working
// directory.
func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			first, _, _ := strings.Cut(string(data), "\n")
			if strings.TrimSpace(first) == "module "+modulePath {
				if fi, err := os.Stat(filepath.Join(dir, "cmd", "shellbox-agent")); err == nil && fi.IsDir() {
					return dir, true
				}
			}
			return "", false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// defaultImage is the image quickstart builds when it is missing (a
// variable for tests).
var defaultImage = images.SandboxImage

// ensureImage returns the image the demo sandbox runs: sandbox.image when
// the engine has it, else the default image built now (root, debootstrap),
// else — without debootstrap, or asked for — the test image.
func ensureImage(ctx context.Context, cfg config.Config, testImage bool, step func(string, ...any), progress io.Writer) (string, error) {
	if cfg.Backend != "docker" {
		if testImage {
			return "", errors.New("--test-image: build it into containerd with `shellbox image build --test --containerd`, then run quickstart without --test-image and sandbox.image " + images.TestImage)
		}
		return cfg.Sandbox.Image, nil // the runtime says how to import a missing image
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return "", errors.New("the docker CLI is not on PATH (image builds use it)")
	}
	buildTest := func(why string) (string, error) {
		step("building the test image %s from this host's binaries (%s)", images.TestImage, why)
		if err := images.BuildTest(ctx, progress); err != nil {
			return "", err
		}
		return images.TestImage, nil
	}
	if testImage {
		return buildTest("--test-image")
	}
	if dockerHasImage(ctx, cfg.Sandbox.Image) {
		step("image %s present", cfg.Sandbox.Image)
		return cfg.Sandbox.Image, nil
	}
	if cfg.Sandbox.Image != defaultImage {
		return "", fmt.Errorf("image %s (sandbox.image) is not on the engine: pull or build it, or unset sandbox.image for the default", cfg.Sandbox.Image)
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		fmt.Fprintf(progress, "shellbox: the default image %s is built with debootstrap, which is not installed:\n"+
			"    apt-get install -y debootstrap\n"+
			"then run quickstart again (or `shellbox image build`). For now, the test image.\n", defaultImage)
		return buildTest("no debootstrap")
	}
	step("the default image %s is missing: building it (once; a few minutes, network-bound; --test-image takes seconds)", defaultImage)
	if err := images.BuildOffline(ctx, images.Options{Tag: defaultImage}, progress); err != nil {
		return "", err
	}
	return defaultImage, nil
}

func dockerHasImage(ctx context.Context, ref string) bool {
	return exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", ref).Run() == nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
