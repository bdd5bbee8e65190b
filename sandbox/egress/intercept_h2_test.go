package egress

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestInterceptH2: a client offering h2 to a host whose server speaks it
// speaks h2 both ways through the terminating relay, and every stream is
// judged as an HTTP/1.1 request is: the credential injected (never
// echoed back, in a header or a trailer), a denied path answered 403 as
// on HTTP/1.1, a stream naming another authority 421; the audit shows no
// value.
func TestInterceptH2(t *testing.T) {
	ir := newOriginRig(t, testRules(t), true)
	h2c := ir.client()
	h1c := ir.client()
	h1c.Transport.(*http.Transport).ForceAttemptHTTP2 = false
	h1c.Transport.(*http.Transport).TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	do := func(hc *http.Client, method, path string, body io.Reader) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ir.url(path), body)
		req.Header.Set("Authorization", "Bearer "+testPlaceholder)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}

	resp, body := do(h2c, "GET", "/repos/acme/x?token=q", nil)
	if resp.StatusCode != 200 || body != "GET /repos/acme/x 0" || resp.Proto != "HTTP/2.0" || resp.Header.Get("X-Proto") != "HTTP/2.0" {
		t.Fatalf("h2 GET: %s %s (origin: %s) %q", resp.Status, resp.Proto, resp.Header.Get("X-Proto"), body)
	}
	if got := (<-ir.seen).Get("Authorization"); got != "Bearer "+testSecret {
		t.Errorf("origin saw %q", got)
	}
	// A streamed body goes up, counted; trailers come back, scrubbed.
	resp, body = do(h2c, "POST", "/repos/acme/x/pulls", strings.NewReader(strings.Repeat("p", 70000)))
	if resp.StatusCode != 200 || body != "POST /repos/acme/x/pulls 70000" {
		t.Fatalf("h2 POST: %s %q", resp.Status, body)
	}
	<-ir.seen

	// The same denied request on h2 and on HTTP/1.1: the same answer.
	want := `shellbox egress: POST localhost/repos/acme/x/merges is denied by rule http[0].rules[2]: "deny POST /repos/acme/*/merges"`
	for _, c := range []struct {
		proto string
		hc    *http.Client
	}{{"HTTP/2.0", h2c}, {"HTTP/1.1", h1c}} {
		resp, body := do(c.hc, "POST", "/repos/acme/x/merges", strings.NewReader("m"))
		if resp.Proto != c.proto || resp.StatusCode != http.StatusForbidden || strings.TrimSpace(body) != want || resp.Header.Get("Shellbox-Error") != want {
			t.Errorf("%s denied: %s %s %q", c.proto, resp.Proto, resp.Status, body)
		}
	}
	// The h2 connection goes on after a refused stream, each judged.
	if resp, body := do(h2c, "GET", "/repos/acme/y", nil); resp.StatusCode != 200 || body != "GET /repos/acme/y 0" || resp.Proto != "HTTP/2.0" {
		t.Errorf("after a refusal: %s %s %q", resp.Proto, resp.Status, body)
	}
	<-ir.seen
	// An HTTP/1.1 client is relayed over HTTP/1.1 upstream too.
	if resp, _ := do(h1c, "GET", "/repos/acme/z", nil); resp.Proto != "HTTP/1.1" || resp.Header.Get("X-Proto") != "HTTP/1.1" {
		t.Errorf("h1 client: %s, origin %s", resp.Proto, resp.Header.Get("X-Proto"))
	}
	<-ir.seen

	// Streams naming another authority on the connection (as a client
	// coalescing connections would): 421, the origin sees nothing; one
	// for the host after them on the same connection goes.
	cc := ir.h2Conn(t)
	for _, authority := range []string{"evil.example", "evil.example:" + ir.port(), "localhost.evil.example"} {
		req, _ := http.NewRequest("GET", ir.url("/repos/acme/x"), nil)
		req.Host = authority
		req.Header.Set("Authorization", "Bearer "+testPlaceholder)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatalf(":authority %s: %v", authority, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(resp.Header.Get("Shellbox-Error"), "a request for "+authority+" on a connection to localhost") {
			t.Errorf(":authority %s: %s %q", authority, resp.Status, resp.Header.Get("Shellbox-Error"))
		}
	}
	select {
	case h := <-ir.seen:
		t.Errorf("the origin saw a request for another authority: %v", h)
	default:
	}
	req, _ := http.NewRequest("GET", ir.url("/repos/acme/x"), nil)
	resp, err := cc.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after 421s: %v %v", resp, err)
	}
	resp.Body.Close()
	<-ir.seen

	recs := ir.recorded()
	if s := fmt.Sprintf("%+v", recs); strings.Contains(s, testSecret) || strings.Contains(s, testPlaceholder) || strings.Contains(s, "token=q") {
		t.Errorf("records show a value: %s", s)
	}
	if r := recs[0]; r.Method != "GET" || r.Path != "/repos/acme/x" || r.Status != 200 || strings.Join(r.Credentials, ",") != "test" || r.Rule != "http[0].rules[0]" {
		t.Errorf("h2 GET record: %+v", r)
	}
	if r := recs[1]; r.BytesOut != 70000 || r.BytesIn != int64(len("POST /repos/acme/x/pulls 70000")) {
		t.Errorf("h2 POST record: %+v", r)
	}
	if r := recs[2]; r.Status != http.StatusForbidden || r.Rule != "http[0].rules[2]" || r.Refused == "" {
		t.Errorf("h2 denied record: %+v", r)
	}
	if r := recs[len(recs)-2]; r.Status != http.StatusMisdirectedRequest || r.Path != "/repos/acme/x" {
		t.Errorf("421 record: %+v", r)
	}
}

// TestInterceptH2Trailers: an answer's trailers (gRPC's status) reach an
// h2 client, a credential echoed in one scrubbed.
func TestInterceptH2Trailers(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	req, _ := http.NewRequest("POST", ir.url("/trailers"), strings.NewReader("msg"))
	req.Header.Set("Authorization", "Bearer "+testPlaceholder)
	req.Header.Set("Te", "trailers")
	resp, err := ir.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	<-ir.seen
	if resp.Proto != "HTTP/2.0" || string(b) != "body" || resp.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("%s %q trailers %v", resp.Proto, b, resp.Trailer)
	}
	if got := resp.Trailer.Get("X-Echo-Trailer"); strings.Contains(got, testSecret) || got == "" {
		t.Errorf("echoed trailer: %q", got)
	}
}

// TestInterceptH2Curl: curl --http2 (nghttp2) through the proxy to the
// terminating relay, the credential injected.
func TestInterceptH2Curl(t *testing.T) {
	out, err := exec.Command("curl", "-V").Output()
	if err != nil || !bytes.Contains(out, []byte("HTTP2")) {
		t.Skipf("no curl with HTTP/2 here (%v)", err)
	}
	ir := newOriginRig(t, testRules(t), true)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, ir.tenantPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	curl := func(method, path string) (string, string) {
		cmd := exec.Command("curl", "-sS", "--http2", "--proxy", "http://"+ir.proxyAddr, "--cacert", ca,
			"-X", method, "-H", "Authorization: Bearer "+testPlaceholder, "-w", "\n%{http_version} %{http_code}", ir.url(path))
		cmd.Env = append(os.Environ(), "NO_PROXY=", "no_proxy=")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("curl %s %s: %v\n%s", method, path, err, b)
		}
		s := string(b)
		i := strings.LastIndexByte(s, '\n')
		return s[:i], s[i+1:]
	}
	body, status := curl("GET", "/repos/acme/x")
	if status != "2 200" || body != "GET /repos/acme/x 0" {
		t.Fatalf("curl GET: %s %q", status, body)
	}
	if got := (<-ir.seen).Get("Authorization"); got != "Bearer "+testSecret {
		t.Errorf("origin saw %q", got)
	}
	body, status = curl("POST", "/repos/acme/x/merges")
	if status != "2 403" || !strings.Contains(body, "is denied by rule http[0].rules[2]") {
		t.Errorf("curl denied: %s %q", status, body)
	}
}

func (ir *interceptRig) port() string { return ir.origin.URL[strings.LastIndex(ir.origin.URL, ":")+1:] }

// h2Conn is an HTTP/2 connection of the sandbox to localhost through the
// proxy (SNI localhost), on which requests can name any authority.
func (ir *interceptRig) h2Conn(t *testing.T) *http2.ClientConn {
	t.Helper()
	c, br := ir.connect(t, "localhost:"+ir.port(), "")
	tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: "localhost", RootCAs: ir.tenantPool, NextProtos: []string{http2.NextProtoTLS}})
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
		t.Fatalf("negotiated %q", p)
	}
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestInterceptH2Bounds: the relay's h2 server advertises its bounds
// (streams at once, a request's header list as HTTP/1.1's head), refuses
// CONNECT inside, and sends GOAWAY once the upstream's connection ends.
func TestInterceptH2Bounds(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	cc := ir.h2Conn(t)
	req, _ := http.NewRequest("GET", ir.url("/a"), nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-ir.seen
	if n := cc.State().MaxConcurrentStreams; n != h2MaxStreams {
		t.Errorf("streams advertised: %d", n)
	}
	req, _ = http.NewRequest("GET", ir.url("/a"), nil)
	req.Header.Set("X-Big", strings.Repeat("b", maxRequestHead+1))
	if resp, err := cc.RoundTrip(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a header list over %d bytes: %s", maxRequestHead, resp.Status)
		}
	} else if !strings.Contains(err.Error(), "header list larger than peer's advertised limit") {
		t.Errorf("a header list over %d bytes: %v", maxRequestHead, err)
	}
	req, _ = http.NewRequest("CONNECT", "https://evil.example:443", nil)
	req.Host = "localhost:" + ir.port()
	if resp, err := cc.RoundTrip(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("CONNECT inside: %v %v", resp, err)
	}
	select {
	case h := <-ir.seen:
		t.Errorf("the origin saw %v", h)
	default:
	}
	ir.origin.CloseClientConnections()
	deadline := time.Now().Add(10 * time.Second)
	for cc.CanTakeNewRequest() {
		if time.Now().After(deadline) {
			t.Fatal("the client's connection still takes requests once the upstream's ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
