package containerd

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shellbox/shellbox/agent"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostdir"
)

// TestHookNamesMatchTheAgent: the modes, signals and state file this
// runtime uses are the agent's.
func TestHookNamesMatchTheAgent(t *testing.T) {
	if hookSave != agent.HookSave || hookRestore != agent.HookRestore || hookResume != agent.HookResume ||
		stateClosed != agent.StateClosed || stateListening != agent.StateListening ||
		syscall.SIGUSR1 != agent.SigCloseHost || syscall.SIGUSR2 != agent.SigListenHost {
		t.Error("the checkpoint hook's names differ from agent/checkpoint.go's")
	}
	if got, want := agentStateFile("/d"), agent.StateFile(hostdir.SocketPath("/d")); got != want {
		t.Errorf("state file %q, the agent's %q", got, want)
	}
	dir := t.TempDir()
	if err := os.WriteFile(agentStateFile(dir), []byte("closed 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, seq := readAgentState(agentStateFile(dir)); st != stateClosed || seq != 7 {
		t.Errorf("readAgentState: %q %d", st, seq)
	}
}

// TestWrapper writes the wrapper from a runsc.toml whose binary echoes its
// arguments, and runs it as the runc shim runs runc for a checkpoint: the
// toml's flags come first, the CRIU-only flags are gone, the rest is kept
// in order, arguments with spaces whole.
func TestWrapper(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake-runsc")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nfor a do echo \"[$a]\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	toml := filepath.Join(dir, "runsc.toml")
	if err := os.WriteFile(toml, []byte(`binary_name = "`+fake+`"
root = "/run/x/runsc"
[runsc_config]
  platform = "systrap"
  network = "none"
  host-uds = "create"
  oci-seccomp = "true"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{StateDir: dir, RuntimeConfigs: map[string]string{sandbox.RuntimeRunsc: toml}}
	s, err := setUpCheckpoint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.root != "/run/x/runsc" || s.wrapper != filepath.Join(dir, "checkpoint", "runsc") {
		t.Errorf("setup: root %q wrapper %q", s.root, s.wrapper)
	}
	out, err := exec.Command(s.wrapper, "--root", "/r", "--log", "/l", "checkpoint", "--image-path", "/i",
		"--work-path", "/w", "--leave-running", "--file-locks", "--tcp-established", "--ext-unix-sk", "--shell-job", "a b", "id").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "[--host-uds=create] [--network=none] [--oci-seccomp=true] [--platform=systrap] [--root] [/r] [--log] [/l] [checkpoint] [--image-path] [/i] [--work-path] [/w] [--leave-running] [a b] [id]"
	if got := strings.Join(strings.Fields(strings.ReplaceAll(string(out), "\n", " ")), " "); got != want {
		t.Errorf("wrapper ran runsc with\n%s\nwant\n%s", got, want)
	}
	out, err = exec.Command(s.wrapper, "--root", "/r", "delete", "id").Output()
	if got := strings.Join(strings.Fields(string(out)), " "); err != nil || !strings.HasSuffix(got, "[--root] [/r] [delete] [--force] [id]") {
		t.Errorf("delete: %q, %v; want it forced", got, err)
	}
	if out, err = exec.Command(s.wrapper, "restore", "--image-path", "/i", "id").Output(); err != nil || strings.Contains(string(out), "--background") {
		t.Errorf("restore: %q, %v; want no --background unless asked", out, err)
	}
	cfg.RestoreBackground = true
	if s, err = setUpCheckpoint(cfg); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(s.wrapper, "--root", "/r", "restore", "--image-path", "/i", "id").Output()
	if got := strings.Join(strings.Fields(string(out)), " "); err != nil || !strings.HasSuffix(got, "[--root] [/r] [restore] [--background] [--image-path] [/i] [id]") {
		t.Errorf("restore with RestoreBackground: %q, %v; want --background after restore", got, err)
	}
}

func TestRunscConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"no host-uds": "binary_name = \"/bin/true\"\nroot = \"/r\"\n[runsc_config]\n  network = \"none\"\n",
		"no root":     "binary_name = \"/bin/true\"\n[runsc_config]\n  host-uds = \"create\"\n",
		"quote":       "binary_name = \"/bin/true\"\nroot = \"/r\"\n[runsc_config]\n  host-uds = \"create\"\n  x = \"a'b\"\n",
		"not toml":    "[[[",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".toml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readRunscConfig(p); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := setUpCheckpoint(Config{StateDir: dir}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("no runsc.toml: %v", err)
	}
}

// TestImageTar: an image directory goes out as a tar and comes back
// whole; a tar with a link, or over the bound, is refused.
func TestImageTar(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "runsc"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "runsc", "pages.img"), bytes.Repeat([]byte("x"), 100000), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "shellbox.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := writeTar(&b, src); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := readTar(bytes.NewReader(b.Bytes()), dst, 1<<20); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dst, "runsc", "pages.img"))
	if err != nil || len(got) != 100000 {
		t.Errorf("pages.img back: %d bytes, %v", len(got), err)
	}
	if _, err := readTar(bytes.NewReader(b.Bytes()), t.TempDir(), 1000); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "more than 1000 bytes") {
		t.Errorf("over the bound: %v", err)
	}
	// A stream that fails at its end (a store's check) fails the unpack.
	bad := io.MultiReader(bytes.NewReader(b.Bytes()), errReader{errCorrupt})
	if _, err := readTar(bad, t.TempDir(), 1<<20); !errors.Is(err, errCorrupt) {
		t.Errorf("a stream failing at its end: %v, want its error", err)
	}
}

var errCorrupt = errors.New("checksum")

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// TestCheckpointable: runc sandboxes, and runsc under gVisor's shim, say
// why they are not checkpointed.
func TestCheckpointable(t *testing.T) {
	r := &Runtime{}
	if why := r.checkpointable(sandbox.Sandbox{Runtime: sandbox.RuntimeRunc}); !strings.Contains(why, "runtime runc") {
		t.Errorf("runc: %q", why)
	}
	if why := r.checkpointable(sandbox.Sandbox{Runtime: sandbox.RuntimeRunsc}); !strings.Contains(why, "gVisor's shim") {
		t.Errorf("runsc without checkpoints: %q", why)
	}
	r.cr = &runscSetup{}
	if why := r.checkpointable(sandbox.Sandbox{Runtime: sandbox.RuntimeRunsc}); why != "" {
		t.Errorf("runsc with checkpoints: %q", why)
	}
}
