package agent

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startHost serves a hostServer on a socket in a fresh short directory
// (a socket path must fit in 107 bytes), answering "ok", with its signals
// handled as Serve handles them; it returns the socket and the hook's
// signal func.
func startHost(t *testing.T) (string, func(syscall.Signal) error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbhook")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "agent.sock")
	h := &hostServer{
		socket: socket,
		newHTTP: func() *http.Server {
			return &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
		},
		errc: make(chan error, 1),
		logf: t.Logf,
	}
	if err := h.listen(); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan syscall.Signal, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range sigs {
			h.handle(s)
		}
	}()
	t.Cleanup(func() {
		close(sigs)
		<-done
		h.close()
	})
	return socket, func(s syscall.Signal) error { sigs <- s; return nil }
}

func get(socket string) (string, error) {
	c := &http.Client{Transport: &http.Transport{Dial: func(string, string) (net.Conn, error) { return net.Dial("unix", socket) }}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://agent/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestHookClosesAndReopensTheHostSocket(t *testing.T) {
	socket, signal := startHost(t)
	if got, err := get(socket); err != nil || got != "ok" {
		t.Fatalf("before: %q, %v", got, err)
	}
	// A connection the agent accepted, open across the save: gVisor
	// refuses to save it as it refuses the listener.
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	if _, err := conn.Read(buf); err != nil {
		t.Fatal(err)
	}

	if err := Hook(HookSave, socket, signal, 5*time.Second); err != nil {
		t.Fatalf("save: %v", err)
	}
	if _, err := os.Lstat(socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after save: %v, want it gone", err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(buf); err != io.EOF {
		t.Errorf("accepted connection after save: read %d, %v; want EOF", n, err)
	}
	if _, err := get(socket); err == nil {
		t.Error("a connection after save succeeded")
	}
	// A second save is harmless (the host retries a failed suspend).
	if err := Hook(HookSave, socket, signal, 5*time.Second); err != nil {
		t.Fatalf("save again: %v", err)
	}

	for _, mode := range []string{HookRestore, HookResume} {
		if err := Hook(mode, socket, signal, 5*time.Second); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if got, err := get(socket); err != nil || got != "ok" {
			t.Errorf("after %s: %q, %v", mode, got, err)
		}
	}
	st, seq, err := readState(socket)
	if err != nil || st != StateListening || seq != 4 {
		t.Errorf("state file: %q %d %v, want listening 4", st, seq, err)
	}
}

func TestHookErrors(t *testing.T) {
	socket, signal := startHost(t)
	if err := Hook("pause", socket, signal, time.Second); err == nil || !strings.Contains(err.Error(), `mode "pause"`) {
		t.Errorf("bad mode: %v", err)
	}
	// No agent handles the signal: the hook gives up, saying why.
	deaf := func(syscall.Signal) error { return nil }
	if err := Hook(HookSave, socket, deaf, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("no answer: %v", err)
	}
	refused := func(syscall.Signal) error { return syscall.EPERM }
	if err := Hook(HookSave, socket, refused, time.Second); !errors.Is(err, syscall.EPERM) {
		t.Errorf("signal refused: %v", err)
	}
	if err := os.WriteFile(StateFile(socket), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Hook(HookSave, socket, signal, time.Second); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Errorf("bad state file: %v", err)
	}
}

// TestHookSignalsAgain: an agent that missed the first signal (it was
// still starting) gets it again, and the hook succeeds.
func TestHookSignalsAgain(t *testing.T) {
	socket, signal := startHost(t)
	calls := 0
	late := func(s syscall.Signal) error {
		calls++
		if calls == 1 {
			return nil // lost
		}
		return signal(s)
	}
	if err := Hook(HookSave, socket, late, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if calls < 2 {
		t.Errorf("signalled %d times", calls)
	}
}
