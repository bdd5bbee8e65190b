package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	agentegress "github.com/shellbox/shellbox/agent/egress"
)

// blindRig is a relay whose Check allows 127.0.0.1 and ok.test, terminates
// ruled.test (it has "rules") and refuses every other name, as a policy
// would: what a blind tunnel's first flight names is judged by it.
func blindRig(t *testing.T) *rig {
	t.Helper()
	r := newRig(t, agentegress.ProxyConfig{})
	r.startRelay(t, RelayConfig{Check: func(c Conn) (Decision, error) {
		host, _, _ := net.SplitHostPort(c.Target)
		switch host {
		case "127.0.0.1", "ok.test":
			return Decision{}, nil
		case "ruled.test":
			return Decision{Intercept: &Intercept{Host: host}}, nil
		}
		return Decision{}, fmt.Errorf("shellbox: egress to %s is not allowed by policy test", c.Target)
	}})
	return r
}

// TestBlindSNI: a blind tunnel's ClientHello naming another host is judged
// as a connection to that host: refused or terminated there, the tunnel is
// closed before the destination reads a byte; allowed there (or naming
// none), the handshake goes through untouched.
func TestBlindSNI(t *testing.T) {
	r := blindRig(t)
	origin := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin") }))
	defer origin.Close()
	target := hostPort(t, origin.URL)

	get := func(t *testing.T, serverName string) error {
		c, _ := r.connect(t, target, "")
		tc := tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			return err
		}
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "origin" {
			return fmt.Errorf("the origin answered %q", b)
		}
		return nil
	}
	for _, name := range []string{"", "127.0.0.1", "ok.test", "OK.TEST."} {
		if err := get(t, name); err != nil {
			t.Errorf("ServerName %q (allowed): %v", name, err)
		}
	}
	for _, name := range []string{"ruled.test", "denied.test"} {
		if err := get(t, name); err == nil {
			t.Errorf("ServerName %q on a tunnel to %s: the handshake went through", name, target)
		}
	}

	// The destination reads nothing of a refused hello.
	read := make(chan int64, 2)
	sink := tcpServer(t, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		read <- n
	})
	c, _ := r.connect(t, sink, "")
	tls.Client(c, &tls.Config{ServerName: "ruled.test", InsecureSkipVerify: true}).Handshake()
	// Not a ClientHello after a handshake record's first byte: refused.
	c2, br2 := r.connect(t, sink, "")
	io.WriteString(c2, "\x16\x03\x01\x00\x05hello")
	if _, err := br2.ReadByte(); err == nil {
		t.Error("a handshake record that is no ClientHello: the tunnel answered")
	}
	for range 2 {
		select {
		case n := <-read:
			if n != 0 {
				t.Errorf("the destination read %d bytes of a refused first flight", n)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a refused tunnel's destination connection was not closed in 20s")
		}
	}
}

// TestBlindPlainHTTP: plain-text requests on a blind tunnel are read one by
// one: each may name the tunnel's host or another it could have gone to;
// one naming a refused or terminated host is answered 421, naming why, and
// ends the tunnel.
func TestBlindPlainHTTP(t *testing.T) {
	r := blindRig(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "host=%s", r.Host) }))
	defer origin.Close()
	target := hostPort(t, origin.URL)

	c, br := r.connect(t, target, "")
	ask := func(host string) (*http.Response, string) {
		t.Helper()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("Host %s: %v", host, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for _, host := range []string{target, "ok.test"} {
		if resp, body := ask(host); resp.StatusCode != 200 || body != "host="+host {
			t.Errorf("Host %s (allowed): %s %q", host, resp.Status, body)
		}
	}
	resp, body := ask("ruled.test")
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(body, "terminated by the relay") {
		t.Errorf("Host ruled.test on a kept-alive blind tunnel: %s %q", resp.Status, body)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Error("the tunnel went on after a refused request")
	}

	c2, br2 := r.connect(t, target, "")
	fmt.Fprintf(c2, "GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	resp, err := http.ReadResponse(br2, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(b), "not allowed by policy test") {
		t.Errorf("Host denied.test: %s %q", resp.Status, b)
	}
}

// TestBlindOtherProtocols: what is neither TLS nor HTTP goes through as
// it came, whichever side speaks first.
func TestBlindOtherProtocols(t *testing.T) {
	r := blindRig(t)
	banner := tcpServer(t, func(c net.Conn) {
		io.WriteString(c, "220 ready\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "echo "+line)
	})
	c, br := r.connect(t, banner, "")
	if line, err := br.ReadString('\n'); err != nil || line != "220 ready\r\n" {
		t.Fatalf("server-first banner: %q %v", line, err)
	}
	io.WriteString(c, "HELO x\r\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo HELO x\r\n" {
		t.Errorf("after the banner: %q %v", line, err)
	}

	echo := tcpServer(t, func(c net.Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil {
			io.WriteString(c, line)
		}
	})
	// SOCKS5's greeting, SSH's identification, a Redis inline command
	// (each shows it is not an HTTP method within a few bytes), HTTP/2's
	// preface (not read).
	for _, first := range []string{"\x05\x01\x00\n", "SSH-2.0-test\r\n", "PING\r\n", "PRI * HTTP/2.0\r\n"} {
		c, br := r.connect(t, echo, "")
		io.WriteString(c, first)
		if got, err := br.ReadString('\n'); err != nil || got != first {
			t.Errorf("client-first %q: echoed %q, %v", first, got, err)
		}
	}
}
