package egress

import (
	"io"
	"net"
	"testing"
	"time"
)

// FuzzProxyHead feeds arbitrary request heads to the proxy's client handler
// (no relay: a valid request waits 1 ms, then is refused): no panic, and
// the handler returns for every input.
func FuzzProxyHead(f *testing.F) {
	for _, s := range []string{
		"CONNECT a.example:443 HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://a.example/x HTTP/1.1\r\nHost: a\r\nProxy-Authorization: Basic c2hlbGxib3g6dG9r\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
		"POST http://[::1]:8/ HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
		"CONNECT :0 HTTP/1.1\r\n\r\n",
		"\x00\xff\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	p := NewProxy(ProxyConfig{RelayWait: time.Millisecond})
	f.Fuzz(func(t *testing.T, head []byte) {
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.client(a)
		}()
		go func() {
			b.Write(head)
			b.Close()
		}()
		b.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, b)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the proxy did not finish with %q", head)
		}
	})
}
