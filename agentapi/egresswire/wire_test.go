package egresswire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// hang bounds how long a test waits for something that must happen: far
// beyond any machine's slowness, it only proves nothing hung.
const hang = 30 * time.Second

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		acc <- c
	}()
	d, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-acc
	if a == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d.(*net.TCPConn), a.(*net.TCPConn)
}

// splice runs Splice(a, a, b, b) as the agent's proxy does, closing both
// once it returns; the channel closes then.
func splice(a, b net.Conn) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Splice(a, a, b, b)
		a.Close()
		b.Close()
	}()
	return done
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatalf("%s: still running after %s", what, hang)
	}
}

// writeSeen closes seen when a Write starts.
type writeSeen struct {
	net.Conn
	once sync.Once
	seen chan struct{}
}

func (c *writeSeen) Write(p []byte) (int, error) {
	c.once.Do(func() { close(c.seen) })
	return c.Conn.Write(p)
}

// The relay closes while the client is not reading (the bug this
// guards): one half is blocked writing to the client, the other fails
// writing to the relay. Both must end, and the client's blocked write
// return, without the client reading or closing.
func TestSpliceEndsBothWhenRelayClosesOnUnreadingClient(t *testing.T) {
	// The client's side is a pipe: its writes block until the proxy reads
	// them, the proxy's writes until the client reads (which it never
	// does), whatever the kernel's buffer sizes.
	client, pipe := net.Pipe()
	defer client.Close()
	proxyEnd := &writeSeen{Conn: pipe, seen: make(chan struct{})}
	tunnel, relay := tcpPair(t)
	done := splice(proxyEnd, tunnel)

	// The relay answers a byte; once the proxy is writing it to the client
	// (where it blocks), the relay closes.
	if _, err := relay.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-proxyEnd.seen:
	case <-time.After(hang):
		t.Fatalf("the proxy did not pass the relay's byte on in %s", hang)
	}
	relay.Close()

	// The client writes on: the proxy forwards to a closed relay and
	// fails. The client's writes must then fail too, not block.
	wrote := make(chan error, 1)
	go func() {
		buf := make([]byte, 1024)
		for {
			if _, err := client.Write(buf); err != nil {
				wrote <- err
				return
			}
		}
	}()
	select {
	case err := <-wrote:
		t.Logf("client's write: %v", err)
	case <-time.After(hang):
		t.Fatalf("the client's write still blocks %s after the relay closed: the splice holds the connection half-open", hang)
	}
	waitDone(t, done, "Splice after the relay closed")
}

// Either half failing ends the other's read too: the relay resets while
// the client is idle, neither reading nor writing.
func TestSpliceEndsBothOnError(t *testing.T) {
	client, proxyEnd := tcpPair(t)
	tunnel, relay := tcpPair(t)
	done := splice(proxyEnd, tunnel)
	relay.SetLinger(0)
	relay.Close() // a reset: the proxy's read of the tunnel fails
	waitDone(t, done, "Splice after the relay's reset")
	client.SetReadDeadline(time.Now().Add(hang))
	if _, err := io.ReadAll(client); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the client's read still blocks %s after the splice ended", hang)
		}
	}
}

// A client that shuts its write side still reads the answer: its EOF is
// passed on as the relay's EOF, the other half goes on.
func TestSpliceClientHalfClose(t *testing.T) {
	client, proxyEnd := tcpPair(t)
	tunnel, relay := tcpPair(t)
	done := splice(proxyEnd, tunnel)

	go func() {
		req, _ := io.ReadAll(relay) // until the client's half-close
		relay.Write(append([]byte("answer to "), req...))
		relay.Close()
	}()
	if _, err := client.Write([]byte("question")); err != nil {
		t.Fatal(err)
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(hang))
	got, err := io.ReadAll(client)
	if err != nil {
		t.Fatalf("reading the answer after a half-close: %v", err)
	}
	if string(got) != "answer to question" {
		t.Fatalf("answer %q", got)
	}
	waitDone(t, done, "Splice after both halves ended")
}

// The relay's half-close (the destination's, passed on) reaches the
// client as EOF while the client's bytes still reach the relay.
func TestSpliceRelayHalfClose(t *testing.T) {
	client, proxyEnd := tcpPair(t)
	tunnel, relay := tcpPair(t)
	done := splice(proxyEnd, tunnel)

	if _, err := relay.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	relay.CloseWrite()
	client.SetReadDeadline(time.Now().Add(hang))
	got, err := io.ReadAll(client)
	if err != nil || string(got) != "hello" {
		t.Fatalf("client read %q, %v; want hello and EOF", got, err)
	}
	body := bytes.Repeat([]byte("after EOF "), 1<<14)
	go func() {
		client.Write(body)
		client.CloseWrite()
	}()
	relay.SetReadDeadline(time.Now().Add(hang))
	rest, err := io.ReadAll(relay)
	if err != nil || !bytes.Equal(rest, body) {
		t.Fatalf("relay read %d bytes, %v; want the client's %d after its own EOF", len(rest), err, len(body))
	}
	relay.Close()
	waitDone(t, done, "Splice after both halves ended")
}
