package egress

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	agentegress "github.com/shellbox/shellbox/agent/egress"
)

// TestTrafficCounted: the relay reports each connection it dials and
// every byte that goes to and from the destination, exactly; a refused
// connection is not counted.
func TestTrafficCounted(t *testing.T) {
	const reply = 3000
	target := tcpServer(t, func(c net.Conn) {
		io.Copy(io.Discard, c)
		io.WriteString(c, strings.Repeat("r", reply))
	})
	r := newRig(t, agentegress.ProxyConfig{}, target)
	var (
		mu  sync.Mutex
		got Traffic
	)
	r.startRelay(t, RelayConfig{Traffic: func(tr Traffic) {
		mu.Lock()
		got.Requests += tr.Requests
		got.Sent += tr.Sent
		got.Received += tr.Received
		mu.Unlock()
	}})

	sizes := []int{1, 100_000, 1 << 20}
	var want Traffic
	for _, n := range sizes {
		c, br := r.connect(t, target, "")
		// Binary (a NUL first): the tunnel goes blind at once (blind.go).
		if _, err := io.WriteString(c, "\x00"+strings.Repeat("s", n-1)); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		if b, err := io.ReadAll(br); err != nil || len(b) != reply {
			t.Fatalf("reply of %d bytes, %v", len(b), err)
		}
		c.Close()
		want.Requests++
		want.Sent += int64(n)
		want.Received += reply
	}
	if status, _, _ := r.raw(t, "CONNECT 192.0.2.1:9 HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasPrefix(status, "403") {
		t.Errorf("a refused connection: %s", status)
	}
	// The relay counts a write once it returned, maybe after the peer read
	// it: wait for the counts to settle.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		g := got
		mu.Unlock()
		if g == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if got != want {
		t.Errorf("traffic %+v, want %+v", got, want)
	}
	t.Logf("counted %d connections, %d bytes sent, %d received", got.Requests, got.Sent, got.Received)
}
