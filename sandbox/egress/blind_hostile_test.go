package egress

// Hostile first flights on blind tunnels (blind.go), from an attack review
// of its first version: each test asserts the property blind.go claims, or
// that legitimate traffic still works. What it does not claim (ECH, a
// second ClientHello after a HelloRetryRequest, a Host inside TLS, CONNECT
// through an allowed proxy, a non-HTTP answer to an HTTP request) is in
// docs/security.md.

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	agentegress "github.com/shellbox/shellbox/agent/egress"
)

// hostEcho is a plain-HTTP origin that routes "by name" the way a virtual
// host front end does: it answers with the Host it was asked for.
func hostEcho(t *testing.T) string {
	t.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "host=%s", r.Host) }))
	t.Cleanup(origin.Close)
	return hostPort(t, origin.URL)
}

func readAnswer(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, "error: " + err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// TestBlindHostileHTTPNotRecognised: any request line HTTP servers accept
// is read as HTTP and its Host judged: a lower-case method (Go accepts any
// token), a long one.
func TestBlindHostileHTTPNotRecognised(t *testing.T) {
	r := blindRig(t)
	target := hostEcho(t)
	for _, req := range []string{
		"get / HTTP/1.1\r\nHost: denied.test\r\n\r\n",
		"GETXXXXXXXXXXXXXXXXX / HTTP/1.1\r\nHost: denied.test\r\n\r\n",
		"get / HTTP/1.1\r\nHost: ruled.test\r\n\r\n",
	} {
		c, br := r.connect(t, target, "")
		io.WriteString(c, req)
		if code, body := readAnswer(t, br); strings.Contains(body, "host=denied.test") || strings.Contains(body, "host=ruled.test") {
			t.Errorf("%q through a blind tunnel to %s: the origin served %d %q", req, target, code, body)
		}
	}
}

// TestBlindHostileTLSAlertFirst: a TLS record other than a ClientHello's
// first (a warning alert, which Go's crypto/tls server drops before routing
// by the hello after it) is refused.
func TestBlindHostileTLSAlertFirst(t *testing.T) {
	r := blindRig(t)
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "sni=%s", r.TLS.ServerName)
	}))
	origin.StartTLS()
	defer origin.Close()
	target := hostPort(t, origin.URL)
	for _, name := range []string{"denied.test", "ruled.test"} {
		c, _ := r.connect(t, target, "")
		c.Write([]byte{0x15, 0x03, 0x01, 0x00, 0x02, 0x01, 90}) // warning, user_canceled
		tc := tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
		if err := tc.Handshake(); err != nil {
			continue // refused: fine
		}
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", name)
		code, body := readAnswer(t, bufio.NewReader(tc))
		t.Errorf("alert record, then a ClientHello for %s: handshake done, origin answered %d %q", name, code, body)
	}
}

// TestBlindHostileResponseHeadUnbounded: a destination the sandbox chooses
// (any, with a network grant) sending an endless header line to a request
// the relay reads cannot grow the relay's memory: the answer's head is
// bounded (maxResponseHead) and the client answered 502.
func TestBlindHostileResponseHeadUnbounded(t *testing.T) {
	r := blindRig(t)
	const size = 96 << 20
	srv := tcpServer(t, func(c net.Conn) {
		bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-A: ")
		chunk := []byte(strings.Repeat("a", 1<<20))
		for range size >> 20 {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
		time.Sleep(5 * time.Second)
	})
	c, _ := r.connect(t, srv, "")
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", srv)
	var peak uint64
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
		time.Sleep(20 * time.Millisecond)
	}
	if grew := int64(peak) - int64(base); grew > 16<<20 {
		t.Errorf("one answer's head made the relay's heap grow by %d MiB", grew>>20)
	}
}

// TestBlindHostileNotTLS0x16: a client-first binary protocol whose first
// byte is 0x16 (MongoDB's little-endian message length, 22 mod 256) is not
// taken for TLS: it goes through as it came.
func TestBlindHostileNotTLS0x16(t *testing.T) {
	r := blindRig(t)
	const n = 0x116
	srv := tcpServer(t, func(c net.Conn) {
		msg := make([]byte, n)
		if _, err := io.ReadFull(c, msg); err == nil {
			c.Write(msg)
		}
	})
	c, br := r.connect(t, srv, "")
	msg := make([]byte, n)
	binary.LittleEndian.PutUint32(msg, n)         // messageLength
	binary.LittleEndian.PutUint32(msg[4:], 1)     // requestID
	binary.LittleEndian.PutUint32(msg[12:], 2013) // OP_MSG
	c.Write(msg)
	back := make([]byte, n)
	if _, err := io.ReadFull(br, back); err != nil {
		t.Errorf("a %d-byte MongoDB OP_MSG through a blind tunnel: %v", n, err)
	}
}

// TestBlindHostileIPv6Host: "Host: [addr]" (what curl, Go and browsers send
// to an IPv6 literal on the default port) names the tunnel's own host.
func TestBlindHostileIPv6Host(t *testing.T) {
	r := newRig(t, agentegress.ProxyConfig{})
	r.startRelay(t, RelayConfig{Check: func(c Conn) (Decision, error) {
		if host, _, err := net.SplitHostPort(c.Target); err == nil && host == "::1" {
			return Decision{}, nil
		}
		return Decision{}, fmt.Errorf("shellbox: egress to %s is not allowed", c.Target)
	}})
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skip(err)
	}
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "host=%s", r.Host) }))
	origin.Listener = l
	origin.Start()
	defer origin.Close()
	c, br := r.connect(t, l.Addr().String(), "")
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n")
	if code, body := readAnswer(t, br); code != 200 {
		t.Errorf("Host: [::1] on a tunnel to %s: %d %q", l.Addr(), code, body)
	}
}

// TestBlindHostileEarlyAnswer: a server answering before it read the
// request's body (413, 401 on an upload) and closing while the relay still
// writes the body: the client gets that answer.
func TestBlindHostileEarlyAnswer(t *testing.T) {
	r := blindRig(t)
	srv := tcpServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbig")
		time.Sleep(200 * time.Millisecond)
	})
	c, br := r.connect(t, srv, "")
	const body = 32 << 20
	go func() {
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", srv, body)
		io.Copy(c, io.LimitReader(zeros{}, body))
	}()
	if code, b := readAnswer(t, br); code != 413 {
		t.Errorf("an early 413 to an upload: the client read %d %q", code, b)
	}
}

// TestBlindHostileH2CUpgrade: "Upgrade: h2c" on a blind plain-HTTP tunnel
// is refused: the HTTP/2 requests after a 101 (:authority: any) would not
// be read. The server here, once upgraded, would serve what follows by the
// name each request gives.
func TestBlindHostileH2CUpgrade(t *testing.T) {
	r := blindRig(t)
	var hosts atomic.Value
	srv := tcpServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil || req.Header.Get("Upgrade") != "h2c" {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
		if req2, err := http.ReadRequest(br); err == nil { // stands for an h2 HEADERS frame
			hosts.Store(req2.Host)
			io.WriteString(c, "served "+req2.Host+"\n")
		}
	})
	c, br := r.connect(t, srv, "")
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", srv)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		return
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	br.ReadString('\n')
	if h, _ := hosts.Load().(string); h == "denied.test" {
		t.Errorf("after an h2c upgrade, a request for denied.test reached the destination unjudged")
	}
}

// TestBlindHostileLeadingCRLF: nginx and Apache skip empty lines before a
// request line (RFC 9112 2.2); so does the relay, and the request after
// them is judged. The server here skips them as nginx does.
func TestBlindHostileLeadingCRLF(t *testing.T) {
	r := blindRig(t)
	srv := tcpServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			b, err := br.Peek(1)
			if err != nil || (b[0] != '\r' && b[0] != '\n') {
				break
			}
			br.Discard(1)
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+fmt.Sprint(len("host=")+len(req.Host))+"\r\n\r\nhost="+req.Host)
	})
	c, br := r.connect(t, srv, "")
	io.WriteString(c, "\r\nGET / HTTP/1.1\r\nHost: ruled.test\r\n\r\n")
	if code, body := readAnswer(t, br); body == "host=ruled.test" {
		t.Errorf("CRLF, then a request for ruled.test: the origin served %d %q", code, body)
	}
}

// TestBlindHostileTextProtocolsAsHTTP: client-first text protocols whose
// first word is a token and a space (RTSP, SIP, Redis inline commands) are
// not taken for HTTP: they go through as they came.
func TestBlindHostileTextProtocolsAsHTTP(t *testing.T) {
	r := blindRig(t)
	echo := tcpServer(t, func(c net.Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil {
			io.WriteString(c, line)
		}
	})
	for _, first := range []string{"OPTIONS rtsp://cam/live RTSP/1.0\r\n", "REGISTER sip:x SIP/2.0\r\n", "SET key value\r\n"} {
		c, br := r.connect(t, echo, "")
		io.WriteString(c, first)
		if got, err := br.ReadString('\n'); got != first {
			t.Errorf("client-first %q: read %q, %v", first, got, err)
		}
	}
}

// TestBlindHostileStreaming: legitimate plain-HTTP traffic on a blind
// tunnel, re-framed: server-sent events arrive as sent, a request
// half-closed after it (nc -N) is answered, a WebSocket upgrade works.
func TestBlindHostileStreaming(t *testing.T) {
	r := blindRig(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Upgrade") == "websocket" {
			c, brw, _ := http.NewResponseController(w).Hijack()
			defer c.Close()
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			line, _ := brw.ReadString('\n')
			io.WriteString(c, "ws "+line)
			return
		}
		if req.URL.Path == "/sse" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: 1\n\n")
			http.NewResponseController(w).Flush()
			time.Sleep(3 * time.Second)
			return
		}
		io.WriteString(w, "plain")
	}))
	defer origin.Close()
	target := hostPort(t, origin.URL)

	c, br := r.connect(t, target, "")
	fmt.Fprintf(c, "GET /sse HTTP/1.1\r\nHost: %s\r\n\r\n", target)
	c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("SSE: %v", err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if line != "data: 1\n" {
		t.Errorf("SSE: the first event within 1.5 s: %q %v", line, err)
	}

	c2, br2 := r.connect(t, target, "")
	fmt.Fprintf(c2, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", target)
	c2.(*net.TCPConn).CloseWrite()
	if code, body := readAnswer(t, br2); code != 200 || body != "plain" {
		t.Errorf("a request, then the client's write side closed: %d %q", code, body)
	}

	c3, br3 := r.connect(t, target, "")
	fmt.Fprintf(c3, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", target)
	resp, err = http.ReadResponse(br3, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("WebSocket: %v %v", resp, err)
	}
	io.WriteString(c3, "hello\n")
	if line, err := br3.ReadString('\n'); line != "ws hello\n" {
		t.Errorf("WebSocket: %q %v", line, err)
	}
}

// TestBlindHostileRefusalUnrecorded: a tunnel closed for the name its first
// flight gave is counted denied (Observe: metrics), never allowed.
func TestBlindHostileRefusalUnrecorded(t *testing.T) {
	r := blindRig(t)
	origin := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer origin.Close()
	target := hostPort(t, origin.URL)
	c, _ := r.connect(t, target, "")
	if err := tls.Client(c, &tls.Config{ServerName: "denied.test", InsecureSkipVerify: true}).Handshake(); err == nil {
		t.Fatal("not refused")
	}
	var seen []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		seen = r.outcomesSeen()
		if len(seen) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(seen) != 1 || !strings.HasPrefix(seen[0], "denied") {
		t.Errorf("a tunnel refused for SNI denied.test is counted %q, want one denied", seen)
	}
}

// TestBlindHostileHostPort: a Host is judged at the tunnel's port, where
// its bytes go: a name the policy allows on 443 only is not reached in
// plain text on the tunnel's port by naming ":443" in Host.
func TestBlindHostileHostPort(t *testing.T) {
	r := newRig(t, agentegress.ProxyConfig{})
	r.startRelay(t, RelayConfig{Check: func(c Conn) (Decision, error) {
		host, port, _ := net.SplitHostPort(c.Target)
		if host == "127.0.0.1" || (host == "tls-only.test" && port == "443") {
			return Decision{}, nil
		}
		return Decision{}, fmt.Errorf("shellbox: egress to %s is not allowed", c.Target)
	}})
	target := hostEcho(t)
	c, br := r.connect(t, target, "")
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: tls-only.test:443\r\n\r\n")
	if code, body := readAnswer(t, br); code == 200 {
		t.Errorf("Host tls-only.test:443 on a plain tunnel to %s: %d %q", target, code, body)
	}
}
