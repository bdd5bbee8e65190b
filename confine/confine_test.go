package confine

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckID(t *testing.T) {
	for _, id := range []string{"a", "acme", "ci-agent.2", "user@example.com", "ns:team_1", strings.Repeat("a", MaxIDLen)} {
		if err := CheckID("tenant", id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for id, want := range map[string]string{
		"":                              "tenant: empty",
		"../etc":                        `tenant: "../etc": only letters, digits and ._@:- allowed, starting with a letter or digit`,
		"-x":                            `tenant: "-x": only letters`,
		"a b":                           `tenant: "a b": only letters`,
		"a/b":                           `tenant: "a/b": only letters`,
		strings.Repeat("a", MaxIDLen+1): "tenant: \"" + strings.Repeat("a", MaxIDLen+1) + "\": longer than 64 bytes",
	} {
		if err := CheckID("tenant", id); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", id, err, want)
		}
	}
}

func TestCheckRuntime(t *testing.T) {
	if CheckRuntime(RuntimeRunc) != nil || CheckRuntime(RuntimeRunsc) != nil {
		t.Error("a known runtime refused")
	}
	if err := CheckRuntime("kata"); err == nil || err.Error() != `"kata": must be "runc" or "runsc"` {
		t.Errorf("kata: %v", err)
	}
}

func TestCheckMountTarget(t *testing.T) {
	for _, ok := range []string{"/data", "/opt/x", "/etc/app", "/runner", "/workspaces"} {
		if err := CheckMountTarget(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for target, want := range map[string]string{
		"data":          `target "data" must be an absolute path`,
		"/a/../b":       `target "/a/../b" is not clean (/b)`,
		"/a\x00":        "contains a NUL byte",
		"/":             `target "/" overlaps /.shellbox`,
		"/workspace/x":  "overlaps /workspace, which shellbox or the engine manages in every sandbox",
		"/run":          "overlaps /run/shellbox",
		"/etc":          "overlaps /etc/hosts",
		"/proc/sys":     "overlaps /proc",
		"/.shellbox/id": "overlaps /.shellbox",
	} {
		if err := CheckMountTarget(target); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", target, err, want)
		}
	}
	if !Overlaps("/a", "/a/b") || !Overlaps("/a/b", "/a") || !Overlaps("/a", "/a") || Overlaps("/a", "/ab") || !Overlaps("/", "/x") {
		t.Error("Overlaps")
	}
}

// CheckMemory is every runtime's rule: docker and containerd charge the
// workspace and /tmp to memory, kube's pods the spill volume too.
func TestCheckMemory(t *testing.T) {
	r := DefaultResources()
	r.MemoryBytes = r.WorkspaceBytes + r.TmpBytes + r.SpillBytes
	if err := r.CheckMemory(BackingHost); err != nil {
		t.Errorf("host: %v", err)
	}
	err := r.CheckMemory(BackingPod)
	var me *MemoryError
	if !errors.As(err, &me) || me.Sum != r.MemoryBytes || len(me.Parts) != 3 ||
		err.Error() != "memoryBytes 738197504 must exceed workspaceBytes + tmpBytes + spillBytes (536870912 + 134217728 + 67108864 = 738197504 bytes) on "+BackingPod.String() {
		t.Errorf("pod: %v", err)
	}
	r.MemoryBytes = r.WorkspaceBytes + r.TmpBytes
	if err := r.CheckMemory(BackingHost); err == nil || !strings.Contains(err.Error(), "workspaceBytes + tmpBytes (536870912 + 134217728 = 671088640 bytes)") {
		t.Errorf("host: %v", err)
	}
}
