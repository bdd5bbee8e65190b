package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi/egresswire"
)

// hang bounds waiting for what must happen: far beyond any machine's
// slowness, it only proves nothing hung.
const hang = 30 * time.Second

// The relay closes a CONNECT tunnel while the client is not reading
// (egresswire.Splice's package doc): the proxy must not hold the client
// half-open. The client's writes fail instead of blocking, and the proxy
// lets go of the connection (Open), without the client reading or
// closing.
// tunnel sets up a Proxy with a relay's poll and a client whose CONNECT
// the relay answers OK; it returns the proxy, the client (its receive
// buffer small, so bytes to it fill the path soon) with its reader past
// the CONNECT answer, and the relay's end of the tunnel.
func tunnel(t *testing.T) (*Proxy, *net.TCPConn, *bufio.Reader, net.Conn) {
	t.Helper()
	p := NewProxy(ProxyConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ctx, l)
	agent := httptest.NewServer(p)
	t.Cleanup(agent.Close)

	relay, err := net.Dial("tcp", agent.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	if _, err := io.WriteString(relay, "POST /v1/egress HTTP/1.1\r\nHost: agent\r\nConnection: Upgrade\r\nUpgrade: "+egresswire.Upgrade+"\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	client := c.(*net.TCPConn)
	client.SetReadBuffer(4 << 10)
	if _, err := io.WriteString(client, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	relay.SetReadDeadline(time.Now().Add(hang))
	// The 101 has no body: reading it byte by byte leaves nothing of the
	// tunnel behind in a buffer.
	resp, err := http.ReadResponse(bufio.NewReaderSize(oneByte{relay}, 16), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get(egresswire.TargetHeader) != "example.com:443" {
		t.Fatalf("poll: %v %v", resp, err)
	}
	relay.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(relay, "OK\n"); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(hang))
	cbr := bufio.NewReader(client)
	for first := true; ; first = false {
		line, err := cbr.ReadString('\n')
		if err != nil || first && !strings.HasPrefix(line, "HTTP/1.1 200 ") {
			t.Fatalf("CONNECT answer %q, %v", line, err)
		}
		if line == "\r\n" {
			break
		}
	}
	client.SetReadDeadline(time.Time{})
	return p, client, cbr, relay
}

// oneByte reads a byte at a time.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

func TestProxyTunnelEndsWhenRelayClosesOnUnreadingClient(t *testing.T) {
	p, client, _, relay := tunnel(t)
	// (The client reads nothing more from here on.)

	// The relay sends until the path to the client is full (a write that
	// makes no progress for a while: the proxy is blocked writing to the
	// client), then closes.
	chunk := make([]byte, 32<<10)
	for {
		relay.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := relay.Write(chunk); err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatal(err)
			}
			break
		}
	}
	relay.Close()

	// The client writes on: its writes must end in an error, not block.
	client.SetWriteDeadline(time.Now().Add(hang))
	for {
		_, err := client.Write(chunk)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the client's write still blocks %s after the relay closed: the proxy holds it half-open", hang)
		}
		break
	}
	for deadline := time.Now().Add(hang); p.Open() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy still holds %d connections %s after the relay closed", p.Open(), hang)
		}
	}
}

// A client that shuts its write side still reads the answer through the
// tunnel: its half-close reaches the relay as EOF, the relay's answer
// and EOF reach the client.
func TestProxyTunnelClientHalfClose(t *testing.T) {
	p, client, cbr, relay := tunnel(t)
	go func() {
		relay.SetReadDeadline(time.Now().Add(hang))
		q, _ := io.ReadAll(relay) // until the client's half-close
		io.WriteString(relay, "answer to "+string(q))
		relay.Close()
	}()
	if _, err := io.WriteString(client, "question"); err != nil {
		t.Fatal(err)
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(hang))
	got, err := io.ReadAll(cbr)
	if err != nil || string(got) != "answer to question" {
		t.Fatalf("after its half-close the client read %q, %v", got, err)
	}
	for deadline := time.Now().Add(hang); p.Open() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy still holds %d connections %s after both ends closed", p.Open(), hang)
		}
	}
}
