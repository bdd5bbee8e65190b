package main

import (
	"bytes"
	"os"
	"slices"
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

func TestBaseEnv(t *testing.T) {
	got := baseEnv([]string{"PATH=/bin", "HOSTNAME=sandbox", "SHELLBOX_SPILL_BYTES=5", "HOME=/root", "DSH_HOME=/x", "junk"}, "/workspace")
	want := []string{"PATH=/bin", "HOSTNAME=sandbox", "LANG=C.UTF-8", "HOME=/workspace", "DSH_HOME=/workspace"}
	if !slices.Equal(got, want) {
		t.Errorf("baseEnv = %q, want %q", got, want)
	}
	got = baseEnv(nil, "/home/u")
	if !slices.Contains(got, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") || !slices.Contains(got, "HOME=/home/u") {
		t.Errorf("baseEnv(nil) = %q", got)
	}
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
