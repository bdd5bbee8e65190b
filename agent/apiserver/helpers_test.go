package apiserver_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
)

const session = "s1"

// agent is a Server over a local executor, listening on a unix socket, and
// a Client dialled to it: the protocol end to end, in process.
type agent struct {
	exec   *local.Executor
	socket string
	client *agentapi.Client
	root   string
	spill  string // the spill directory, served by GET /v1/spill
	lim    executor.Limits
}

// testLimits are short enough for kill tests to be quick.
func testLimits() executor.Limits {
	l := executor.DefaultLimits()
	l.DefaultTimeout = 20 * time.Second
	l.Grace = 300 * time.Millisecond
	return l
}

// socketDir is a short directory for sockets: t.TempDir() paths can exceed
// the 108 bytes of a unix socket address.
func socketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve serves h on a fresh socket until the test ends.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(socketDir(t), "agent.sock")
	l, err := apiserver.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return sock
}

// newAgent starts a local executor with lim behind a Server and dials it.
func newAgent(t testing.TB, lim executor.Limits, root, home string) *agent {
	t.Helper()
	spill := t.TempDir()
	e, err := local.New(local.Config{Root: root, Home: home, SpillDir: spill, Limits: lim})
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	srv, err := apiserver.NewServer(apiserver.ServerConfig{Runner: e, Agent: "test", Root: root, Home: home, SpillDir: spill})
	if err != nil {
		t.Fatal(err)
	}
	sock := serve(t, srv)
	// Registered after serve's cleanup, so it runs first: commands end
	// before the server goes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("local executor Close: %v", err)
		}
	})
	c, err := agentapi.Dial(context.Background(), sock)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &agent{exec: e, socket: sock, client: c, root: root, spill: spill, lim: lim}
}

func newTestAgent(t testing.TB) *agent {
	t.Helper()
	return newAgent(t, testLimits(), t.TempDir(), t.TempDir())
}

// spec resolves req (session s1 unless set) the way a server does.
func (a *agent) spec(t testing.TB, req executor.Request) executor.Spec {
	t.Helper()
	if req.Session == "" {
		req.Session = session
	}
	s, err := a.exec.Resolve(context.Background(), req)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return s
}

// viaAgent is an executor.BashExecutor whose Resolve is the caller's, as in
// the sandboxed executor, and whose everything else goes through the
// protocol.
type viaAgent struct {
	*agentapi.Client
	lim  executor.Limits
	root string
	env  []string
}

var _ executor.BashExecutor = viaAgent{}

func (v viaAgent) Resolve(ctx context.Context, req executor.Request) (executor.Spec, error) {
	return v.lim.Resolve(ctx, req, v.root, v.env)
}

// dead reports whether pid is gone; a zombie is dead.
func dead(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// waitDead polls until pid is gone or d passed.
func waitDead(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !dead(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func wantClass(t *testing.T, err, class error, text string) {
	t.Helper()
	if !errors.Is(err, class) || err.Error() != text {
		t.Errorf("error %v (%T), want %q of class %v", err, err, text, class)
	}
}

// rawConn dials the socket without net/http, for tests that need to drop a
// connection mid-request.
func rawConn(t *testing.T, sock string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type netConn = net.Conn

func dialUnix(ctx context.Context, sock string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", sock)
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
