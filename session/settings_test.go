package session

import (
	"slices"
	"testing"

	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
)

// Every setting of a policy reaches the spec, and its mounts unchanged.
func TestPolicyOptions(t *testing.T) {
	s := policies.SandboxSettings{Egress: true, Runtime: sandbox.RuntimeRunsc, CPUs: 0.5, MemoryBytes: 2 << 30, PidsLimit: 1024,
		DiskBytes: 256 << 20, TmpBytes: 64 << 20, SpillBytes: 128 << 20, User: policies.User{UID: 2000, GID: 2001}}
	mounts := []policies.Mount{{Source: "/srv/data", Target: "/data", ReadOnly: true}, {Source: "/srv/scratch", Target: "/scratch"}}
	opts := append(policyOptions(s), sandbox.WithMounts(sandboxMounts(mounts)...))
	spec, err := sandbox.NewSpec("acme", "s1", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Network != sandbox.NetworkEgress || spec.Runtime != "runsc" || spec.CPUs != 0.5 || spec.MemoryBytes != 2<<30 ||
		spec.PidsLimit != 1024 || spec.WorkspaceBytes != 256<<20 || spec.TmpBytes != 64<<20 || spec.SpillBytes != 128<<20 ||
		spec.UID != 2000 || spec.GID != 2001 {
		t.Errorf("spec = %+v", spec)
	}
	want := []sandbox.Mount{{Source: "/srv/data", Target: "/data", ReadOnly: true}, {Source: "/srv/scratch", Target: "/scratch"}}
	if !slices.Equal(spec.Mounts, want) {
		t.Errorf("mounts = %+v", spec.Mounts)
	}
	s.Egress = false
	if spec, err := sandbox.NewSpec("acme", "s1", policyOptions(s)...); err != nil || spec.Network != sandbox.NetworkNone {
		t.Errorf("without egress: network %q, %v", spec.Network, err)
	}
}
