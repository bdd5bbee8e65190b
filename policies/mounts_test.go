package policies

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/confine"
)

// mountTree lays out a host tree for the allowlist tests and returns its
// (resolved) root:
//
//	data/           entry 0, read-only, at /data
//	  sub/  file  link-in -> data/sub  link-out -> secret  link-rw -> scratch/x
//	scratch/        entry 1, read-write, at /scratch
//	  x/  frozen/   entry 2, read-only, at /frozen (inside a read-write entry)
//	shared/         entry 3 is alias -> shared, read-only, at /shared
//	secret/         allowed by nothing
func mountTree(t *testing.T) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"data/sub", "scratch/x", "scratch/frozen", "shared/y", "secret"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "data/file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{
		"data/link-in": "sub", "data/link-out": "../secret", "data/link-rw": "../scratch/x", "alias": "shared",
	} {
		if err := os.Symlink(to, filepath.Join(base, link)); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

func mountPolicy(t *testing.T, base string) *Policy {
	t.Helper()
	p, err := Parse("/p/acme.yaml", []byte(fmt.Sprintf(`sandbox:
  mounts:
    - {source: %[1]s/data, target: /data}
    - {source: %[1]s/scratch, target: /scratch, readOnly: false}
    - {source: %[1]s/scratch/frozen/, target: /frozen, readOnly: true}
    - {source: %[1]s/alias, target: /shared}
`, base)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A session without a mounts list gets every entry as listed, sources
// resolved; an empty list gets none.
func TestSessionMountsDefault(t *testing.T) {
	base := mountTree(t)
	p := mountPolicy(t, base)
	got, err := p.SessionMounts(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Each is its own entry (Root: what the sandbox opens it beneath).
	want := []Mount{
		{Source: base + "/data", Target: "/data", ReadOnly: true, Root: base + "/data"},
		{Source: base + "/scratch", Target: "/scratch", ReadOnly: false, Root: base + "/scratch"},
		{Source: base + "/scratch/frozen", Target: "/frozen", ReadOnly: true, Root: base + "/scratch/frozen"},
		{Source: base + "/shared", Target: "/shared", ReadOnly: true, Root: base + "/shared"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("default mounts\n%+v\nwant\n%+v", got, want)
	}
	if got, err := p.SessionMounts([]MountRequest{}); err != nil || got == nil || len(got) != 0 {
		t.Errorf("an empty request: %+v, %v; want none", got, err)
	}
	// An entry whose directory is gone fails the session, naming the key.
	if err := os.Remove(filepath.Join(base, "alias")); err != nil {
		t.Fatal(err)
	}
	_, err = p.SessionMounts(nil)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "policy acme: sandbox.mounts[3].source: lstat "+base+"/alias: no such file or directory") {
		t.Errorf("missing entry: %v", err)
	}
}

func TestSessionMountsRequested(t *testing.T) {
	base := mountTree(t)
	p := mountPolicy(t, base)
	ro := func(src, tgt string) MountRequest {
		return MountRequest{Source: base + "/" + src, Target: tgt, ReadOnly: true}
	}
	rw := func(src, tgt string) MountRequest { return MountRequest{Source: base + "/" + src, Target: tgt} }
	// Root: the resolved source of the entry that allowed it, the
	// directory the sandbox opens the source beneath.
	m := func(src, tgt string, ro bool) Mount {
		return Mount{Source: base + "/" + src, Target: tgt, ReadOnly: ro, Root: base + "/" + strings.SplitN(src, "/", 2)[0]}
	}
	good := []struct {
		name string
		req  MountRequest
		want Mount
	}{
		{"an entry", ro("data", ""), m("data", "/data", true)},
		{"below an entry", ro("data/sub", ""), m("data/sub", "/data/sub", true)},
		{"own target", ro("data/sub", "/opt/sub"), m("data/sub", "/opt/sub", true)},
		{"unclean source", ro("data/./sub/", ""), m("data/sub", "/data/sub", true)},
		{"read-write below a read-write entry", rw("scratch/x", ""), m("scratch/x", "/scratch/x", false)},
		{"read-only below a read-write entry", ro("scratch/x", ""), m("scratch/x", "/scratch/x", true)},
		{"a symlink that stays inside", ro("data/link-in", ""), m("data/sub", "/data/sub", true)},
		{"a symlink into another entry: that entry decides", rw("data/link-rw", ""), m("scratch/x", "/scratch/x", false)},
		{"an entry that is a symlink", ro("alias/y", ""), m("shared/y", "/shared/y", true)},
		{"the same, by its resolved path", ro("shared/y", ""), m("shared/y", "/shared/y", true)},
	}
	for _, c := range good {
		got, err := p.SessionMounts([]MountRequest{c.req})
		if err != nil || len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}

	bad := []struct {
		name  string
		req   []MountRequest
		class error
		want  string
	}{
		{"unknown source", []MountRequest{ro("secret", "")}, ErrNotAllowed,
			"mounts[0]: source " + base + "/secret is not a directory policy acme allows, symlinks resolved (sandbox.mounts sources: " + base + "/data, " + base + "/scratch, "},
		{"..", []MountRequest{ro("data/../secret", "")}, ErrNotAllowed, "mounts[0]: source " + base + "/data/../secret is not a directory policy acme allows"},
		{"symlink escape", []MountRequest{ro("data/link-out", "")}, ErrNotAllowed,
			"mounts[0]: source " + base + "/data/link-out is not a directory policy acme allows, symlinks resolved"},
		// What exists outside the allowlist is not told, whatever the path.
		{"symlink escape below", []MountRequest{ro("data/link-out/deeper", "")}, ErrNotAllowed,
			"mounts[0]: source " + base + "/data/link-out/deeper is not a directory policy acme allows"},
		{"host root", []MountRequest{{Source: "/", ReadOnly: true}}, ErrNotAllowed, "mounts[0]: source / is not a directory policy acme allows"},
		{"rw on ro", []MountRequest{rw("data/sub", "")}, ErrNotAllowed,
			"mounts[0]: " + base + "/data/sub may only be mounted read-only: policy acme has sandbox.mounts[0] (" + base + "/data) with readOnly: true"},
		{"rw on a ro entry inside a rw one", []MountRequest{rw("scratch/frozen", "")}, ErrNotAllowed, "policy acme has sandbox.mounts[2] (" + base + "/scratch/frozen) with readOnly: true"},
		{"missing", []MountRequest{ro("data/nope", "")}, ErrInvalid, "mounts[0]: source " + base + "/data/nope: lstat " + base + "/data/nope: no such file or directory"},
		{"a file", []MountRequest{ro("data/file", "")}, ErrInvalid, "mounts[0]: source " + base + "/data/file is not a directory"},
		{"relative", []MountRequest{{Source: "data", ReadOnly: true}}, ErrInvalid, `mounts[0]: source "data" must be an absolute host path`},
		{"reserved target", []MountRequest{ro("data", "/workspace/data")}, ErrInvalid,
			`mounts[0]: target "/workspace/data" overlaps /workspace, which shellbox or the engine manages in every sandbox`},
		{"relative target", []MountRequest{ro("data", "data")}, ErrInvalid, `mounts[0]: target "data" must be an absolute path`},
		{"unclean target", []MountRequest{ro("data", "/a/../b")}, ErrInvalid, `mounts[0]: target "/a/../b" is not clean (/b)`},
		{"overlap", []MountRequest{ro("data", "/in"), ro("data/sub", "/in/sub")}, ErrInvalid, "mounts[1]: target /in/sub overlaps the target /in of mounts[0]"},
		{"overlap by default target", []MountRequest{ro("data", ""), ro("data/sub", "")}, ErrInvalid, "mounts[1]: target /data/sub overlaps the target /data of mounts[0]"},
		{"too many", make([]MountRequest, confine.MaxMounts+1), ErrInvalid, "mounts: 33 requested: at most 32"},
	}
	for _, c := range bad {
		_, err := p.SessionMounts(c.req)
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %v with %q", c.name, err, c.class, c.want)
		}
	}

	none, err := Parse("/p/beta.yaml", []byte("default: allow\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.SessionMounts([]MountRequest{ro("data", "")}); !errors.Is(err, ErrNotAllowed) ||
		err.Error() != "mounts[0]: policy beta allows no mounts (sandbox.mounts is empty)" {
		t.Errorf("no allowlist: %v", err)
	}
	if got, err := none.SessionMounts(nil); err != nil || len(got) != 0 {
		t.Errorf("no allowlist, no request: %+v, %v", got, err)
	}
}

// sandbox.mounts is checked at load, with lines.
func TestLoadMountErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"sandbox:\n  mounts:\n    - {source: srv, target: /d}\n", `acme.yaml:3: sandbox.mounts[0].source: "srv" must be an absolute host path`},
		{"sandbox:\n  mounts:\n    - {source: /, target: /d}\n", `acme.yaml:3: sandbox.mounts[0].source: "/" is the whole host filesystem`},
		{"sandbox:\n  mounts:\n    - source: /srv\n      target: /workspace/x\n", `acme.yaml:4: sandbox.mounts[0].target: target "/workspace/x" overlaps /workspace`},
		{"sandbox:\n  mounts:\n    - {source: /srv, target: /run}\n", `acme.yaml:3: sandbox.mounts[0].target: target "/run" overlaps /run/shellbox`},
		{"sandbox:\n  mounts:\n    - {source: /srv, target: d}\n", `acme.yaml:3: sandbox.mounts[0].target: target "d" must be an absolute path`},
		{"sandbox:\n  mounts:\n    - {source: /a, target: /d}\n    - {source: /b, target: /d/e}\n",
			"acme.yaml:4: sandbox.mounts[1].target: /d/e overlaps sandbox.mounts[0].target /d (a session gets every entry)"},
		{"sandbox:\n  mounts:\n    - {source: /a, target: /d, readOnly: no}\n", "acme.yaml:3: sandbox.mounts[0].readOnly: expected true or false"},
	}
	for _, c := range cases {
		_, err := Parse("/p/acme.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), "/p/"+c.want) {
			t.Errorf("%q: %v\nwant %s", c.src, err, c.want)
		}
	}
	var many strings.Builder
	many.WriteString("sandbox:\n  mounts:\n")
	for i := range confine.MaxMounts + 1 {
		fmt.Fprintf(&many, "    - {source: /s%d, target: /t%d}\n", i, i)
	}
	if _, err := Parse("/p/acme.yaml", []byte(many.String())); err == nil || !strings.Contains(err.Error(), "/p/acme.yaml:2: sandbox.mounts: 33 mounts: at most 32") {
		t.Errorf("too many: %v", err)
	}
}
