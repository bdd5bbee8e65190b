package sandboxconn

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/sandbox"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// helloAgent serves the agent's handshake on a unix socket until the test
// ends, and counts the connections made to it.
func helloAgent(t *testing.T) (agentapi.Endpoint, *atomic.Int32) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbho")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	n := new(atomic.Int32)
	hs := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(agentapi.Hello{Protocol: agentapi.Protocol, Agent: "test", Root: "/workspace", Home: "/workspace"})
	})}
	go hs.Serve(countingListener{l, n})
	t.Cleanup(func() { hs.Close() })
	return agentapi.Endpoint{Network: "unix", Address: sock}, n
}

// A new sandbox's agent is dialled once: the readiness check's connection
// is the executor's first dial's, and only that sandbox's (same ID and
// endpoint), while it is fresh.
func TestHandoffDialsOnce(t *testing.T) {
	ep, conns := helloAgent(t)
	ctx := context.Background()
	h := NewReadyConns()
	sb := sandbox.Sandbox{ID: "sb-1", Agent: ep}
	if err := h.Ready(ctx, sb); err != nil {
		t.Fatal(err)
	}
	a, err := h.Dial(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, ok := a.(*agentapi.Client); !ok {
		t.Fatalf("Dial: %T, want the agent's client", a)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections to the agent for Ready and the first Dial, want 1", n)
	}
	// dial dials sb, closes the connection and wants n connections made
	// to the agent so far.
	dial := func(sb sandbox.Sandbox, n int32, why string) {
		t.Helper()
		a, err := h.Dial(ctx, sb)
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		if got := conns.Load(); got != n {
			t.Fatalf("%d connections to the agent, want %d: %s", got, n, why)
		}
	}
	ready := func() {
		t.Helper()
		if err := h.Ready(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	dial(sb, 2, "a connection is handed over once, the next Dial dials")

	ready()
	other := sb
	other.Agent.Token = "another"
	dial(other, 4, "a Dial with another endpoint (a token that changed) must not take the kept connection")

	ready()
	h.mu.Lock()
	k := h.kept[sb.ID]
	k.at = k.at.Add(-handoffFresh)
	h.kept[sb.ID] = k
	h.mu.Unlock()
	dial(sb, 6, "a stale kept connection must not be handed over")
}

// Connections nobody takes are bounded: past maxHandoffs the oldest is
// closed, and stale ones go at the next Ready.
func TestHandoffBounded(t *testing.T) {
	ep, _ := helloAgent(t)
	ctx := context.Background()
	h := NewReadyConns()
	for i := range maxHandoffs + 8 {
		if err := h.Ready(ctx, sandbox.Sandbox{ID: "sb-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Agent: ep}); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	n := len(h.kept)
	for id, k := range h.kept {
		k.at = k.at.Add(-handoffFresh)
		h.kept[id] = k
	}
	h.mu.Unlock()
	if n != maxHandoffs {
		t.Fatalf("%d connections kept, want %d", n, maxHandoffs)
	}
	if err := h.Ready(ctx, sandbox.Sandbox{ID: "last", Agent: ep}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	n = len(h.kept)
	h.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d connections kept after the others went stale, want 1", n)
	}
}
