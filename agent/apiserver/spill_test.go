package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
)

// spillRun runs command with a tiny tail, so its output spills, and returns
// the spill file's path as the result names it.
func spillRun(t *testing.T, a *agent, command string) string {
	t.Helper()
	spec := a.spec(t, executor.Request{Command: command})
	spec.TailBytes = 16
	res, err := a.client.Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.SpillPath == "" || res.SpillError != "" || !strings.HasPrefix(res.SpillPath, a.spill+"/"+session+"/") {
		t.Fatalf("no spill: truncated %v, spill %q (%s), spill dir %s", res.Truncated, res.SpillPath, res.SpillError, a.spill)
	}
	return res.SpillPath
}

func readSpill(t *testing.T, c *agentapi.Client, path string, offset, limit int64) ([]byte, error) {
	t.Helper()
	rc, err := c.Spill(context.Background(), path, offset, limit)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestSpillRoundTrip: a spill file written by a run reads back through the
// agent byte for byte, whole and in pages; offsets past the end read
// nothing.
func TestSpillRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	p := spillRun(t, a, "head -c 300000 /dev/urandom | tee out.bin")
	want, err := os.ReadFile(filepath.Join(a.root, "out.bin"))
	if err != nil || len(want) != 300000 {
		t.Fatalf("out.bin: %d bytes, %v", len(want), err)
	}
	got, err := readSpill(t, a.client, p, 0, 0)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("whole: %d bytes (equal %v), %v", len(got), bytes.Equal(got, want), err)
	}

	var paged []byte
	const page = 65536
	for off := int64(0); ; off += page {
		b, err := readSpill(t, a.client, p, off, page)
		if err != nil {
			t.Fatalf("page at %d: %v", off, err)
		}
		paged = append(paged, b...)
		if len(b) < page {
			break
		}
	}
	if !bytes.Equal(paged, want) {
		t.Errorf("paged: %d bytes, not the file", len(paged))
	}

	for _, tt := range []struct {
		offset, limit int64
		want          []byte
	}{
		{1000, 10, want[1000:1010]},
		{299995, 100, want[299995:]},
		{300000, 0, []byte{}},
		{1 << 40, 10, []byte{}},
	} {
		b, err := readSpill(t, a.client, p, tt.offset, tt.limit)
		if err != nil || !bytes.Equal(b, tt.want) {
			t.Errorf("offset %d limit %d: %d bytes, %v; want %d bytes", tt.offset, tt.limit, len(b), err, len(tt.want))
		}
	}
}

// TestSpillRefused: only regular files strictly inside the spill directory
// are served; a missing one is not_found, everything else invalid, and
// nothing hangs (a FIFO).
func TestSpillRefused(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	p := spillRun(t, a, "head -c 1000 /dev/zero")
	dir := filepath.Join(a.spill, session)
	for _, err := range []error{
		os.Symlink("/etc/passwd", filepath.Join(dir, "out.log")),
		os.Symlink(filepath.Base(p), filepath.Join(dir, "in.log")),
		os.Symlink("/etc", filepath.Join(a.spill, "etc")),
		os.Symlink("../../..", filepath.Join(dir, "up")),
		os.Mkdir(filepath.Join(dir, "d.log"), 0o755),
		syscall.Mkfifo(filepath.Join(dir, "fifo.log"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	notInside := func(q string) string { return fmt.Sprintf("not a spill file: %q is not inside %s", q, a.spill) }
	tests := []struct {
		name, path string
		offset     int64
		class      error
		text       string // "" for any text of the class that names path
	}{
		{"missing", dir + "/nothing.log", 0, executor.ErrNotFound, "no such spill file: " + dir + "/nothing.log"},
		{"missing session", a.spill + "/other/x.log", 0, executor.ErrNotFound, "no such spill file: " + a.spill + "/other/x.log"},
		{"dotdot", a.spill + "/../etc/passwd", 0, executor.ErrInvalid, notInside(a.spill + "/../etc/passwd")},
		{"dotdot inside", dir + "/../" + session + "/" + filepath.Base(p), 0, executor.ErrInvalid, ""},
		{"relative", "../etc/passwd", 0, executor.ErrInvalid, notInside("../etc/passwd")},
		{"relative name", session + "/" + filepath.Base(p), 0, executor.ErrInvalid, ""},
		{"outside", "/etc/passwd", 0, executor.ErrInvalid, notInside("/etc/passwd")},
		{"the dir", a.spill, 0, executor.ErrInvalid, notInside(a.spill)},
		{"the dir slash", a.spill + "/", 0, executor.ErrInvalid, ""},
		{"empty", "", 0, executor.ErrInvalid, notInside("")},
		{"nul", dir + "/x\x00.log", 0, executor.ErrInvalid, ""},
		{"symlink out", dir + "/out.log", 0, executor.ErrInvalid, "not a spill file: " + dir + "/out.log is not a regular file (L---------)"},
		{"symlink in", dir + "/in.log", 0, executor.ErrInvalid, "not a spill file: " + dir + "/in.log is not a regular file (L---------)"},
		{"through a symlinked dir", a.spill + "/etc/passwd", 0, executor.ErrInvalid, ""},
		{"through a symlink up", dir + "/up/etc/passwd", 0, executor.ErrInvalid, ""},
		{"directory", dir + "/d.log", 0, executor.ErrInvalid, "not a spill file: " + dir + "/d.log is not a regular file (d---------)"},
		{"session directory", dir, 0, executor.ErrInvalid, ""},
		{"fifo", dir + "/fifo.log", 0, executor.ErrInvalid, "not a spill file: " + dir + "/fifo.log is not a regular file (p---------)"},
		{"negative offset", p, -1, executor.ErrInvalid, `invalid offset "-1": want a non-negative integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rc, err := a.client.Spill(ctx, tt.path, tt.offset, 0)
			if err == nil {
				b, _ := io.ReadAll(rc)
				rc.Close()
				t.Fatalf("served %d bytes: %.40q", len(b), b)
			}
			if tt.text != "" {
				wantClass(t, err, tt.class, tt.text)
			} else if !errors.Is(err, tt.class) || !strings.HasPrefix(err.Error(), "not a spill file: ") {
				t.Errorf("error %v, want a refusal of class %v", err, tt.class)
			}
		})
	}
	// The file itself is still served.
	if b, err := readSpill(t, a.client, p, 0, 0); err != nil || len(b) != 1000 {
		t.Errorf("the spill file: %d bytes, %v", len(b), err)
	}
}

// TestSpillWithoutDir: an agent configured without a spill directory does
// not have the endpoint; a relative one is refused.
func TestSpillWithoutDir(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	srv, err := apiserver.NewServer(apiserver.ServerConfig{Runner: a.exec, Agent: "test", Root: a.root, Home: a.root})
	if err != nil {
		t.Fatal(err)
	}
	c, err := agentapi.Dial(context.Background(), serve(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Spill(context.Background(), a.spill+"/s1/x.log", 0, 0)
	wantClass(t, err, executor.ErrInvalid, "agent: no such endpoint: GET /v1/spill")

	_, err = apiserver.NewServer(apiserver.ServerConfig{Runner: a.exec, SpillDir: "run/spill"})
	if err == nil || err.Error() != `agentapi: ServerConfig.SpillDir must be an absolute path, got "run/spill"` {
		t.Errorf("relative SpillDir: %v", err)
	}
}

// TestSpillBrokenAgent: the client keeps to the limit it asked for and
// reports a body cut short as unavailable, not as the file's end.
func TestSpillBrokenAgent(t *testing.T) {
	t.Parallel()
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/hello":
			json.NewEncoder(w).Encode(agentapi.Hello{Protocol: agentapi.Protocol})
		case "/v1/spill":
			switch r.URL.Query().Get("path") {
			case "/big":
				w.Header().Set("Content-Length", "100")
				w.Write(make([]byte, 100))
			case "/short":
				w.Header().Set("Content-Length", "100")
				w.Write(make([]byte, 10))
				// The handler returns: net/http closes the connection.
			case "/chunked":
				w.Write(make([]byte, 10))
				w.(http.Flusher).Flush()
				w.Write(make([]byte, 90))
			case "/stall":
				w.Header().Set("Content-Length", "100")
				w.Write(make([]byte, 10))
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			case "/garbage":
				w.WriteHeader(http.StatusBadGateway)
				io.WriteString(w, "<html>")
			}
		}
	}))
	c, err := agentapi.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Spill(context.Background(), "/big", 0, 10); !errors.Is(err, executor.ErrUnavailable) || !strings.Contains(err.Error(), "answer of 100 bytes, over the 10 asked for") {
		t.Errorf("over the limit: %v", err)
	}
	if b, err := readSpill(t, c, "/short", 0, 0); !errors.Is(err, executor.ErrUnavailable) || !strings.Contains(err.Error(), "GET /v1/spill: read answer: unexpected EOF") || len(b) != 10 {
		t.Errorf("cut short: %d bytes, %v", len(b), err)
	}
	if b, err := readSpill(t, c, "/chunked", 0, 20); err != nil || len(b) != 20 {
		t.Errorf("unsized body over the limit: %d bytes, %v; want 20", len(b), err)
	}
	// A read whose context ends is aborted.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := c.Spill(ctx, "/stall", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if n, err := io.ReadFull(rc, make([]byte, 10)); err != nil {
		t.Fatalf("stalled body: %d bytes, %v", n, err)
	}
	cancel()
	_, err = rc.Read(make([]byte, 10))
	wantClass(t, err, executor.ErrAborted, "tool call aborted")
	if _, err := c.Spill(context.Background(), "/garbage", 0, 0); !errors.Is(err, executor.ErrUnavailable) || !strings.HasSuffix(err.Error(), "GET /v1/spill: 502 Bad Gateway") {
		t.Errorf("not a protocol error: %v", err)
	}
}
