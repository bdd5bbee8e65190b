package apiserver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/workspace"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
)

func put(t testing.TB, root, rel, data string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func manifest(t testing.TB, root string) []workspace.Entry {
	t.Helper()
	m, err := workspace.Manifest(root)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sessionTree fills root with what a session leaves: files of odd modes,
// symlinks in and out, a hard link, a sparse file, an empty directory.
func sessionTree(t testing.TB, root string) {
	t.Helper()
	put(t, root, "src/main.go", "package main\n", 0o644)
	put(t, root, "bin/run", "#!/bin/sh\n", 0o4755)
	put(t, root, "secret", "s", 0o400)
	if err := os.Symlink("/usr/bin/python3", filepath.Join(root, "bin/python3")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../src", filepath.Join(root, "bin/src")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "src/main.go"), filepath.Join(root, "main.go")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(root, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(32 << 20)
	f.WriteAt([]byte("end"), 32<<20-3)
	f.Close()
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o1777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(root, "empty"), 0o1777)
}

// TestWorkspaceExportImport streams one agent's workspace straight into
// another's, which had content of its own: the second is then the first,
// every path, mode, link and hash, and the stats of both ends agree.
func TestWorkspaceExportImport(t *testing.T) {
	from, src, _ := filesAgent(t)
	to, dst, _ := filesAgent(t)
	sessionTree(t, src)
	put(t, dst, "old/file", "replaced", 0o644)
	ctx := context.Background()

	exp, err := from.ExportWorkspace(ctx, agentapi.WorkspaceLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	st, err := to.ImportWorkspace(ctx, exp, agentapi.WorkspaceLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if d := workspace.Diff(manifest(t, src), manifest(t, dst)); len(d) > 0 {
		t.Errorf("the imported workspace differs:\n%s", strings.Join(d, "\n"))
	}
	if out := exp.Stats(); out.Entries != st.Entries || out.Stream != st.Stream || out.HardLinks != 1 || out.Holes < 30<<20 {
		t.Errorf("export %+v, import %+v", out, st)
	}
}

// TestWorkspaceImportRefused: a stream that is corrupt, hostile or over
// its limits is refused with the agent's error, of its class, across the
// wire; the workspace is as it was.
func TestWorkspaceImportRefused(t *testing.T) {
	c, root, _ := filesAgent(t)
	put(t, root, "kept", "kept", 0o644)
	before := manifest(t, root)
	ctx := context.Background()

	src := t.TempDir()
	put(t, src, "a", strings.Repeat("a", 5000), 0o644)
	put(t, src, "b/c", "c", 0o644)
	var good bytes.Buffer
	if _, err := workspace.Pack(ctx, src, &good, workspace.Limits{}); err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(good.Bytes())
	corrupt[len(corrupt)-2] ^= 0xff
	for _, c2 := range []struct {
		name  string
		body  io.Reader
		lim   agentapi.WorkspaceLimits
		class error
		want  string
	}{
		{"corrupt", bytes.NewReader(corrupt), agentapi.WorkspaceLimits{}, executor.ErrInvalid, "the stream is corrupt"},
		{"not a stream", strings.NewReader("a plain file"), agentapi.WorkspaceLimits{}, executor.ErrInvalid, "the stream is corrupt"},
		{"cut", bytes.NewReader(good.Bytes()[:good.Len()/2]), agentapi.WorkspaceLimits{}, executor.ErrInvalid, "the stream is cut"},
		{"bytes", bytes.NewReader(good.Bytes()), agentapi.WorkspaceLimits{MaxBytes: 100}, files.ErrNoSpace, "past its limit of 100 bytes"},
		{"entries", bytes.NewReader(good.Bytes()), agentapi.WorkspaceLimits{MaxEntries: 2}, files.ErrTooLarge, "more than 2 entries"},
		{"body fails", io.MultiReader(bytes.NewReader(good.Bytes()[:100]), errAfter{}), agentapi.WorkspaceLimits{}, executor.ErrInvalid,
			"workspace import interrupted: client went away; the workspace is as it was"},
	} {
		t.Run(c2.name, func(t *testing.T) {
			_, err := c.ImportWorkspace(ctx, c2.body, c2.lim)
			if !errors.Is(err, c2.class) || err == nil || !strings.Contains(err.Error(), c2.want) {
				t.Errorf("import: %v, want %v saying %q", err, c2.class, c2.want)
			}
			// A client whose body failed returns at once; the agent sees
			// the upload cut and cleans up just after.
			d := workspace.Diff(before, manifest(t, root))
			for deadline := time.Now().Add(5 * time.Second); len(d) > 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				d = workspace.Diff(before, manifest(t, root))
			}
			if len(d) > 0 {
				t.Errorf("the workspace changed:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

// TestWorkspaceExportErrors: an export refused before its stream begins
// answers the error, of its class; one that fails midway breaks the
// stream, whose Read then fails, never ending cleanly.
func TestWorkspaceExportErrors(t *testing.T) {
	c, root, _ := filesAgent(t)
	ctx := context.Background()
	put(t, root, "a", "a", 0o644)
	put(t, root, "b", "b", 0o644)
	if _, err := c.ExportWorkspace(ctx, agentapi.WorkspaceLimits{MaxEntries: 2}); !errors.Is(err, files.ErrTooLarge) || !strings.Contains(err.Error(), "more than 2 entries") {
		t.Errorf("export over its entries, refused at once: %v", err)
	}

	// 4 MiB that do not compress go out before the limit is met.
	data := make([]byte, 4<<20)
	rand.NewChaCha8([32]byte{3}).Read(data)
	put(t, root, "a", string(data), 0o644)
	put(t, root, "z", "z", 0o644)
	exp, err := c.ExportWorkspace(ctx, agentapi.WorkspaceLimits{MaxEntries: 3})
	if err != nil {
		t.Fatalf("export that fails midway: %v, want a stream", err)
	}
	defer exp.Close()
	n, err := io.Copy(io.Discard, exp)
	if !errors.Is(err, executor.ErrUnavailable) || n < 1<<20 {
		t.Errorf("the broken stream: %d bytes, %v; want some, then ErrUnavailable", n, err)
	}
}

// TestWorkspaceOneAtATime: an import while an export runs is refused,
// not interleaved.
func TestWorkspaceOneAtATime(t *testing.T) {
	c, root, _ := filesAgent(t)
	ctx := context.Background()
	data := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{4}).Read(data)
	put(t, root, "big", string(data), 0o644)
	exp, err := c.ExportWorkspace(ctx, agentapi.WorkspaceLimits{})
	if err != nil {
		t.Fatal(err)
	}
	// The export has begun and waits for its reader.
	_, err = c.ImportWorkspace(ctx, strings.NewReader("x"), agentapi.WorkspaceLimits{})
	if !errors.Is(err, executor.ErrUnavailable) || !strings.Contains(err.Error(), "in progress") {
		t.Errorf("an import during an export: %v", err)
	}
	if _, err := io.Copy(io.Discard, exp); err != nil {
		t.Fatal(err)
	}
	exp.Close()
	if exp.Stats().Files != 1 {
		t.Errorf("stats %+v", exp.Stats())
	}
}

// TestWorkspaceEndpointsOff: an agent not given the workspace answers as
// for any unknown endpoint.
func TestWorkspaceEndpointsOff(t *testing.T) {
	a := newTestAgent(t)
	_, err := a.client.ExportWorkspace(context.Background(), agentapi.WorkspaceLimits{})
	wantClass(t, err, executor.ErrInvalid, "agent: no such endpoint: GET /v1/workspace")
	_, err = a.client.ImportWorkspace(context.Background(), strings.NewReader(""), agentapi.WorkspaceLimits{})
	wantClass(t, err, executor.ErrInvalid, "agent: no such endpoint: PUT /v1/workspace")
}

// TestWorkspaceStatus: the classes travel with the files endpoints'
// statuses: a bad cap 400, a stream past its bytes 507.
func TestWorkspaceStatus(t *testing.T) {
	_, _, sock := filesAgent(t)
	src := t.TempDir()
	put(t, src, "a", strings.Repeat("a", 5000), 0o644)
	var stream bytes.Buffer
	if _, err := workspace.Pack(context.Background(), src, &stream, workspace.Limits{}); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (netConn, error) {
		return dialUnix(ctx, sock)
	}}}
	for _, c := range []struct {
		target string
		status int
	}{
		{"/v1/workspace?entries=x", http.StatusBadRequest},
		{"/v1/workspace?max=100", http.StatusInsufficientStorage},
		{"/v1/workspace", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodPut, "http://agent"+c.target, bytes.NewReader(stream.Bytes()))
		req.Header.Set("Content-Type", agentapi.ContentWorkspace)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("PUT %s: %s, want %d", c.target, resp.Status, c.status)
		}
	}
}
