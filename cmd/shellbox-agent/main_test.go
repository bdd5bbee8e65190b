package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	// The restart-survival test runs this binary as a throw-away "server"
	// that it kills with SIGKILL (see helperMain).
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	code := m.Run()
	cleanupAgentBuild()
	os.Exit(code)
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"-version"}, &out); code != 0 || !strings.HasPrefix(out.String(), "shellbox-agent ") || !strings.Contains(out.String(), "protocol 1") {
		t.Errorf("-version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"extra"}, &out); code != 2 || !strings.Contains(out.String(), "unexpected arguments") {
		t.Errorf("extra argument: %d %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"--no-such-flag"}, &out); code != 2 {
		t.Errorf("unknown flag: %d %q", code, out.String())
	}
}
