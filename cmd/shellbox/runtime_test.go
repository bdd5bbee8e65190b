package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/config"
)

// The sandbox settings moved from docker.* to sandbox.*: an old file is
// refused with where each key went; the runtime sections decode.
func TestConfigSandboxAndRuntimeSections(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	old := filepath.Join(dir, "old.yaml")
	os.WriteFile(old, []byte("backend: docker\ndocker:\n  image: x\n  stateDir: /s\n"), 0o644)
	_, err := config.Load(nil, old)
	if err == nil || !strings.Contains(err.Error(), "docker.image is now sandbox.image") || !strings.Contains(err.Error(), "docker.stateDir is now sandbox.stateDir") {
		t.Errorf("old keys: %v", err)
	}
	cur := filepath.Join(dir, "new.yaml")
	os.WriteFile(cur, []byte(`backend: containerd
sandbox:
  image: img:1
  stateDir: /var/lib/sbx
docker:
  engineRuntimes: {runsc: runsc-systrap}
containerd:
  address: /run/x.sock
  namespace: ns1
  runtimes: {runsc: io.containerd.runsc.v1}
  runtimeConfigs: {runsc: /etc/runsc.toml}
`), 0o644)
	cfg, err := config.Load(nil, cur)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.Image != "img:1" || cfg.Sandbox.StateDir != "/var/lib/sbx" || cfg.Docker.EngineRuntimes["runsc"] != "runsc-systrap" ||
		cfg.Containerd.Address != "/run/x.sock" || cfg.Containerd.Namespace != "ns1" ||
		cfg.Containerd.Runtimes["runsc"] != "io.containerd.runsc.v1" || cfg.Containerd.RuntimeConfigs["runsc"] != "/etc/runsc.toml" {
		t.Errorf("config: %+v %+v %+v", cfg.Sandbox, cfg.Docker, cfg.Containerd)
	}
	if _, err := openRuntime(config.Config{Backend: "podman"}, "", nil); err == nil || !strings.Contains(err.Error(), `unknown backend "podman" (available: local, docker, containerd, kube)`) {
		t.Errorf("unknown backend: %v", err)
	}
}

// A containerd that is not running is said plainly, with the address.
func TestContainerdNotRunning(t *testing.T) {
	cfg := config.Config{Backend: "containerd"}
	cfg.Sandbox.StateDir = t.TempDir()
	cfg.Containerd.Address = filepath.Join(t.TempDir(), "none.sock")
	rt, err := openRuntime(cfg, "/bin/true", nil)
	if err == nil {
		// The client may connect lazily: the first call must say it.
		defer rt.Close()
		err = rt.Ping(t.Context())
	}
	if err == nil || !strings.Contains(err.Error(), cfg.Containerd.Address) || !strings.Contains(err.Error(), "does not answer: is it running?") {
		t.Errorf("no daemon: %v", err)
	}
}
