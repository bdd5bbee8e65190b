package secrets

import (
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTemplate(t *testing.T) {
	tp, err := ParseTemplate("Bearer ${secret:github-token} and ${secret:b.c_d} ${secret:github-token}")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tp.Secrets(), ","); got != "github-token,b.c_d" {
		t.Errorf("Secrets: %s", got)
	}
	if got := tp.String(); got != "Bearer ${secret:github-token} and ${secret:b.c_d} ${secret:github-token}" {
		t.Errorf("String: %s", got)
	}
	for in, want := range map[string]string{
		"Bearer ${secret:tok":      "without a closing }",
		"Bearer ${env:HOME}":       "the only reference is ${secret:NAME}",
		"Bearer ${secret:../etc}":  "is not a secret name",
		"Bearer ${secret:.hidden}": "is not a secret name",
		"Bearer ${secret:}":        "is not a secret name",
		"x\r\nEvil: ${secret:a}":   "control characters",
		"Bearer constant":          "references no secret",
		"":                         "references no secret",
		"${secret:a}${secret:a/b}": "is not a secret name",
		"${secret:" + strings.Repeat("a", 129) + "}": "is not a secret name",
	} {
		if _, err := ParseTemplate(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTemplate(%q): %v, want %q", in, err, want)
		}
	}
}

func TestStoreDirAndEnv(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"SHELLBOX_SECRET_FROM_ENV": "env-value", "SHELLBOX_SECRET_BOTH": "env-loses", "HOME": "/root"}
	s := NewStore(dir, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	write("both", "file-wins\n")
	write("tok", "v1\r\n")
	for name, want := range map[string]string{"from-env": "env-value", "both": "file-wins", "tok": "v1"} {
		if v, err := s.Secret(name); err != nil || v != want {
			t.Errorf("Secret(%s) = %q, %v; want %q", name, v, err, want)
		}
	}
	// A rotated file is read again (a new inode, as a Secret volume's
	// symlink swap makes, or a new size or time).
	write("tok.new", "v2-rotated")
	if err := os.Rename(filepath.Join(dir, "tok.new"), filepath.Join(dir, "tok")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Secret("tok"); err != nil || v != "v2-rotated" {
		t.Errorf("after rotation: %q, %v", v, err)
	}
	now := time.Now().Add(time.Hour)
	write("tok", "v3-same-size")
	os.Chtimes(filepath.Join(dir, "tok"), now, now)
	if v, err := s.Secret("tok"); err != nil || v != "v3-same-size" {
		t.Errorf("after rewrite: %q, %v", v, err)
	}
	// Removed: the environment's, if any, else not set.
	os.Remove(filepath.Join(dir, "both"))
	if v, _ := s.Secret("both"); v != "env-loses" {
		t.Errorf("after removal: %q", v)
	}
	// Only SHELLBOX_SECRET_* variables are secrets.
	if _, err := s.Secret("HOME"); !errors.Is(err, ErrNotSet) {
		t.Errorf("HOME: %v", err)
	}
	if _, err := s.Secret("../x"); !errors.Is(err, ErrNotSet) {
		t.Errorf("../x: %v", err)
	}
	_, err := s.Secret("missing")
	if !errors.Is(err, ErrNotSet) || !strings.Contains(err.Error(), "SHELLBOX_SECRET_MISSING") || !strings.Contains(err.Error(), filepath.Join(dir, "missing")) {
		t.Errorf("missing: %v", err)
	}
	// Values a header cannot carry are refused, and the error shows none
	// of the value.
	const hidden = "hunter2-very-secret"
	for name, v := range map[string]string{"crlf": hidden + "\r\nX-Evil: 1", "nul": hidden + "\x00", "big": hidden + strings.Repeat("x", MaxValueBytes)} {
		write(name, v)
		_, err := s.Secret(name)
		if err == nil || strings.Contains(err.Error(), hidden) {
			t.Errorf("%s: %v", name, err)
		}
	}
	write("empty", "\n")
	if _, err := s.Secret("empty"); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty: %v", err)
	}
	os.Mkdir(filepath.Join(dir, "adir"), 0o700)
	if _, err := s.Secret("adir"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}

func TestPlaceholders(t *testing.T) {
	p := NewPlaceholders([]byte("0123456789abcdef0123456789abcdef"))
	a := p.For("acme", "s1", "github")
	if !strings.HasPrefix(a, PlaceholderPrefix) || len(a) != len(PlaceholderPrefix)+26 || strings.ToLower(a) != a {
		t.Errorf("placeholder %q", a)
	}
	if a != p.For("acme", "s1", "github") {
		t.Error("not deterministic")
	}
	seen := map[string]bool{a: true}
	for _, o := range []string{p.For("acme", "s2", "github"), p.For("other", "s1", "github"), p.For("acme", "s1", "npm"),
		NewPlaceholders([]byte("another key of thirty-two bytes!")).For("acme", "s1", "github")} {
		if seen[o] {
			t.Errorf("placeholder %q repeats", o)
		}
		seen[o] = true
	}
	// The separator keeps ("a","b\x00c") and ("a\x00b","c") apart only if
	// names cannot hold NUL; they cannot (tenants and sessions are IDs), but
	// a shift between fields must not collide either.
	if p.For("ab", "c", "x") == p.For("a", "bc", "x") {
		t.Error("fields run together")
	}
}

type mapSource map[string]string

func (m mapSource) Secret(name string) (string, error) {
	if v, ok := m[name]; ok {
		return v, nil
	}
	return "", errors.New("secret " + name + ": " + ErrNotSet.Error())
}

func TestInjector(t *testing.T) {
	const ph = "sbx-ph-placeholder"
	src := mapSource{"tok": "s3cr3t"}
	mustTemplate := func(s string) Template {
		tp, err := ParseTemplate(s)
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }

	// A placeholder is replaced wherever a header carries it, also inside
	// Basic credentials (git's userinfo); nothing else changes.
	in := NewInjector(src, []Credential{{Name: "gh", Value: mustTemplate("${secret:tok}"), Placeholder: ph}})
	h := http.Header{"Authorization": {"Bearer " + ph}, "X-Other": {"keep " + ph + " too"}, "Accept": {"*/*"}}
	d, err := in.Rewrite(h)
	if err != nil {
		t.Fatal(err)
	}
	if h.Get("Authorization") != "Bearer s3cr3t" || h.Get("X-Other") != "keep s3cr3t too" || h.Get("Accept") != "*/*" || strings.Join(d.Names, ",") != "gh" {
		t.Errorf("bearer: %v %v", h, d.Names)
	}
	h = http.Header{"Authorization": {basic("x-access-token:" + ph)}}
	if _, err := in.Rewrite(h); err != nil || h.Get("Authorization") != basic("x-access-token:s3cr3t") {
		t.Errorf("basic: %v %v", h, err)
	}
	// No placeholder: nothing injected, nothing named.
	h = http.Header{"Authorization": {"Bearer mine"}}
	if d, err := in.Rewrite(h); err != nil || h.Get("Authorization") != "Bearer mine" || len(d.Names) != 0 {
		t.Errorf("no placeholder: %v %v %v", h, d.Names, err)
	}

	// A Header is set on every request, whatever the client sent.
	in = NewInjector(src, []Credential{{Name: "api", Header: "Authorization", Value: mustTemplate("token ${secret:tok}")}})
	h = http.Header{"Authorization": {"Bearer forged"}}
	d, err = in.Rewrite(h)
	if err != nil || h.Get("Authorization") != "token s3cr3t" || len(h["Authorization"]) != 1 {
		t.Errorf("header: %v %v", h, err)
	}
	// Scrub: a response echoing what was sent shows neither the value nor
	// the header that carried it.
	resp := http.Header{"X-Echo": {"you sent token s3cr3t"}, "X-Raw": {"s3cr3t"}}
	d.Scrub(resp)
	if strings.Contains(strings.Join(append(resp["X-Echo"], resp["X-Raw"]...), " "), "s3cr3t") {
		t.Errorf("scrubbed: %v", resp)
	}

	// A secret that is not set: an error naming credential and secret,
	// never another's value.
	in = NewInjector(src, []Credential{{Name: "npm", Value: mustTemplate("${secret:tok}${secret:gone}"), Placeholder: ph}})
	_, err = in.Rewrite(http.Header{"Authorization": {"Bearer " + ph}})
	if err == nil || !strings.Contains(err.Error(), "credential npm: secret gone") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("missing secret: %v", err)
	}
}
