package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
)

func filesServer(t *testing.T, lim files.Limits) (*client.Client, string, *servertest.Server) {
	t.Helper()
	b := servertest.NewLocalBackend(t)
	b.FileLimits = lim
	srv := servertest.Start(t, b, nil)
	return client.New(srv.URL, servertest.TokenAcme, nil), filepath.Join(b.Dir, "acme", "root"), srv
}

func apiError(t *testing.T, err error, status int, code string, parts ...string) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not a *client.Error", err)
	}
	if e.Status != status || e.Code != code {
		t.Errorf("error %d %s (%s), want %d %s", e.Status, e.Code, e.Message, status, code)
	}
	for _, p := range parts {
		if !strings.Contains(e.Message, p) {
			t.Errorf("message %q does not name %q", e.Message, p)
		}
	}
}

// TestFilesREST: 100 MB through REST both ways byte-exact (far over the
// 1 MiB body limit of JSON requests), a directory as a tar, and the
// errors as JSON with their statuses.
func TestFilesREST(t *testing.T) {
	c, root, _ := filesServer(t, files.Limits{MaxBytes: 200 << 20})
	ctx := context.Background()
	const size = 100 << 20
	h := sha256.New()
	w, err := c.PutFile(ctx, "s1", "data/blob", io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{3}), size), h), client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Bytes != size || w.Path != root+"/data/blob" {
		t.Errorf("written %+v", w)
	}
	info, body, err := c.GetFile(ctx, "s1", root+"/data/blob", false)
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, body)
	body.Close()
	if err != nil || n != size || !bytes.Equal(got.Sum(nil), h.Sum(nil)) || info.Size != size {
		t.Fatalf("download: %d bytes, %v, info %+v", n, err, info)
	}

	// A directory: out as a tar, in again elsewhere.
	os.MkdirAll(filepath.Join(root, "src/pkg"), 0o755)
	os.WriteFile(filepath.Join(root, "src/pkg/a.go"), []byte("package pkg\n"), 0o640)
	_, body, err = c.GetFile(ctx, "s1", "src", true)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutFile(ctx, "s1", "copy", bytes.NewReader(tb), client.PutOptions{Tar: true}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "copy/src/pkg/a.go")); err != nil || string(b) != "package pkg\n" {
		t.Errorf("copied file: %q, %v", b, err)
	}
	if st, err := c.StatFile(ctx, "s1", "copy/src/pkg/a.go"); err != nil || st.Type != files.TypeFile || st.Mode.Perm() != 0o640 {
		t.Errorf("stat: %+v, %v", st, err)
	}

	// Bad input: JSON errors naming the path (and the limit).
	os.Symlink("/etc", filepath.Join(root, "etc"))
	_, err = c.PutFile(ctx, "s1", "../x", strings.NewReader("x"), client.PutOptions{})
	apiError(t, err, 400, "invalid", "../x", "outside the session root")
	_, err = c.PutFile(ctx, "s1", "/etc/passwd", strings.NewReader("x"), client.PutOptions{})
	apiError(t, err, 400, "invalid", "/etc/passwd", "outside the session root")
	_, err = c.PutFile(ctx, "s1", "etc/evil", strings.NewReader("x"), client.PutOptions{})
	apiError(t, err, 400, "invalid", "etc/evil", "leads outside")
	_, _, err = c.GetFile(ctx, "s1", "etc/passwd", false)
	apiError(t, err, 400, "invalid", "etc/passwd", "leads outside")
	_, err = c.PutFile(ctx, "s1", "src", strings.NewReader("x"), client.PutOptions{})
	apiError(t, err, 400, "invalid", "src is a directory")
	_, _, err = c.GetFile(ctx, "s1", "src", false)
	apiError(t, err, 400, "invalid", "src is a directory")
	_, _, err = c.GetFile(ctx, "s1", "nope", false)
	apiError(t, err, 404, "not_found", "nope")
	_, err = c.StatFile(ctx, "s1", "nope")
	apiError(t, err, 404, "not_found", "nope")
	big := io.LimitReader(rand.NewChaCha8([32]byte{}), 201<<20)
	_, err = c.PutFile(ctx, "s1", "big", big, client.PutOptions{})
	apiError(t, err, 413, "too_large", root+"/big", "209715200 bytes")
	_, err = c.PutFile(ctx, "s1", "big", io.LimitReader(rand.NewChaCha8([32]byte{}), 201<<20), client.PutOptions{Size: 201 << 20})
	apiError(t, err, 413, "too_large", "209715200 bytes")
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc"})
	tw.Close()
	_, err = c.PutFile(ctx, "s1", "t", &tarBuf, client.PutOptions{Tar: true})
	apiError(t, err, 400, "invalid", "absolute targets")

	ents, _ := os.ReadDir(root)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"copy", "data", "etc", "src"}) {
		t.Errorf("root holds %q", names)
	}
}

// TestFilesRESTInterrupted: a client that goes away mid-upload leaves
// nothing, and the old file stays whole.
func TestFilesRESTInterrupted(t *testing.T) {
	c, root, srv := filesServer(t, files.Limits{})
	ctx := context.Background()
	if _, err := c.PutFile(ctx, "s1", "f", strings.NewReader("old"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	for _, p := range []string{"f", "new/dir/g"} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte("PUT /v1/sessions/s1/files?path=" + p + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + servertest.TokenAcme +
			"\r\nContent-Type: application/octet-stream\r\nContent-Length: 10000000\r\n\r\n" + strings.Repeat("z", 300000)))
		time.Sleep(100 * time.Millisecond)
		conn.Close()
	}
	// The server notices, and cleans up.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ents, _ := os.ReadDir(root)
		b, _ := os.ReadFile(filepath.Join(root, "f"))
		if len(ents) == 1 && string(b) == "old" {
			break
		}
		if time.Now().After(deadline) {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Fatalf("root holds %q, f = %.20q", names, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And a file over the 1 MiB JSON body limit goes in.
	if _, err := c.PutFile(ctx, "s1", "two-mib", bytes.NewReader(make([]byte, 2<<20)), client.PutOptions{Size: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL + "/v1/sessions/s1/files?path=f")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("without a token: %s", resp.Status)
	}
}
