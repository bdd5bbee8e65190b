package sandboxconn

import (
	"context"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

// tcpAgent is a real agent (a local executor behind the agent's API) on a
// TCP address of its own, as a pod's agent is reached, until vanish: then
// its connections close (the agent ended) and its address takes no
// connection and refuses none, as the IP of a deleted pod on a cluster
// network. The address is a listening socket with a backlog of one: once
// the agent stops accepting, one connection nobody accepts fills it, and
// Linux drops every SYN that follows (tcp_abort_on_overflow 0).
type tcpAgent struct {
	ep  agentapi.Endpoint
	srv *http.Server
	f   *os.File // the listening socket; kept, so never collected and closed
}

func newTCPAgent(t *testing.T, root string) *tcpAgent {
	t.Helper()
	e, err := local.New(local.Config{Root: root, SpillDir: t.TempDir(), Cgroup: local.CgroupOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	tree := &files.Tree{Root: root, UID: -1, GID: -1}
	h, err := apiserver.NewServer(apiserver.ServerConfig{Runner: e, Agent: "test", Root: root, Home: root, Files: tree, Workspace: tree})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// fd's owner is f from here: an *os.File closes its descriptor when
	// it is collected, so a bare fd left to a collected f was closed under
	// the test (the clean-clone CI: vanish's filler refused), and a later
	// syscall.Close could close whatever reused the number.
	f := os.NewFile(uintptr(fd), "agent")
	t.Cleanup(func() { f.Close() })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	// The agent accepts on a duplicate of fd: closing it (vanish) leaves
	// fd listening, accepted from by nobody.
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	a := &tcpAgent{f: f, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		ep: agentapi.Endpoint{Network: "tcp", Address: net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))}}
	go a.srv.Serve(ln)
	t.Cleanup(func() { a.srv.Close() })
	return a
}

// vanish ends the agent and leaves its address a blackhole.
func (a *tcpAgent) vanish(t *testing.T) {
	t.Helper()
	a.srv.Close()
	filler, err := net.DialTimeout("tcp", a.ep.Address, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
}

// agentRuntime is a Fake whose every sandbox has a tcpAgent of its own,
// serving the session's workspace, root.
type agentRuntime struct {
	*sandboxtest.Fake
	t      *testing.T
	root   string
	mu     sync.Mutex
	agents map[string]*tcpAgent // by sandbox ID
}

func (r *agentRuntime) with(sb sandbox.Sandbox) sandbox.Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.agents[sb.ID]; ok {
		sb.Agent = a.ep
	}
	return sb
}

func (r *agentRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Fake.Create(ctx, spec)
	if err != nil {
		return sb, err
	}
	r.mu.Lock()
	r.agents[sb.ID] = newTCPAgent(r.t, r.root)
	r.mu.Unlock()
	return r.with(sb), nil
}

func (r *agentRuntime) Get(ctx context.Context, tenant, session string) (sandbox.Sandbox, error) {
	sb, err := r.Fake.Get(ctx, tenant, session)
	return r.with(sb), err
}

func (r *agentRuntime) List(ctx context.Context, owner string) ([]sandbox.Sandbox, error) {
	list, err := r.Fake.List(ctx, owner)
	for i := range list {
		list[i] = r.with(list[i])
	}
	return list, err
}

// TestVanishedSandbox: a session's sandbox is deleted behind this
// process's back (a pod evicted, its workspace saved by another replica)
// while this process keeps a connection to its agent: the agent ends and
// its address becomes a blackhole. The session's next call through this
// process is answered in a new sandbox within seconds: the dial of the
// gone address gives up at its bound (ErrNotSent), the sandbox is judged
// gone and replaced, and the call made again there. Unbounded, the dial
// waited for the kernel's SYN retries, and the call was answered after
// minutes, or not within its caller's patience.
func TestVanishedSandbox(t *testing.T) {
	rt := &agentRuntime{Fake: sandboxtest.NewFake(), t: t, root: t.TempDir(), agents: map[string]*tcpAgent{}}
	m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: "o", Ready: WaitAgent})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Manager: m, Tenant: "t", Limits: executor.DefaultLimits(), Root: rt.root,
		Spec: func(session string) (sandbox.Spec, error) {
			return sandbox.NewSpec("t", session, sandbox.WithImage("img"))
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	spec, err := e.Resolve(ctx, executor.Request{Session: "s", Shell: executor.Bash, Command: "echo answered"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := e.Run(ctx, spec); err != nil || res.Stdout != "answered\n" {
		t.Fatalf("first call: %+v %v", res, err)
	}
	first, err := rt.Get(ctx, "t", "s")
	if err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	gone := rt.agents[first.ID]
	rt.mu.Unlock()
	gone.vanish(t)
	if err := rt.Fake.Remove(ctx, first.ID); err != nil { // behind the Manager's back
		t.Fatal(err)
	}
	// The agent's end closed the kept-alive connection; the client's
	// transport drops it from its pool when its reader sees the close, an
	// instant later. A call that raced it would be sent on the closed
	// connection and reported as possibly started (not retried: right, and
	// not this case, which is the dial of a gone address). The clean-clone
	// CI, loaded, raced it once; let the reader run first.
	time.Sleep(250 * time.Millisecond)

	// The caller's patience: far less than the call's own bound (its
	// timeout, 120 s, grace and slack) and the kernel's SYN retries.
	const patience = 45 * time.Second
	cctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	start := time.Now()
	res, err := e.Run(cctx, spec)
	took := time.Since(start)
	t.Logf("the next call after the sandbox vanished: %s", took.Round(time.Millisecond))
	if err != nil || res.Stdout != "answered\n" {
		t.Fatalf("the next call after the sandbox vanished, %s: %+v %v", took, res, err)
	}
	if n := rt.Creates.Load(); n != 2 {
		t.Errorf("%d sandboxes created, want the vanished one replaced", n)
	}
	if took > 20*time.Second {
		t.Errorf("the next call took %s, want about the agent's connect bound (5 s) and a new sandbox", took)
	}
}
