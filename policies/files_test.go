package policies

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFilesSection(t *testing.T) {
	p, err := Parse("/p/acme.yaml", []byte(`files:
  maxBytes: 10MiB
  read:
    deny: ["*.pem", /workspace/.env]
  write:
    allow: ["/workspace/in/*", /workspace/out]
    deny: ["*/.git/*"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Files.MaxBytes != 10<<20 || p.Files.MaxEntries != DefaultFileMaxEntries {
		t.Errorf("caps %+v", p.Files)
	}
	for _, c := range []struct {
		write bool
		path  string
		ok    bool
		rule  string
	}{
		{false, "/workspace/a/key.pem", false, "files.read.deny[0]"},
		{false, "/workspace/.env", false, "files.read.deny[1]"},
		{false, "/workspace/a/b", true, "files"},
		{true, "/workspace/in/x/y", true, "files.write.allow[0]"},
		{true, "/workspace/out", true, "files.write.allow[1]"},
		{true, "/workspace/in/.git/config", false, "files.write.deny[0]"},
		{true, "/workspace/elsewhere", false, "files.write.allow"},
		{true, "/workspace/in/../elsewhere", false, "files.write.allow"},
	} {
		d := p.Files.FileAccess(c.write, c.path)
		if d.Allowed != c.ok || d.Rule != c.rule {
			t.Errorf("write=%v %s: %+v, want allowed=%v rule %s", c.write, c.path, d, c.ok, c.rule)
		}
		if !d.Allowed && !strings.Contains(d.Reason, filepath.Clean(c.path)) {
			t.Errorf("reason %q does not name the path", d.Reason)
		}
	}
	// Without the section: everything, 1 GiB.
	p, err = Parse("/p/acme.yaml", []byte("default: allow\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Files.FileAccess(true, "/workspace/x"); !d.Allowed || p.Files.MaxBytes != 1<<30 {
		t.Errorf("default: %+v, %d", d, p.Files.MaxBytes)
	}
	// Mistakes are named with their lines.
	_, err = Parse("/p/acme.yaml", []byte("files:\n  maxBytes: lots\n  write:\n    deny: [relative/x, \"/a[\"]\n  bogus: 1\n"))
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("want a LoadError, got %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "bogus") {
		t.Errorf("unknown key not named: %s", msg)
	}
	_, err = Parse("/p/acme.yaml", []byte("files:\n  write:\n    deny: [relative/x, \"/a[\"]\n"))
	if err == nil || !strings.Contains(err.Error(), "acme.yaml:3") || !strings.Contains(err.Error(), "files.write.deny[0]") || !strings.Contains(err.Error(), "files.write.deny[1]") {
		t.Errorf("bad patterns: %v", err)
	}
}

func TestAuditFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte("files:\n  write:\n    deny: [\"*.pem\"]\n"), 0o644)
	a, err := OpenAudit(filepath.Join(dir, "audit.log"), AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	e, err := Open(dir, Options{Audit: a, NoWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, _ := e.Policy("acme")
	for _, c := range []struct {
		write bool
		path  string
	}{{true, "/workspace/a"}, {true, "/workspace/k.pem"}, {false, "/workspace/a"}} {
		if err := e.AuditFile("acme", "s1", c.write, c.path, p.Files.FileAccess(c.write, c.path)); err != nil {
			t.Fatal(err)
		}
	}
	recs, _, err := ReadAudit(filepath.Join(dir, "audit.log"), 10, "acme")
	if err != nil {
		t.Fatal(err)
	}
	// Writes both ways; the allowed read is not audited.
	if len(recs) != 2 || recs[0].Tool != "files.put" || recs[0].Decision != Allow || recs[0].Command != "/workspace/a" ||
		recs[1].Decision != Deny || recs[1].Rule != "files.write.deny[0]" {
		t.Errorf("audit: %+v", recs)
	}
}
