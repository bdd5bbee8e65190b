package agent

import (
	"slices"
	"testing"
)

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
