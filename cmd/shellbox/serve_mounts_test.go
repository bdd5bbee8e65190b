package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
)

// TestServeMounts: `shellbox serve` with a policy, through REST session
// creation. A session created without mounts gets the policy's, and sees
// the policy's env; one that asks gets exactly what it asked for, read-only
// enforced; requests outside the allowlist are refused with the policy key;
// and after a restart the re-adopted sandbox keeps its mounts.
func TestServeMounts(t *testing.T) {
	requireEngine(t)
	data, scratch, secret := dockertest.MountDir(t, 0, 0), dockertest.MountDir(t, 1000, 1000), dockertest.MountDir(t, 0, 0)
	if err := os.Mkdir(filepath.Join(data, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(data, "hello"), []byte("from the host\n"), 0o644)
	os.WriteFile(filepath.Join(data, "sub", "f"), []byte("below\n"), 0o644)
	if err := os.Symlink(secret, filepath.Join(data, "out")); err != nil {
		t.Fatal(err)
	}
	pols := t.TempDir()
	os.WriteFile(filepath.Join(pols, dockerTenant+".yaml"), []byte(fmt.Sprintf(`default: allow
env:
  GREETING: hello from the policy
sandbox:
  images: [%s]
  mounts:
    - {source: %s, target: /data}
    - {source: %s, target: /scratch, readOnly: false}
`, dockertest.Image, data, scratch)), 0o644)
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`backend: docker
policies:
  dir: %s
audit:
  file: %s
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  agent: %s
  labels:
    %s: "1"
server:
  tenants:
    %s:
      tokens: [%q]
`, pols, filepath.Join(t.TempDir(), "audit.log"), dockertest.StateDir(t), dockertest.Owner(t), dockertest.Image,
		dockertest.Agent(t), dockertest.LabelTest, dockerTenant, server.HashToken(testToken))), 0o644)
	removeSandboxesAtEnd(t, cfg, dockerTenant, "dflt", "req")

	s := startServe(t, cfg)
	c := client.New(s.url, testToken, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bash := func(c *client.Client, session, command string) string {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"command": command, "description": "mount test"})
		res, err := c.Call(ctx, session, "bash", args)
		if err != nil {
			t.Fatalf("call %q: %v", command, err)
		}
		return res.Text
	}
	yes, no := true, false
	mounts := func(ms []server.Mount) string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%s:%s:ro=%v", m.Source, m.Target, m.ReadOnly != nil && *m.ReadOnly))
		}
		return strings.Join(out, " ")
	}

	// No mounts asked for: the policy's, as listed.
	si, err := c.CreateSession(ctx, "dflt", server.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mounts(si.Mounts), fmt.Sprintf("%s:/data:ro=true %s:/scratch:ro=false", data, scratch); got != want {
		t.Errorf("default mounts %s, want %s", got, want)
	}
	if got := bash(c, "dflt", `cat /data/hello; echo "$GREETING|$DSH_SESSION_ID"`); got != "from the host\nhello from the policy|dflt" {
		t.Errorf("default session: %q", got)
	}

	// Asked for: exactly those. A directory below an entry lands below the
	// entry's target; the read-write one at its own target.
	si, err = c.CreateSession(ctx, "req", server.SessionOptions{Mounts: []server.Mount{
		{Source: filepath.Join(data, "sub")},
		{Source: scratch, Target: "/out", ReadOnly: &no},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mounts(si.Mounts), fmt.Sprintf("%s/sub:/data/sub:ro=true %s:/out:ro=false", data, scratch); got != want {
		t.Errorf("requested mounts %s, want %s", got, want)
	}
	got := bash(c, "req", "cat /data/sub/f; ls /data; test -e /scratch || echo no scratch; echo written > /out/x; echo no > /data/sub/y")
	if !strings.HasPrefix(got, "below\nsub\nno scratch\n[stderr]\n") || !strings.Contains(got, "/data/sub/y: Read-only file system") {
		t.Errorf("requested session: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(scratch, "x")); err != nil || string(b) != "written\n" {
		t.Errorf("the host sees %q, %v", b, err)
	}

	// Outside the allowlist: refused, naming why; nothing is created.
	for _, c2 := range []struct {
		mount  server.Mount
		status int
		want   string
	}{
		{server.Mount{Source: secret}, 403, "mounts[0]: source " + secret + " is not a directory policy " + dockerTenant + " allows"},
		{server.Mount{Source: filepath.Join(data, "out")}, 403, "mounts[0]: source " + data + "/out is not a directory policy " + dockerTenant + " allows, symlinks resolved"},
		{server.Mount{Source: data + "/../" + filepath.Base(secret)}, 403, "mounts[0]: source " + data + "/../" + filepath.Base(secret) + " is not a directory policy " + dockerTenant + " allows"},
		{server.Mount{Source: data, ReadOnly: &no}, 403, "mounts[0]: " + data + " may only be mounted read-only: policy " + dockerTenant + " has sandbox.mounts[0]"},
		{server.Mount{Source: data, Target: "/workspace/data", ReadOnly: &yes}, 400, `mounts[0]: target "/workspace/data" overlaps /workspace`},
		{server.Mount{Source: "data"}, 400, `mounts[0]: source "data" must be an absolute host path`},
	} {
		_, err := c.CreateSession(ctx, "refused", server.SessionOptions{Mounts: []server.Mount{c2.mount}})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != c2.status || !strings.Contains(ce.Message, c2.want) {
			t.Errorf("mount %+v: %v, want %d with %q", c2.mount, err, c2.status, c2.want)
		}
	}
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("sessions: %+v, %v", list, err)
	}

	// A restarted server adopts the sandboxes with their mounts.
	s.stop()
	s = startServe(t, cfg)
	c = client.New(s.url, testToken, nil)
	list, err = c.Sessions(ctx)
	i := slices.IndexFunc(list, func(si server.SessionInfo) bool { return si.ID == "req" })
	if err != nil || i < 0 || mounts(list[i].Mounts) != fmt.Sprintf("%s/sub:/data/sub:ro=true %s:/out:ro=false", data, scratch) {
		t.Fatalf("sessions after restart: %+v, %v", list, err)
	}
	if got := bash(c, "req", "cat /data/sub/f /out/x"); got != "below\nwritten" {
		t.Errorf("after restart: %q", got)
	}
	for _, s := range []string{"dflt", "req"} {
		if err := c.DeleteSession(ctx, s); err != nil {
			t.Error(err)
		}
	}
}

// TestServeMountsNeedPolicy: a server without policies has no allowlist,
// so a session asking for mounts is refused (asking for none is fine).
func TestServeMountsNeedPolicy(t *testing.T) {
	_, s := testServe(t, "docker")
	c := client.New(s.URL, servertest.TokenAcme, nil)
	_, err := c.CreateSession(context.Background(), "m", server.SessionOptions{Mounts: []server.Mount{{Source: "/srv"}}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 403 || ce.Code != "not_allowed" || !strings.Contains(ce.Message, "mounts need an allowlist, and this server has none: set policies.dir") {
		t.Errorf("mounts without policies: %v", err)
	}
	if list, err := c.Sessions(context.Background()); err != nil || len(list) != 0 {
		t.Errorf("sessions: %+v, %v", list, err)
	}
}
