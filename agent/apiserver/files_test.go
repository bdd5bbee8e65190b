package apiserver_test

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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/local"
)

// filesAgent is an agent serving the files and workspace endpoints on
// root: its client, root and socket.
func filesAgent(t testing.TB) (*agentapi.Client, string, string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e, err := local.New(local.Config{Root: root, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	tree := &files.Tree{Root: root, UID: -1, GID: -1}
	srv, err := apiserver.NewServer(apiserver.ServerConfig{Runner: e, Agent: "test", Root: root, Home: root, Files: tree, Workspace: tree})
	if err != nil {
		t.Fatal(err)
	}
	sock := serve(t, srv)
	c, err := agentapi.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, root, sock
}

func TestFilesBigRoundTrip(t *testing.T) {
	c, root, _ := filesAgent(t)
	ctx := context.Background()
	const size = 100 << 20
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{7}), size), h)
	w, err := c.PutFile(ctx, "/"+strings.TrimPrefix(root, "/")+"/in/blob", src, files.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Bytes != size || w.Path != root+"/in/blob" {
		t.Errorf("written %+v", w)
	}
	info, body, err := c.GetFile(ctx, "in/blob", files.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	got := sha256.New()
	if n, err := io.Copy(got, body); err != nil || n != size {
		t.Fatalf("read %d, %v", n, err)
	}
	if !bytes.Equal(got.Sum(nil), h.Sum(nil)) || info.Size != size || info.Type != files.TypeFile {
		t.Fatalf("differs; info %+v", info)
	}
	st, err := c.StatFile(ctx, "in")
	if err != nil || st.Type != files.TypeDirectory {
		t.Errorf("stat: %+v, %v", st, err)
	}
	if _, err := c.StatFile(ctx, "nope"); !errors.Is(err, executor.ErrNotFound) {
		t.Errorf("stat of a missing path: %v", err)
	}
}

func TestFilesTarAndErrors(t *testing.T) {
	c, root, sock := filesAgent(t)
	ctx := context.Background()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o600, Size: 5})
	tw.Write([]byte("hello"))
	tw.Close()
	if _, err := c.PutFile(ctx, "tree", bytes.NewReader(tb.Bytes()), files.PutOptions{Tar: true}); err != nil {
		t.Fatal(err)
	}
	_, body, err := c.GetFile(ctx, "tree", files.GetOptions{Tar: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(body)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	body.Close()
	if strings.Join(names, ",") != "tree/,tree/d/,tree/d/f" {
		t.Errorf("tar holds %q", names)
	}

	os.Symlink("/etc", filepath.Join(root, "etc"))
	for _, c2 := range []struct {
		path  string
		body  io.Reader
		o     files.PutOptions
		class error
		want  string
	}{
		{"../x", strings.NewReader("x"), files.PutOptions{}, executor.ErrInvalid, "outside the session root"},
		{"/etc/passwd", strings.NewReader("x"), files.PutOptions{}, executor.ErrInvalid, "outside the session root"},
		{"etc/x", strings.NewReader("x"), files.PutOptions{}, executor.ErrInvalid, "leads outside"},
		{"tree", strings.NewReader("x"), files.PutOptions{}, executor.ErrInvalid, "is a directory"},
		{"big", strings.NewReader(strings.Repeat("x", 100)), files.PutOptions{Limits: files.Limits{MaxBytes: 10}}, files.ErrTooLarge, "limit of 10 bytes"},
		{"big", io.LimitReader(rand.NewChaCha8([32]byte{}), 100), files.PutOptions{Limits: files.Limits{MaxBytes: 10}}, files.ErrTooLarge, "limit of 10 bytes"},
		{"cut", io.MultiReader(strings.NewReader("partial"), errAfter{}), files.PutOptions{}, executor.ErrInvalid, "interrupted"},
	} {
		_, err := c.PutFile(ctx, c2.path, c2.body, c2.o)
		if !errors.Is(err, c2.class) || err == nil || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("PUT %s: %v, want %v naming %q", c2.path, err, c2.class, c2.want)
		}
	}
	if _, _, err := c.GetFile(ctx, "tree", files.GetOptions{}); !errors.Is(err, executor.ErrInvalid) || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("GET of a directory as a file: %v", err)
	}

	// The status codes on the wire.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest(http.MethodPut, "http://agent/v1/files?path=big&max=10", strings.NewReader(strings.Repeat("x", 100)))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("over the cap: %s", resp.Status)
	}

	// An upload whose connection breaks off mid-way leaves nothing.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("PUT /v1/files?path=broken HTTP/1.1\r\nHost: agent\r\nContent-Length: 1000000\r\n\r\n" + strings.Repeat("y", 5000)))
	time.Sleep(100 * time.Millisecond)
	conn.Close()
	time.Sleep(100 * time.Millisecond)
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if e.Name() != "tree" && e.Name() != "etc" {
			t.Errorf("left in the root: %s", e.Name())
		}
	}
}

type errAfter struct{}

func (errAfter) Read([]byte) (int, error) { return 0, errors.New("client went away") }

// BenchmarkFiles: 100 MB up and down through the protocol over a unix
// socket, into a local root.
func BenchmarkFiles(b *testing.B) {
	c, _, _ := filesAgent(b)
	ctx := context.Background()
	data := make([]byte, 100<<20)
	rand.NewChaCha8([32]byte{}).Read(data)
	b.Run("upload", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := c.PutFile(ctx, "blob", bytes.NewReader(data), files.PutOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("download", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			_, body, err := c.GetFile(ctx, "blob", files.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, body)
			body.Close()
		}
	})
}

// The link rules cross the wire: a client's OneLink and NoSymlinks reach
// the agent's tree (a hard link of a denied file, and a symlink, are
// refused), and without them both are read.
func TestFilesLinkRulesOverTheWire(t *testing.T) {
	c, root, _ := filesAgent(t)
	ctx := context.Background()
	os.WriteFile(filepath.Join(root, ".env"), []byte("AWS_SECRET=hunter2\n"), 0o644)
	if err := os.Link(filepath.Join(root, ".env"), filepath.Join(root, "notenv")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(".env", filepath.Join(root, "env"))
	rules := files.GetOptions{Limits: files.Limits{NoSymlinks: true, OneLink: true}}
	for p, want := range map[string]string{"notenv": "has 2 links", "env": "goes through the symlink"} {
		if _, body, err := c.GetFile(ctx, p, rules); err == nil {
			body.Close()
			t.Errorf("%s was read under the link rules", p)
		} else if !errors.Is(err, executor.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", p, err, want)
		}
		_, body, err := c.GetFile(ctx, p, files.GetOptions{})
		if err != nil {
			t.Fatalf("%s without rules: %v", p, err)
		}
		b, _ := io.ReadAll(body)
		body.Close()
		if !strings.Contains(string(b), "hunter2") {
			t.Errorf("%s without rules: %q", p, b)
		}
	}
}
