package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/config"
)

func write(t *testing.T, body string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "shellbox.yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// The sandbox settings moved from docker.* to sandbox.*: an old file is
// refused with where each key went; the runtime sections decode.
func TestSections(t *testing.T) {
	t.Setenv("SHELLBOX_CONTAINERD_ADDRESS", "")
	os.Unsetenv("SHELLBOX_CONTAINERD_ADDRESS")
	_, err := config.Load(nil, write(t, "backend: docker\ndocker:\n  image: x\n  stateDir: /s\n"))
	if err == nil || !strings.Contains(err.Error(), "docker.image is now sandbox.image") || !strings.Contains(err.Error(), "docker.stateDir is now sandbox.stateDir") {
		t.Errorf("old keys: %v", err)
	}
	cfg, err := config.Load(nil, write(t, `backend: containerd
sandbox: {image: "img:1", stateDir: /var/lib/sbx}
docker: {engineRuntimes: {runsc: runsc-systrap}}
containerd: {address: /run/x.sock, namespace: ns1, runtimeConfigs: {runsc: /etc/runsc.toml}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.Image != "img:1" || cfg.Docker.EngineRuntimes["runsc"] != "runsc-systrap" ||
		cfg.Containerd.Address != "/run/x.sock" || cfg.Containerd.RuntimeConfigs["runsc"] != "/etc/runsc.toml" {
		t.Errorf("config: %+v %+v %+v", cfg.Sandbox, cfg.Docker, cfg.Containerd)
	}
	if d := cfg.Sandbox.Defaults(); d.Image != "img:1" || d.MemoryBytes != cfg.Sandbox.MemoryBytes {
		t.Errorf("defaults: %+v", d)
	}
}

// Bad values are errors naming the key.
func TestErrors(t *testing.T) {
	for body, want := range map[string]string{
		"unknown: 1\n": "unknown",
		"egress:\n  grantBlocked: [10.0.0.0/33]\n":      `config: egress: grantBlocked: entry 0: "10.0.0.0/33" is not an address range`,
		"session: ../x\n":                               "config: session",
		"server:\n  tenants:\n    acme: {tokens: []}\n": "no tokens",
		"server:\n  logLevel: loud\n":                   `logLevel "loud"`,
		"limits:\n  tailBytes: -1\n":                    "config: limits",
		"sandbox:\n  maxCreating: 0\n":                  "config: sandbox: maxCreating 0: must be at least 1",
		"sandbox:\n  createQueueWait: 0s\n":             "config: sandbox: createQueueWait 0s: must be positive",
	} {
		if _, err := config.Load(nil, write(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}
