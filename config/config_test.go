package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/sandbox/hostdir"
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
sandbox: {image: "img:1", stateDir: /var/lib/sbx, workspaceMedium: memory}
docker: {engineRuntimes: {runsc: runsc-systrap}}
containerd: {address: /run/x.sock, namespace: ns1, runtimeConfigs: {runsc: /etc/runsc.toml}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.Image != "img:1" || cfg.Sandbox.WorkspaceMedium != hostdir.MediumMemory || cfg.Docker.EngineRuntimes["runsc"] != "runsc-systrap" ||
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
		"sandbox:\n  workspaceMedium: ssd\n":            `config: sandbox: workspaceMedium "ssd": want disk or memory`,
		"sandbox:\n  tenantCpus: -1\n":                  "config: sandbox: tenantCpus -1: must be 0 (none) or positive",
		"sandbox:\n  cpus: 2\n  tenantCpus: 1\n":        "config: sandbox: tenantCpus 1: below cpus 2",
	} {
		if _, err := config.Load(nil, write(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

// The kube section decodes and maps onto kube's configuration; the
// sessions' owner is the release there.
func TestKube(t *testing.T) {
	cfg, err := config.Load(nil, write(t, `backend: kube
kube:
  namespace: sbx
  release: prod
  agentImage: shellbox:1.2
  agentPort: 7171
  runtimeClasses: {runsc: gvisor-systrap}
  podSecurity: restricted
  readyTimeout: 45s
  serverSelector: {app.kubernetes.io/name: shellbox}
  serverNamespace: shellbox
`))
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Kube.Runtime()
	if k.Namespace != "sbx" || k.Release != "prod" || k.AgentImage != "shellbox:1.2" || k.AgentPort != 7171 ||
		k.RuntimeClasses["runsc"] != "gvisor-systrap" || k.RuntimeClasses["runc"] != "" || k.PodSecurity != "restricted" ||
		k.ReadyTimeout != 45*time.Second || k.ServerSelector["app.kubernetes.io/name"] != "shellbox" || k.ServerNamespace != "shellbox" ||
		k.ImagePullPolicy != "IfNotPresent" || k.AgentPath != "/usr/local/bin/shellbox-agent" {
		t.Errorf("kube: %+v", k)
	}
	if cfg.Owner() != "prod" {
		t.Errorf("owner %q, want the release", cfg.Owner())
	}
	// Other backends keep sandbox.owner and do not need kube.agentImage.
	cfg, err = config.Load(nil, write(t, "backend: docker\nsandbox: {owner: me}\n"))
	if err != nil || cfg.Owner() != "me" {
		t.Errorf("docker: owner %q, %v", cfg.Owner(), err)
	}
}

// server.tokensFile adds its hashes to the tenants and the operator tokens.
func TestTokensFile(t *testing.T) {
	h := func(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(tokens, []byte("tenants:\n  acme: ["+h('a')+"]\n  Beta: ["+h('b')+"]\noperatorTokens: ["+h('c')+"]\n"), 0o600)
	cfg, err := config.Load(nil, write(t, "server:\n  tokensFile: "+tokens+"\n  tenants:\n    acme: {tokens: ["+h('d')+"], maxConcurrentCalls: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	acme, beta := cfg.Server.Tenants["acme"], cfg.Server.Tenants["beta"]
	if strings.Join(acme.Tokens, ",") != h('d')+","+h('a') || acme.MaxConcurrentCalls != 3 ||
		strings.Join(beta.Tokens, ",") != h('b') || strings.Join(cfg.Server.OperatorTokens, ",") != h('c') {
		t.Errorf("tenants %+v, operator tokens %v", cfg.Server.Tenants, cfg.Server.OperatorTokens)
	}
	os.WriteFile(tokens, []byte("tenant:\n  acme: [x]\n"), 0o600)
	if _, err := config.Load(nil, write(t, "server: {tokensFile: "+tokens+"}\n")); err == nil ||
		!strings.Contains(err.Error(), "config: server.tokensFile: "+tokens) || !strings.Contains(err.Error(), "field tenant not found") {
		t.Errorf("unknown key: %v", err)
	}
	os.WriteFile(tokens, []byte("tenants:\n  acme: []\n"), 0o600)
	if _, err := config.Load(nil, write(t, "server: {tokensFile: "+tokens+"}\n")); err == nil || !strings.Contains(err.Error(), "tenants::acme: no tokens") {
		t.Errorf("no tokens: %v", err)
	}
	if _, err := config.Load(nil, write(t, "server: {tokensFile: "+filepath.Join(dir, "none")+"}\n")); err == nil ||
		!strings.Contains(err.Error(), "config: server.tokensFile: open ") {
		t.Errorf("missing file: %v", err)
	}
}

// Bad kube settings are errors naming the key, on the kube backend only.
func TestKubeErrors(t *testing.T) {
	for body, want := range map[string]string{
		"backend: kube\n": "config: kube.agentImage: required",
		"backend: kube\nkube: {agentImage: x, namespace: Bad_NS}\n":                  `config: kube.namespace "Bad_NS"`,
		"backend: kube\nkube: {agentImage: x, release: ../x}\n":                      "config: kube.release",
		"backend: kube\nkube: {agentImage: x, podSecurity: privileged}\n":            `config: kube.podSecurity "privileged"`,
		"backend: kube\nkube: {agentImage: x, runtimeClasses: {kata: k}}\n":          `config: kube.runtimeClasses: "kata"`,
		"backend: kube\nkube: {agentImage: x}\nsandbox: {owner: me}\n":               "config: sandbox.owner: not used by the kube backend",
		"backend: kube\nkube: {agentImage: x, imagePullPolicy: Sometimes}\n":         `config: kube.imagePullPolicy "Sometimes"`,
		"backend: kube\nkube: {agentImage: x, serverSelector: {app: \"a b\"}}\n":     "config: kube.serverSelector",
		"backend: kube\nkube: {agentImage: x, agentPort: 0, cpuRequestRatio: 1.5}\n": "config: kube.cpuRequestRatio 1.5",
		"backend: kube\nkube: {agentImage: x, qps: 0}\n":                             "config: kube.qps 0 and kube.burst 400: both must be positive",
	} {
		if _, err := config.Load(nil, write(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
	if _, err := config.Load(nil, write(t, "backend: docker\nkube: {namespace: Bad_NS}\n")); err != nil {
		t.Errorf("kube settings are checked on the kube backend only: %v", err)
	}
}

// The client's own variables (SHELLBOX_SERVER, SHELLBOX_TOKEN) are no
// server configuration: `serve` in the shell of a client loads as
// without them. Only the keys' own variables are read.
func TestClientEnv(t *testing.T) {
	t.Setenv("SHELLBOX_SERVER", "http://127.0.0.1:8080")
	t.Setenv("SHELLBOX_TOKEN", "sbx_secret")
	for _, section := range []string{"SHELLBOX_LIMITS", "SHELLBOX_SANDBOX", "SHELLBOX_KUBE", "SHELLBOX_AUDIT"} {
		t.Setenv(section, "x") // a section is no key: nothing reads it
	}
	t.Setenv("SHELLBOX_SERVER_LOGLEVEL", "debug")
	t.Setenv("SHELLBOX_LIMITS_TAILBYTES", "1234")
	cfg, err := config.Load(nil, write(t, "backend: local\n"))
	if err != nil {
		t.Fatalf("load with the client's variables set: %v", err)
	}
	if cfg.Server.LogLevel != "debug" || cfg.Server.Listen != "127.0.0.1:8080" || cfg.Limits.TailBytes != 1234 {
		t.Errorf("server %+v, limits %+v: want the keys' own variables applied", cfg.Server, cfg.Limits)
	}
	if _, err := config.Defaults(); err != nil {
		t.Errorf("defaults with the client's variables set: %v", err)
	}
	bindings := config.EnvBindings()
	for _, name := range config.ClientEnv {
		if key, ok := bindings[name]; ok {
			t.Errorf("client variable %s sets key %s", name, key)
		}
	}
	if bindings["SHELLBOX_CONTAINERD_ADDRESS"] != "containerd.address" || bindings["SHELLBOX_SERVER_LOGLEVEL"] != "server.logLevel" || len(bindings) < 40 {
		t.Errorf("bindings: %v", bindings)
	}
}

// No backend configured is auto (cmd/shellbox probes the engines); a
// file, SHELLBOX_BACKEND or a flag names one, local included.
func TestBackendDefault(t *testing.T) {
	t.Setenv("SHELLBOX_BACKEND", "")
	os.Unsetenv("SHELLBOX_BACKEND")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Chdir(t.TempDir())
	cfg, err := config.Load(nil, "")
	if err != nil || cfg.Backend != config.BackendAuto {
		t.Fatalf("no backend configured: %q, %v", cfg.Backend, err)
	}
	if cfg, err := config.Load(nil, write(t, "backend: containerd\n")); err != nil || cfg.Backend != "containerd" {
		t.Errorf("backend in the file: %q, %v", cfg.Backend, err)
	}
	t.Setenv("SHELLBOX_BACKEND", "local")
	if cfg, err := config.Load(nil, write(t, "backend: containerd\n")); err != nil || cfg.Backend != "local" {
		t.Errorf("SHELLBOX_BACKEND over the file: %q, %v", cfg.Backend, err)
	}
}
