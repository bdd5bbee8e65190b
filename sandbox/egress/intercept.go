package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http2"

	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/confine"
)

// Intercept makes the relay terminate a connection's TLS instead of
// tunnelling it blind, so that each HTTP request on it can be rewritten
// (credentials injected), judged (Rules) and seen (method, path, status)
// before it goes upstream over a TLS connection of the relay's own.
type Intercept struct {
	// Host is the name the connection is for (its target's): the leaf the
	// client is shown is for it, the upstream must prove it, and every
	// request on the connection must name it (Host, SNI).
	Host string
	// Cert returns the leaf certificate for Host, signed by a CA the
	// sandbox trusts (the tenant's).
	Cert func() (*tls.Certificate, error)
	// Roots verify the upstream's certificate; nil: the system's.
	Roots *x509.CertPool
	// Rewrite, if set, rewrites a request's header just before it goes
	// upstream over TLS (never a plain-text one). It returns what to do to
	// the response's header (scrub what the server echoes), and the names
	// of the credentials it used (for Observe). An error refuses the
	// request (502, with the error's text: it must name no secret's
	// value).
	Rewrite func(h http.Header) (scrub func(http.Header), used []string, err error)
	// Rules, if set, judge every request on the connection by its method
	// and normal path (confine.HTTPRule), TLS or plain text: a refused one
	// is answered 403 naming the rule and ends the connection; an allowed
	// one goes upstream with its path as judged (confine.EncodePath).
	// RulesName names the rules' destination (a policy's key), for a
	// request refused before any rule could judge it (an ambiguous path).
	Rules     *confine.HTTPRules
	RulesName string
	// Observe, if set, hears each request once answered (or refused).
	Observe func(RequestRecord)
	// Elsewhere, if set, judges a request that names another host than
	// Host (blind.go: a blind tunnel's plain-text requests): nil allows
	// it. Unset, every request must name Host.
	Elsewhere func(host string) error
}

// RequestRecord is one request on an intercepted connection, for the
// audit: never a header value.
type RequestRecord struct {
	Host        string
	Method      string
	Path        string // the path alone: the query may carry tokens
	Status      int    // what the client was answered (a gRPC refusal: the HTTP status it stands for)
	BytesOut    int64  // the request's body, sent upstream
	BytesIn     int64  // the response's body, sent to the client
	Credentials []string
	Duration    time.Duration
	// Rule is where the HTTP rule that decided is written (Rules'), and
	// RuleText the rule itself; "" when the destination has no rules.
	Rule, RuleText string
	// Refused, if set, is why the relay answered itself. A record of a
	// connection rather than of a request (its TLS failed, its HTTP/2
	// layer refused streams before the relay read them, each counted)
	// has Method "TLS" or "HTTP/2", no Path, and Status 0 unless the
	// client was answered (502).
	Refused string
}

// Bounds of an intercepted connection.
const (
	// handshakeTimeout bounds each TLS handshake (the client's, upstream).
	handshakeTimeout = 30 * time.Second
	// maxRequestHead bounds a request's head (as the proxy's).
	maxRequestHead = 64 << 10
	// headTimeout bounds reading a request's head once its first byte came.
	headTimeout = 30 * time.Second
	// maxResponseHead bounds an answer's head (net/http's client: 1 MiB).
	maxResponseHead = 1 << 20
	// earlyAnswerWait bounds waiting for an answer once sending the
	// request upstream failed.
	earlyAnswerWait = 5 * time.Second
)

// readerConn is a net.Conn whose reads come from r (a bufio.Reader over
// the conn holding read-ahead).
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// intercept serves one intercepted connection: agent is the client's
// side (the proxy's tunnel), out the dialled upstream. Bytes that are not
// a TLS handshake go through blind, or, when the destination has Rules,
// are read as plain HTTP requests and judged: a plain-text request is
// never given a credential.
func (r *Relay) intercept(ctx context.Context, agent *agentConn, out net.Conn, ic *Intercept) {
	agent.SetReadDeadline(time.Now().Add(handshakeTimeout))
	first, err := agent.br.Peek(1)
	agent.SetReadDeadline(time.Time{})
	if err != nil {
		return
	}
	if first[0] != 0x16 { // not a TLS handshake record
		if ic.Rules == nil {
			egresswire.Splice(agent.Conn, agent.br, out, out)
			return
		}
		plain := *ic
		plain.Rewrite = nil
		r.serve(agent.Conn, agent.br, out, &plain)
		return
	}
	// The upstream's handshake runs inside the client's, once its
	// ClientHello is read: the client is offered the protocol the
	// upstream agreed to of those the client offered (h2 or HTTP/1.1), so
	// each side speaks one protocol end to end and a request is relayed
	// as it came, never translated between them.
	var (
		up    *tls.Conn
		upErr error
	)
	leaf := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return ic.Cert() }
	client := tls.Server(readerConn{agent.Conn, agent.br}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			// A client naming another host than the one the connection was
			// allowed for is refused: the leaf is the target's only.
			if h.ServerName != "" && !sameHost(h.ServerName, ic.Host) {
				return nil, fmt.Errorf("shellbox egress: TLS names %s on a connection to %s", egresswire.Clip(h.ServerName), ic.Host)
			}
			if up == nil && upErr == nil {
				up, upErr = dialUpstreamTLS(ctx, out, ic, slices.Contains(h.SupportedProtos, http2.NextProtoTLS))
			}
			protos := []string{"http/1.1"}
			if upErr == nil && up.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS {
				protos = []string{http2.NextProtoTLS, "http/1.1"}
			}
			return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: protos, GetCertificate: leaf}, nil
		},
	})
	// Both handshakes, one after the other.
	hctx, cancel := context.WithTimeout(ctx, 2*handshakeTimeout)
	err = client.HandshakeContext(hctx)
	cancel()
	if up != nil {
		defer up.Close()
	}
	if err != nil {
		r.logs.info("egress TLS from the sandbox failed", "host", ic.Host, "err", err.Error())
		r.refusedConn(ic, "TLS", 0, "shellbox egress: TLS from the sandbox failed: "+err.Error())
		return
	}
	defer client.Close()
	if upErr != nil {
		r.logs.info("egress TLS to upstream failed", "host", ic.Host, "err", upErr.Error())
		r.refusedConn(ic, "TLS", http.StatusBadGateway, fmt.Sprintf("shellbox egress: TLS to %s failed: %v", ic.Host, upErr))
		// The answer follows the client's first request (offered
		// HTTP/1.1 only, it speaks that): one before it would be
		// unsolicited, and dropped.
		client.SetReadDeadline(time.Now().Add(headTimeout))
		cbr := bufio.NewReaderSize(io.LimitReader(client, maxRequestHead), 4096)
		http.ReadRequest(cbr)
		answer(client, http.StatusBadGateway, fmt.Sprintf("shellbox egress: TLS to %s failed: %v", ic.Host, upErr))
		lingerClose(client, cbr)
		return
	}
	if client.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS {
		r.serveH2(client, up, ic)
		return
	}
	if up.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS {
		// Not offered to such a client (above): never relayed.
		r.refusedConn(ic, "TLS", http.StatusBadGateway, "shellbox egress: "+ic.Host+" speaks HTTP/2 on a connection whose client speaks HTTP/1.1")
		answer(client, http.StatusBadGateway, fmt.Sprintf("shellbox egress: %s speaks HTTP/2 on a connection whose client speaks HTTP/1.1", ic.Host))
		return
	}
	r.serve(client, client, up, ic)
}

// dialUpstreamTLS is the relay's TLS over out, to ic.Host, verified by
// ic.Roots; it offers h2 as well as HTTP/1.1 when h2 is set.
func dialUpstreamTLS(ctx context.Context, out net.Conn, ic *Intercept, h2 bool) (*tls.Conn, error) {
	protos := []string{"http/1.1"}
	if h2 {
		protos = []string{http2.NextProtoTLS, "http/1.1"}
	}
	up := tls.Client(out, &tls.Config{MinVersion: tls.VersionTLS12, ServerName: ic.Host, RootCAs: ic.Roots, NextProtos: protos})
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	if err := up.HandshakeContext(hctx); err != nil {
		return nil, err
	}
	return up, nil
}

// serve relays the requests of one connection, one at a time in the
// order they came, each judged on its own (pipelined ones wait in cbr
// until the one before is answered): client is the client's side, read
// through cr; up the upstream's.
func (r *Relay) serve(client net.Conn, cr io.Reader, up net.Conn, ic *Intercept) {
	lr := &io.LimitedReader{R: cr}
	cbr := bufio.NewReaderSize(lr, 4096)
	ulr := &io.LimitedReader{R: up, N: 1<<63 - 1}
	ubr := bufio.NewReaderSize(ulr, 32<<10)
	for {
		if !r.exchange(client, lr, cbr, up, ulr, ubr, ic) {
			return
		}
	}
}

// readResponse reads an answer's head from ubr, the bytes of it not yet
// buffered bounded by maxResponseHead (ulr, under ubr): an upstream cannot
// grow the relay's memory with an endless header line. The body is not
// bounded.
func readResponse(ulr *io.LimitedReader, ubr *bufio.Reader, req *http.Request) (*http.Response, error) {
	ulr.N = maxResponseHead
	resp, err := http.ReadResponse(ubr, req)
	over := ulr.N <= 0
	ulr.N = 1<<63 - 1
	if err != nil && over {
		return nil, fmt.Errorf("its head is over %d bytes", maxResponseHead)
	}
	return resp, err
}

// exchange relays one request and its answer; false when the connection
// is done (closed, broken, refused, or switched protocols and spliced).
func (r *Relay) exchange(client net.Conn, lr *io.LimitedReader, cbr *bufio.Reader, up net.Conn, ulr *io.LimitedReader, ubr *bufio.Reader, ic *Intercept) bool {
	// Waiting for the next request is unbounded (a kept-alive connection,
	// as a blind tunnel's); its head, once begun, is not.
	lr.N = 1<<63 - 1
	// Blank lines before a request line are skipped, as servers do (RFC
	// 9112 §2.2), a bounded number of them.
	for blank := 0; ; blank++ {
		b, err := cbr.Peek(1)
		if err != nil || blank > maxRequestHead {
			return false
		}
		if b[0] != '\r' && b[0] != '\n' {
			break
		}
		cbr.Discard(1)
	}
	lr.N = maxRequestHead + int64(cbr.Buffered())
	client.SetReadDeadline(time.Now().Add(headTimeout))
	req, err := http.ReadRequest(cbr)
	client.SetReadDeadline(time.Time{})
	lr.N = 1<<63 - 1
	start := time.Now()
	rec := RequestRecord{Host: ic.Host}
	refuse := func(status int, why string) bool {
		rec.Status, rec.Refused, rec.Duration = status, why, time.Since(start)
		r.observeRequest(ic, rec)
		answer(client, status, why)
		lingerClose(client, cbr)
		return false
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return false
		}
		return refuse(http.StatusBadRequest, "shellbox egress: bad request: "+err.Error())
	}
	rec.Method, rec.Path = req.Method, req.URL.Path
	switch {
	case req.Method == http.MethodConnect:
		return refuse(http.StatusMethodNotAllowed, "shellbox egress: CONNECT inside a tunnel to "+ic.Host+" is not relayed")
	case !sameHost(hostOnly(req.Host), ic.Host):
		// Pipelined or kept-alive requests all go where this connection
		// was allowed and proven to go: one naming another host (Host
		// header, absolute URL) is refused, not re-routed; on a blind
		// tunnel, unless that host is one it could have gone to as well.
		why := fmt.Sprintf("shellbox egress: a request for %s on a connection to %s", egresswire.Clip(req.Host), ic.Host)
		if ic.Elsewhere != nil {
			if req.Host == "" {
				break // (HTTP/1.0) it names no other host
			}
			err := ic.Elsewhere(req.Host)
			if err == nil {
				break
			}
			why += ": " + egresswire.OneLine(err.Error())
		}
		return refuse(http.StatusMisdirectedRequest, why)
	}
	if ic.Rules != nil {
		if status, why := judge(req, ic, &rec); why != "" {
			return refuse(status, why)
		}
	}
	if up := req.Header.Values("Upgrade"); ic.Elsewhere != nil && len(up) > 0 && !onlyWebSocket(up) {
		// On a blind tunnel as under rules: an upgrade to another HTTP
		// (h2c) would carry requests naming any host unread.
		return refuse(http.StatusForbidden, fmt.Sprintf("shellbox egress: Upgrade: %s to %s is refused: the requests it would carry are not read",
			egresswire.Clip(strings.Join(up, ", ")), ic.Host))
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// Answered here: the body is streamed upstream with the head.
		req.Header.Del("Expect")
		if _, err := io.WriteString(client, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return false
		}
	}
	var scrub func(http.Header)
	if ic.Rewrite != nil {
		var used []string
		scrub, used, err = ic.Rewrite(req.Header)
		rec.Credentials = used
		if err != nil {
			return refuse(http.StatusBadGateway, "shellbox egress: "+err.Error())
		}
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		// Else Request.Write adds Go's.
		req.Header["User-Agent"] = []string{""}
	}
	// A request without a body keeps http.NoBody: wrapped, Write would
	// send an empty POST chunked, which some servers answer 411.
	body := &counter{r: req.Body}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = body
	}
	werr := req.Write(up)
	rec.BytesOut = body.n
	if werr != nil {
		// A server may answer before it has read the whole request (413,
		// 401) and close: that answer is the client's, if it came.
		up.SetReadDeadline(time.Now().Add(earlyAnswerWait))
	}
	resp, err := readResponse(ulr, ubr, req)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		// 100 Continue was answered already; other interim answers (103)
		// are dropped.
		resp, err = readResponse(ulr, ubr, req)
	}
	if werr != nil {
		up.SetReadDeadline(time.Time{})
		if err != nil {
			rec.Status, rec.Refused, rec.Duration = http.StatusBadGateway, "upstream write: "+werr.Error(), time.Since(start)
			r.observeRequest(ic, rec)
			return false
		}
		resp.Close = true
	}
	if err != nil {
		return refuse(http.StatusBadGateway, fmt.Sprintf("shellbox egress: reading %s's answer: %v", ic.Host, err))
	}
	if resp.StatusCode == http.StatusSwitchingProtocols && !upgradeAsked(req.Header, resp.Header) {
		// Past a 101 the relay splices bytes it no longer reads: only an
		// upgrade the request asked for, to a protocol it offered, goes
		// there. A 101 for anything else (a server made to answer one)
		// would carry the next requests past every rule unjudged.
		resp.Body.Close()
		return refuse(http.StatusBadGateway, fmt.Sprintf("shellbox egress: %s switched protocols (%q) without the request asking for it: refused", ic.Host, egresswire.Clip(resp.Header.Get("Upgrade"))))
	}
	if scrub != nil {
		scrub(resp.Header)
	}
	rb := &counter{r: resp.Body}
	resp.Body = rb
	werr = resp.Write(client)
	resp.Body.Close()
	rec.Status, rec.BytesIn, rec.Duration = resp.StatusCode, rb.n, time.Since(start)
	r.observeRequest(ic, rec)
	if werr != nil {
		return false
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// A WebSocket (or another upgrade): bytes from here on.
		egresswire.Splice(client, cbr, up, ubr)
		return false
	}
	return !req.Close && !resp.Close
}

// judge decides req by ic.Rules, recording the rule in rec: a status and
// why when it is refused, "" when it may go upstream, its path rewritten
// to the one it was judged by.
func judge(req *http.Request, ic *Intercept, rec *RequestRecord) (int, string) {
	path, err := confine.NormalPath(req.RequestURI)
	if err != nil {
		rec.Rule, rec.Path = ic.RulesName, req.URL.EscapedPath()
		return http.StatusBadRequest, fmt.Sprintf("shellbox egress: %s %s on %s is refused: %v; rules (%s) judge a path only when it has one reading",
			egresswire.Clip(req.Method), egresswire.Clip(req.URL.EscapedPath()), ic.Host, err, ic.RulesName)
	}
	rec.Path = path
	rule := ic.Rules.Decide(req.Method, path)
	rec.Rule, rec.RuleText = rule.Name, rule.Text
	if !rule.Allow {
		how := "the default (no rule matched)"
		if rule.Text != "" {
			how = fmt.Sprintf("%q", rule.Text)
		}
		return http.StatusForbidden, fmt.Sprintf("shellbox egress: %s %s%s is denied by rule %s: %s",
			egresswire.Clip(req.Method), ic.Host, egresswire.Clip(path), rule.Name, how)
	}
	if up := req.Header.Values("Upgrade"); len(up) > 0 && !onlyWebSocket(up) {
		// An upgrade to another HTTP (h2c) would carry requests no rule
		// reads; a WebSocket carries none.
		rec.Rule, rec.RuleText = ic.RulesName, ""
		return http.StatusForbidden, fmt.Sprintf("shellbox egress: Upgrade: %s to %s is refused: the requests it would carry are not judged by rules (%s)",
			egresswire.Clip(strings.Join(up, ", ")), ic.Host, ic.RulesName)
	}
	// Upstream reads the path the rule saw, spelt one way; the query goes
	// as it came.
	req.URL.Opaque, req.URL.RawPath = confine.EncodePath(path), ""
	return 0, ""
}

// Lingering after a refusal: the client may still be writing the refused
// request's body; closing with it unread makes the kernel send a reset,
// which can reach the client before it has read the answer ("empty
// reply" instead of the 403 naming the rule). So the relay half-closes and
// reads what comes for a short, bounded while first, as net/http's server
// does.
const (
	lingerFor   = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

// lingerClose ends the writing side of c (its answer sent) and discards
// what c still sends, up to lingerBytes or lingerFor; the caller closes c.
func lingerClose(c net.Conn, r io.Reader) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() != nil {
			return
		}
	}
	c.SetReadDeadline(time.Now().Add(lingerFor))
	io.Copy(io.Discard, io.LimitReader(r, lingerBytes))
}

// upgradeAsked says whether a 101 answer with header ans is one the
// request with header req asked for: the request offered an Upgrade (and
// said so in Connection), and the answer names one of the protocols it
// offered.
func upgradeAsked(req, ans http.Header) bool {
	if !headerHasToken(req, "Connection", "upgrade") {
		return false
	}
	offered := map[string]bool{}
	for _, v := range req.Values("Upgrade") {
		for _, t := range strings.Split(v, ",") {
			if t = strings.ToLower(strings.TrimSpace(t)); t != "" {
				offered[t] = true
			}
		}
	}
	got := strings.ToLower(strings.TrimSpace(ans.Get("Upgrade")))
	return got != "" && offered[got]
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func onlyWebSocket(vals []string) bool {
	for _, v := range vals {
		for _, t := range strings.Split(v, ",") {
			if !strings.EqualFold(strings.TrimSpace(t), "websocket") {
				return false
			}
		}
	}
	return true
}

func (r *Relay) observeRequest(ic *Intercept, rec RequestRecord) {
	if ic.Observe != nil {
		ic.Observe(rec)
	}
}

// refusedConn records a refusal of the connection's, not of a request
// the relay read: its TLS failed, or its HTTP/2 layer refused streams
// (h2Watch). Method names the layer (TLS, HTTP/2), the path is empty;
// why must name no secret. It is counted too (Refused).
func (r *Relay) refusedConn(ic *Intercept, layer string, status int, why string) {
	r.observeRequest(ic, RequestRecord{Host: ic.Host, Method: layer, Status: status, Refused: egresswire.Clip(egresswire.OneLine(why))})
	r.observe(ic.Host, Refused)
}

// answer writes a response of the relay's own, closing the exchange.
func answer(w io.Writer, status int, reason string) {
	reason = egresswire.OneLine(reason)
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nShellbox-Error: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, http.StatusText(status), reason, len(reason)+1, reason)
}

// counter counts what is read through it.
type counter struct {
	r io.ReadCloser
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *counter) Close() error { return c.r.Close() }

// hostOnly is the host of a Host header value (host, host:port, [v6] or
// [v6]:port).
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	if len(hostport) > 1 && hostport[0] == '[' && hostport[len(hostport)-1] == ']' {
		return hostport[1 : len(hostport)-1]
	}
	return hostport
}

func sameHost(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}
