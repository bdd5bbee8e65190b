package session

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
	"github.com/shellbox/shellbox/server"
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

// What a session asked for is kept with its sandbox, so that another
// server process over the same sandboxes (a replica; this one after a
// restart) makes the session's next sandbox as it asked, and never from a
// stale memory of its own.
func TestSettingsFromTheSandbox(t *testing.T) {
	ctx := context.Background()
	choices := map[string]Choices{"acme": {Images: []string{"img:a", "img:b"}, Runtimes: []string{"runc", "runsc"}}}
	f := sandboxtest.NewFake()
	replica := func() *Service {
		l, err := New(Config{Runtime: f, Owner: "srv", Defaults: DefaultsFor("img:default"), Choices: choices,
			Ready: func(context.Context, sandbox.Sandbox) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(context.Background()) })
		return l
	}
	a, b := replica(), replica()
	if _, err := a.CreateSession(ctx, "acme", "s", server.SessionOptions{Image: "img:b", Runtime: "runsc"}); err != nil {
		t.Fatal(err)
	}
	spec, err := b.spec(ctx, "acme", "s")
	if err != nil || spec.Image != "img:b" || spec.Runtime != "runsc" {
		t.Fatalf("the other replica's spec: %+v, %v", spec, err)
	}
	if spec.Settings != `{"image":"img:b","runtime":"runsc","mounts":null}` {
		t.Errorf("record: %s", spec.Settings)
	}
	// The sandbox dies; the other replica replaces it as the session asked.
	f.Kill("acme", "s")
	if _, err := b.manager.Ensure(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if sb, err := f.Get(ctx, "acme", "s"); err != nil || sb.State != sandbox.StateRunning || sb.Image != "img:b" || sb.Settings != spec.Settings {
		t.Fatalf("the replacement: %+v, %v", sb, err)
	}
	// Deleted through b and made anew through b with other settings: a
	// answers from the sandbox, not from what it once was told.
	if err := b.DeleteSession(ctx, "acme", "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSession(ctx, "acme", "s", server.SessionOptions{Image: "img:a"}); err != nil {
		t.Fatal(err)
	}
	if spec, err := a.spec(ctx, "acme", "s"); err != nil || spec.Image != "img:a" || spec.Runtime != "runc" {
		t.Errorf("after it was made anew elsewhere: %+v, %v", spec, err)
	}
	// A session that asked for nothing keeps no record.
	if _, err := a.CreateSession(ctx, "acme", "plain", server.SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	if sb, _ := f.Get(ctx, "acme", "plain"); sb.Settings != "" {
		t.Errorf("a record without settings: %q", sb.Settings)
	}
	// A record nobody can read is a clear error, not a sandbox made up.
	f.Put(sandbox.Sandbox{Tenant: "acme", Session: "bad", Owner: "srv", State: sandbox.StateRunning, Settings: `{"image":`})
	_, err = b.spec(ctx, "acme", "bad")
	if !errors.Is(err, server.ErrUnavailable) || !strings.Contains(err.Error(), "the settings its sandbox") || !strings.Contains(err.Error(), "delete the session") {
		t.Errorf("unreadable record: %v", err)
	}
}
