package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/server/client"
)

// noEngines points the Docker client (DOCKER_HOST) and containerd.address
// at sockets nobody serves.
func noEngines(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(dir, "docker.sock"))
	t.Setenv("SHELLBOX_CONTAINERD_ADDRESS", filepath.Join(dir, "containerd.sock"))
}

// loadDefaults is the configuration of no file and no flags.
func loadDefaults(t *testing.T) config.Config {
	t.Helper()
	cfg, err := config.Load(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Without a configured backend and with no engine answering, the commands
// that run calls refuse, saying how to get an engine and what --backend
// local means; they never fall back to local.
func TestAutoBackendNoEngine(t *testing.T) {
	isolate(t)
	noEngines(t)
	cfg := loadDefaults(t)
	if cfg.Backend != config.BackendAuto {
		t.Fatalf("default backend %q, want %q", cfg.Backend, config.BackendAuto)
	}
	start := time.Now()
	choice, err := chooseBackend(context.Background(), &cfg)
	t.Logf("probe without an engine: %s", time.Since(start))
	if !errors.Is(err, sandbox.ErrUnavailable) || cfg.Backend != config.BackendAuto {
		t.Fatalf("chose %q: %v", cfg.Backend, err)
	}
	// What the probes cost is logged at debug level, and only there.
	var info, debug bytes.Buffer
	logProbes(newLogger(&info, "info"), choice)
	logProbes(newLogger(&debug, "debug"), choice)
	var line struct{ Level, Msg, Took, Docker, Containerd string }
	if info.Len() != 0 || json.Unmarshal(debug.Bytes(), &line) != nil || line.Level != "DEBUG" || line.Msg != "backend probe" ||
		line.Took == "" || !strings.HasPrefix(line.Docker, "failed in ") || !strings.HasPrefix(line.Containerd, "failed in ") ||
		!strings.Contains(line.Docker, "Cannot connect to the Docker daemon") {
		t.Errorf("probe log: info %q, debug %q", info.String(), debug.String())
	}
	for _, want := range []string{
		"no backend configured, and no sandbox engine answers",
		"docker: ", "Cannot connect to the Docker daemon",
		"containerd: ", filepath.Base(os.Getenv("SHELLBOX_CONTAINERD_ADDRESS")),
		"Start Docker (or point DOCKER_HOST at an engine) or containerd",
		"--backend, SHELLBOX_BACKEND or `backend:` in shellbox.yaml",
		"--backend local runs commands unsandboxed on this host, as ",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	for _, args := range [][]string{
		{"mcp"},
		{"call", "bash", `{"command":"echo on the host","description":"must not run"}`},
		{"serve", "--config", writeServeConfig(t, "")},
	} {
		out, errs, code := cli(t, "", args...)
		if code != 2 || out != "" || !strings.HasPrefix(errs, "shellbox: no backend configured, and no sandbox engine answers (") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", args[0], code, out, errs)
		}
	}
}

// A configured backend is taken as it is: no probe, whatever answers.
func TestConfiguredBackendNotProbed(t *testing.T) {
	isolate(t)
	noEngines(t)
	for _, name := range []string{"local", "docker", "containerd", "kube", "nope"} {
		cfg := loadDefaults(t)
		cfg.Backend = name
		if c, err := chooseBackend(context.Background(), &cfg); err != nil || c.how != "configured" || len(c.probes) != 0 || cfg.Backend != name {
			t.Errorf("%s: chose %q (%+v, %v)", name, cfg.Backend, c, err)
		}
	}
	// Named, a missing engine fails as that backend does, not as auto.
	_, errs, code := cli(t, "", "call", "--backend", "docker", "bash", `{"command":"true","description":"noop"}`)
	if code == 0 || strings.Contains(errs, "no backend configured") {
		t.Errorf("--backend docker without an engine: exit %d, %q", code, errs)
	}
	out, errs, code := cli(t, "", "call", "--backend", "local", "bash", `{"command":"echo on the host","description":"run locally"}`)
	if code != 0 || out != "on the host\n" {
		t.Errorf("--backend local: %q (exit %d, %s)", out, code, errs)
	}
}

// An engine that accepts the connection but never answers costs the probe
// probeTimeout, then counts as absent.
func TestAutoBackendProbeBounded(t *testing.T) {
	isolate(t)
	noEngines(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Setenv("DOCKER_HOST", "tcp://"+ln.Addr().String())
	cfg := loadDefaults(t)
	start := time.Now()
	_, err = chooseBackend(context.Background(), &cfg)
	took := time.Since(start)
	t.Logf("probe of a silent engine: %s", took)
	if err == nil || !strings.Contains(err.Error(), "docker: no answer within 2s") {
		t.Errorf("silent engine: %v", err)
	}
	if took < probeTimeout || took > probeTimeout+3*time.Second { // slack for a loaded machine
		t.Errorf("the probe took %s, want about %s", took, probeTimeout)
	}
}

// With Docker answering, auto is docker.
func TestAutoBackendDocker(t *testing.T) {
	isolate(t)
	dockertest.Engine(t)
	cfg := loadDefaults(t)
	start := time.Now()
	c, err := chooseBackend(context.Background(), &cfg)
	t.Logf("probe with Docker answering: %s", time.Since(start))
	if err != nil || cfg.Backend != "docker" || c.how != "auto: the docker engine answered" ||
		len(c.probes) != 1 || c.probes[0].backend != "docker" || c.probes[0].err != nil {
		t.Fatalf("chose %q (%+v, %v)", cfg.Backend, c, err)
	}
}

// With no Docker and containerd answering, auto is containerd, and says
// why not docker.
func TestAutoBackendContainerd(t *testing.T) {
	addr := containerdtest.Address(t) // before isolate, which unsets it
	isolate(t)
	noEngines(t)
	t.Setenv("SHELLBOX_CONTAINERD_ADDRESS", addr)
	cfg := loadDefaults(t)
	start := time.Now()
	c, err := chooseBackend(context.Background(), &cfg)
	t.Logf("probe with only containerd answering: %s", time.Since(start))
	if err != nil || cfg.Backend != "containerd" || !strings.HasPrefix(c.how, "auto: the containerd engine answered (docker: ") ||
		len(c.probes) != 2 || c.probes[0].err == nil || c.probes[1].err != nil {
		t.Fatalf("chose %q (%+v, %v)", cfg.Backend, c, err)
	}
}

// TestMCPSandboxedByDefault: `shellbox mcp` with no backend configured,
// Docker running and nothing of shellbox's in the environment runs a call
// in a hardened sandbox, and its first log line says which backend (at
// debug level too: the probe's line comes second).
func TestMCPSandboxedByDefault(t *testing.T) {
	requireEngine(t)
	agent := dockertest.Agent(t) // built in this package's directory
	isolate(t)
	tenant := dockertest.Tenant("auto")
	// What a fresh clone cannot have without building it: the agent and
	// an image. No backend.
	file := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`tenant: %s
session: s1
server:
  logLevel: debug
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  agent: %s
  labels:
    %s: "1"
`, tenant, dockertest.StateDir(t), dockertest.Owner(t), dockertest.Image, agent, dockertest.LabelTest)), 0o644)
	removeSandboxesAtEnd(t, file, tenant, "s1")

	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		done <- run(ctx, []string{"mcp", "--config", file}, sr, sw, &stderr)
		sw.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "auto", Version: "1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := client.CallMCP(ctx, cs, "bash", json.RawMessage(`{"command":"grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status","description":"show the sandboxing"}`))
	cs.Close()
	cw.Close()
	if code := <-done; code != 0 {
		t.Errorf("shellbox mcp exited %d: %s", code, stderr.String())
	}
	if err != nil || r.IsError {
		t.Fatalf("call: %v %+v\n%s", err, r, stderr.String())
	}
	host, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	hostCaps := regexp.MustCompile(`(?m)^CapEff:\s*(\S+)$`).FindSubmatch(host)
	for _, want := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("in the sandbox %q lacks %q (the host's CapEff: %s)", r.Text, want, hostCaps[1])
		}
	}
	lines := strings.SplitN(stderr.String(), "\n", 3)
	var line struct{ Level, Msg, Backend, Chosen string }
	if json.Unmarshal([]byte(lines[0]), &line) != nil || line.Level != "INFO" || line.Msg != "backend docker" ||
		line.Chosen != "auto: the docker engine answered" {
		t.Errorf("first line of the log: %s", lines[0])
	}
	var probe struct{ Level, Msg, Took, Docker string }
	if len(lines) < 2 || json.Unmarshal([]byte(lines[1]), &probe) != nil || probe.Level != "DEBUG" || probe.Msg != "backend probe" ||
		probe.Took == "" || !strings.HasPrefix(probe.Docker, "answered in ") {
		t.Errorf("second line of the log: %q", lines[1:])
	}
}
