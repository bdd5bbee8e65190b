package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/confine"
)

// testRules are localhost's in TestInterceptRules, named as a policy
// would name them.
func testRules(t testing.TB) *confine.HTTPRules {
	rs := &confine.HTTPRules{Default: confine.HTTPRule{Name: "http[0].default"}}
	for i, s := range []string{
		"allow GET /repos/**",
		"allow POST /repos/acme/*/pulls",
		"deny POST /repos/acme/*/merges",
	} {
		r, err := confine.ParseHTTPRule(s)
		if err != nil {
			t.Fatal(err)
		}
		r.Name = fmt.Sprintf("http[0].rules[%d]", i)
		rs.Rules = append(rs.Rules, r)
	}
	return rs
}

// TestInterceptRules: each request on a terminated (or plain-text)
// connection to a destination with rules is judged on its own, by its
// normal path: after a kept-alive reuse, when pipelined, whatever its
// spelling.
func TestInterceptRules(t *testing.T) {
	ir := newRuledRig(t, testRules(t))
	hc := ir.client()
	var reused bool
	do := func(method, rawURL string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, rawURL, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, rawURL, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	noMoreSeen := func(what string) {
		t.Helper()
		select {
		case h := <-ir.seen:
			t.Errorf("%s: the origin saw a request: %v", what, h)
		default:
		}
	}

	// An allowed GET, then a denied POST on the same kept-alive
	// connection: 403, the body naming the rule, as curl prints it.
	resp, body := do("GET", ir.url("/repos/acme/x?token=q"))
	if resp.StatusCode != 200 || body != "GET /repos/acme/x 0" {
		t.Fatalf("allowed GET: %s %q", resp.Status, body)
	}
	<-ir.seen
	resp, body = do("POST", ir.url("/repos/acme/x/merges"))
	if !reused {
		t.Error("the POST did not reuse the GET's connection")
	}
	want := `shellbox egress: POST localhost/repos/acme/x/merges is denied by rule http[0].rules[2]: "deny POST /repos/acme/*/merges"`
	if resp.StatusCode != http.StatusForbidden || strings.TrimSpace(body) != want {
		t.Fatalf("denied POST: %s %q\nwant %q", resp.Status, body, want)
	}
	noMoreSeen("denied POST")
	resp, body = do("POST", ir.url("/repos/acme/x/pulls"))
	if resp.StatusCode != 200 || body != "POST /repos/acme/x/pulls 0" {
		t.Fatalf("allowed POST: %s %q", resp.Status, body)
	}
	<-ir.seen
	// No rule: the default decides, and says so.
	resp, body = do("DELETE", ir.url("/repos/acme/x"))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "denied by rule http[0].default: the default (no rule matched)") {
		t.Fatalf("default: %s %q", resp.Status, body)
	}
	// The path judged is the normal one, and it is what the origin reads.
	resp, body = do("GET", ir.url("/repos//acme/./x/%7e"))
	if resp.StatusCode != 200 || body != "GET /repos/acme/x/~ 0" {
		t.Fatalf("normalised: %s %q", resp.Status, body)
	}
	<-ir.seen
	resp, body = do("GET", ir.url("/repos/../admin"))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "GET localhost/admin is denied by rule http[0].default") {
		t.Fatalf("dot segments: %s %q", resp.Status, body)
	}
	resp, body = do("GET", ir.url("/repos/acme%2Fx/pulls"))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `%2F encodes '/'`) || !strings.Contains(body, "http[0]") {
		t.Fatalf("encoded slash: %s %q", resp.Status, body)
	}
	noMoreSeen("refused paths")

	// Pipelined: an allowed GET and a denied POST in one write are each
	// judged; a denied one first ends the connection, and the allowed one
	// behind it is never sent.
	tlsOver := func() (*tls.Conn, *bufio.Reader) { return ir.tlsToOrigin(t) }
	tc, br := tlsOver()
	fmt.Fprintf(tc, "GET /repos/a HTTP/1.1\r\nHost: localhost\r\n\r\npost /repos/acme/b/merges HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\n\r\nabc")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("pipelined GET: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	<-ir.seen
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get("Shellbox-Error"), "post localhost/repos/acme/b/merges is denied by rule http[0].rules[2]") {
		t.Fatalf("pipelined POST: %v %v", resp, err)
	}
	tc, br = tlsOver()
	fmt.Fprintf(tc, "POST /repos/acme/b/merges HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\nGET /repos/a HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("pipelined denied first: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp, err := http.ReadResponse(br, nil); err == nil {
		t.Errorf("a request pipelined behind a denied one was answered: %s", resp.Status)
	}
	noMoreSeen("pipelined behind a denial")
	// An upgrade to h2c would carry requests no rule reads.
	tc, br = tlsOver()
	fmt.Fprintf(tc, "GET /repos/a HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get("Shellbox-Error"), "Upgrade: h2c") {
		t.Errorf("h2c upgrade: %v %v", resp, err)
	}
	noMoreSeen("h2c")

	// Plain http:// to the destination: parsed and judged alike, and
	// given no credential.
	plainURL := "http://localhost:" + ir.plain.URL[strings.LastIndex(ir.plain.URL, ":")+1:]
	phc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: ir.proxyAddr})}, Timeout: 20 * time.Second}
	req, _ := http.NewRequest("GET", plainURL+"/repos/p", nil)
	req.Header.Set("Authorization", "Bearer "+testPlaceholder)
	presp, err := phc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	if presp.StatusCode != 200 || string(b) != "GET /repos/p 0" {
		t.Fatalf("plain GET: %s %q", presp.Status, b)
	}
	if got := (<-ir.seen).Get("Authorization"); got != "Bearer "+testPlaceholder {
		t.Errorf("plain text carried %q", got)
	}
	presp, err = phc.Post(plainURL+"/repos/acme/p/merges", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(presp.Body)
	presp.Body.Close()
	if presp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "is denied by rule http[0].rules[2]") {
		t.Fatalf("plain POST: %s %q", presp.Status, b)
	}
	noMoreSeen("plain POST")

	// Every request's record names the rule that decided.
	recs := ir.waitRecords(t, 13)
	got := make([]string, len(recs))
	for i, r := range recs {
		got[i] = fmt.Sprintf("%s %s %d %s", r.Method, r.Path, r.Status, r.Rule)
		if (r.Status >= 400) != (r.Refused != "") {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	wantRecs := []string{
		"GET /repos/acme/x 200 http[0].rules[0]",
		"POST /repos/acme/x/merges 403 http[0].rules[2]",
		"POST /repos/acme/x/pulls 200 http[0].rules[1]",
		"DELETE /repos/acme/x 403 http[0].default",
		"GET /repos/acme/x/~ 200 http[0].rules[0]",
		"GET /admin 403 http[0].default",
		"GET /repos/acme%2Fx/pulls 400 http[0]",
		"GET /repos/a 200 http[0].rules[0]",
		"post /repos/acme/b/merges 403 http[0].rules[2]",
		"POST /repos/acme/b/merges 403 http[0].rules[2]",
		"GET /repos/a 403 http[0]",
		"GET /repos/p 200 http[0].rules[0]",
		"POST /repos/acme/p/merges 403 http[0].rules[2]",
	}
	// In no set order: a request's record is written once its answer is
	// sent (a refusal's before), so records of requests on different
	// connections may come in either order.
	got = got[:len(wantRecs)]
	slices.Sort(got)
	slices.Sort(wantRecs)
	if strings.Join(got, "\n") != strings.Join(wantRecs, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantRecs, "\n"))
	}
}

// waitRecords waits for n records (each is written once its answer is
// sent, so the last may trail the client) and returns them.
func (ir *interceptRig) waitRecords(t *testing.T, n int) []RequestRecord {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		recs := ir.recorded()
		if len(recs) >= n || time.Now().After(deadline) {
			if len(recs) < n {
				t.Fatalf("%d records, want %d: %+v", len(recs), n, recs)
			}
			return recs
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkInterceptRules: one small HTTPS GET on a kept-alive terminated
// connection, without rules and with them (an allowed request, judged),
// side by side.
func BenchmarkInterceptRules(b *testing.B) {
	for _, c := range []struct {
		name  string
		rules *confine.HTTPRules
	}{{"terminated", nil}, {"ruled", testRules(b)}} {
		b.Run(c.name, func(b *testing.B) {
			ir := newRuledRig(b, c.rules)
			tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: ir.proxyAddr}), TLSClientConfig: &tls.Config{RootCAs: ir.tenantPool}}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr}
			get := func() {
				resp, err := hc.Get(ir.url("/repos/acme/x/pulls/1"))
				if err != nil || resp.StatusCode != 200 {
					b.Fatal(resp, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			get()
			for b.Loop() {
				get()
			}
		})
	}
}

// TestInterceptUpgradeAsked: past a 101 the relay splices bytes it does
// not read, so a 101 the request did not ask for (a server made to answer
// one) is refused, and the requests behind it never reach the origin
// unjudged; a WebSocket upgrade the request asked for is spliced.
func TestInterceptUpgradeAsked(t *testing.T) {
	ir := newRuledRig(t, testRules(t))
	tlsOver := func() (*tls.Conn, *bufio.Reader) { return ir.tlsToOrigin(t) }
	tc, br := tlsOver()
	fmt.Fprintf(tc, "GET /repos/status/101 HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusBadGateway || !strings.Contains(resp.Header.Get("Shellbox-Error"), "switched protocols") {
		t.Fatalf("a 101 nobody asked for: %v %v", resp, err)
	}
	<-ir.seen
	io.Copy(io.Discard, resp.Body)
	// The connection is over: a denied request written after it reaches
	// nothing.
	fmt.Fprintf(tc, "DELETE /admin HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if line, err := br.ReadString('\n'); err == nil {
		t.Errorf("after the refused 101 the relay answered %q", line)
	}
	select {
	case h := <-ir.seen:
		t.Errorf("the origin saw a request after the refused 101: %v", h)
	default:
	}

	// Asked for: spliced, both ways.
	tc, br = tlsOver()
	fmt.Fprintf(tc, "GET /repos/ws HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("a WebSocket upgrade: %v %v", resp, err)
	}
	<-ir.seen
	fmt.Fprintf(tc, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo ping\n" {
		t.Errorf("through the upgraded connection: %q %v", line, err)
	}
}

// TestInterceptEmptyBodyStaysEmpty: a POST with Content-Length: 0 goes
// upstream as it came, not reframed as chunked (which some servers answer
// 411); one with a body keeps its length.
func TestInterceptEmptyBodyStaysEmpty(t *testing.T) {
	ir := newRuledRig(t, testRules(t))
	hc := ir.client()
	for _, c := range []struct{ body, want string }{{"", "te= cl=0"}, {"abc", "te= cl=3"}} {
		resp, err := hc.Post(ir.url("/repos/acme/x/pulls"), "text/plain", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		<-ir.seen
		if got := resp.Header.Get("X-Framing"); resp.StatusCode != 200 || got != c.want {
			t.Errorf("POST of %q: %s, the origin read %q, want %q", c.body, resp.Status, got, c.want)
		}
	}
}

// tlsToOrigin opens a connection through the proxy and relay to the TLS
// origin as localhost, trusting the tenant's CA, with a 20 s deadline.
func (ir *interceptRig) tlsToOrigin(t *testing.T) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	port := ir.origin.URL[strings.LastIndex(ir.origin.URL, ":")+1:]
	c, br := ir.connect(t, "localhost:"+port, "")
	tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: "localhost", RootCAs: ir.tenantPool})
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	return tc, bufio.NewReader(tc)
}
