package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
)

// TestFilesPolicyREST: the local backend's transfers through the server,
// decided by the tenant's files rules, capped by its files.maxBytes, and
// audited.
func TestFilesPolicyREST(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(`default: allow
files:
  maxBytes: 1KiB
  read:
    deny: ["*.pem"]
  write:
    allow: ["`+root+`/acme/in/*"]
`), 0o644)
	audit, err := policies.OpenAudit(filepath.Join(dir, "audit.log"), policies.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	e, err := policies.Open(dir, policies.Options{NoWatch: true, NoApprover: true, Audit: audit})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, err := New(Config{Local: LocalConfig{Root: root, SpillDir: filepath.Join(dir, "spill"), Cgroup: "off"}, Policies: e})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	srv := servertest.Start(t, l, nil)
	c := client.New(srv.URL, servertest.TokenAcme, nil)
	ctx := context.Background()

	if _, err := c.PutFile(ctx, "s1", "in/key.pem", strings.NewReader("secret"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "acme/in/key.pem")); string(b) != "secret" {
		t.Errorf("uploaded %q", b)
	}
	check := func(err error, status int, code string, parts ...string) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != status || ce.Code != code {
			t.Fatalf("%v, want %d %s", err, status, code)
		}
		for _, p := range parts {
			if !strings.Contains(ce.Message, p) {
				t.Errorf("%q does not name %q", ce.Message, p)
			}
		}
	}
	_, err = c.PutFile(ctx, "s1", "elsewhere", strings.NewReader("x"), client.PutOptions{})
	check(err, 403, "not_allowed", root+"/acme/elsewhere", "files.write.allow")
	_, _, err = c.GetFile(ctx, "s1", "in/key.pem", false)
	check(err, 403, "not_allowed", "in/key.pem", `files.read.deny[0] "*.pem"`)
	_, err = c.PutFile(ctx, "s1", "in/big", strings.NewReader(strings.Repeat("x", 1025)), client.PutOptions{})
	check(err, 413, "too_large", "in/big", "1024 bytes")
	_, err = c.PutFile(ctx, "s1", "in/big", strings.NewReader(strings.Repeat("x", 1025)), client.PutOptions{Size: 1025})
	check(err, 413, "too_large", "in/big", "1024 bytes")
	if _, err := os.Stat(filepath.Join(root, "acme/in/big")); err == nil {
		t.Error("the upload over the cap is there")
	}

	recs, _, err := policies.ReadAudit(filepath.Join(dir, "audit.log"), 10, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Tool+" "+string(r.Decision)+" "+strings.TrimPrefix(r.Command, root+"/acme/"))
	}
	want := "files.put allow in/key.pem|files.put deny elsewhere|files.get deny in/key.pem|files.put allow in/big|files.put allow in/big"
	if strings.Join(got, "|") != want {
		t.Errorf("audit:\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "s1" {
		t.Errorf("sessions: %+v, %v", list, err)
	}
}

// A planted symlink cannot carry a transfer past the files rules (found by
// an attack review: "env -> .env" read a denied file, "g -> .git" wrote a
// hook): with rules, a transfer's path may not go through a link.
func TestFilesRulesSeeThroughNoSymlink(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(`default: allow
files:
  read:
    deny: ["*/.env"]
  write:
    deny: ["*/.git/*"]
`), 0o644)
	e, err := policies.Open(dir, policies.Options{NoWatch: true, NoApprover: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, err := New(Config{Local: LocalConfig{Root: root, SpillDir: filepath.Join(dir, "spill"), Cgroup: "off"}, Policies: e})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	ws := filepath.Join(root, "acme")
	os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
	os.WriteFile(filepath.Join(ws, ".env"), []byte("AWS_SECRET=hunter2\n"), 0o644)
	os.Symlink(".env", filepath.Join(ws, "env"))
	os.Symlink(".git", filepath.Join(ws, "g"))

	if _, _, err := l.GetFile(ctx, "acme", "s1", ".env", false); err == nil {
		t.Fatal("the denied file itself was read")
	}
	if _, body, err := l.GetFile(ctx, "acme", "s1", "env", false); err == nil {
		body.Close()
		t.Fatal("a denied file was read through a symlink")
	} else if !strings.Contains(err.Error(), "goes through the symlink") {
		t.Errorf("read through a link: %v", err)
	}
	_, err = l.PutFile(ctx, "acme", "s1", "g/hooks/pre-commit", strings.NewReader("#!/bin/sh\nevil\n"), server.PutFileOptions{Size: -1})
	if err == nil || !strings.Contains(err.Error(), "goes through the symlink") {
		t.Errorf("write through a link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "hooks", "pre-commit")); err == nil {
		t.Error("a hook was written through the link")
	}
	// A hard link is the denied file under another name: it is not read
	// either (found by the second attack review: "ln .env notenv").
	if err := os.Link(filepath.Join(ws, ".env"), filepath.Join(ws, "notenv")); err != nil {
		t.Fatal(err)
	}
	if _, body, err := l.GetFile(ctx, "acme", "s1", "notenv", false); err == nil {
		body.Close()
		t.Fatal("a denied file was read through a hard link")
	} else if !strings.Contains(err.Error(), "has 2 links") {
		t.Errorf("read through a hard link: %v", err)
	}
	if _, body, err := l.GetFile(ctx, "acme", "s1", "notenv", true); err == nil {
		body.Close()
		t.Fatal("a denied file was read through a hard link, as a tar")
	}
	// Paths without links are decided and served as before.
	if _, err := l.PutFile(ctx, "acme", "s1", "notes.txt", strings.NewReader("ok"), server.PutFileOptions{Size: -1}); err != nil {
		t.Errorf("a plain upload: %v", err)
	}
}
