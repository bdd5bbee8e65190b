package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHookCommand: `shellbox-agent checkpoint-hook` refuses stray
// arguments and a mode runsc never sets, and fails, saying so, when no
// agent answers on its socket.
func TestHookCommand(t *testing.T) {
	signal := func(syscall.Signal) error { return nil }
	var out bytes.Buffer
	if code := hook([]string{"extra"}, "save", signal, &out); code != 2 || !strings.Contains(out.String(), "unexpected arguments") {
		t.Errorf("extra argument: %d %q", code, out.String())
	}
	out.Reset()
	if code := hook(nil, "pause", signal, &out); code != 1 || !strings.Contains(out.String(), `mode "pause"`) {
		t.Errorf("bad mode: %d %q", code, out.String())
	}
	out.Reset()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	if code := hook([]string{"--socket", sock, "--timeout", "50ms"}, "save", signal, &out); code != 1 || !strings.Contains(out.String(), "did not answer") {
		t.Errorf("no agent: %d %q", code, out.String())
	}
	if _, err := os.Stat(sock + ".state"); err == nil {
		t.Error("the hook wrote the agent's state file")
	}
}
