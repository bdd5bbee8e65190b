package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/shellbox/shellbox/agentapi/egresswire"
)

// Bounds of an intercepted HTTP/2 connection, on top of those an
// HTTP/1.1 one has (a request's head: maxRequestHead, as
// SETTINGS_MAX_HEADER_LIST_SIZE; an answer's: maxResponseHead). Bodies
// are streamed as on HTTP/1.1, unbounded in length; what the relay holds
// of them is bounded by flow control.
const (
	// h2MaxStreams bounds the client's streams open at once; the
	// upstream's own limit makes more of them wait for a slot.
	h2MaxStreams = 100
	// h2ConnBuffer and h2StreamBuffer bound what the relay buffers of
	// request bodies (from the client) and of answers' bodies (from the
	// upstream), per connection and per stream: the windows it grants.
	h2ConnBuffer   = 4 << 20
	h2StreamBuffer = 1 << 20
	// h2CopyBuffer is what a stream's answer is copied through.
	h2CopyBuffer = 64 << 10
)

// upstreamH2 is the transport of every intercepted HTTP/2 upstream: one
// ClientConn per connection over the relay's own TLS to the host
// (NewClientConn; it dials nothing). It leaves the body's encoding as
// the client asked and adds no User-Agent.
var upstreamH2 = sync.OnceValues(func() (*http2.Transport, error) {
	t1 := &http.Transport{
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxResponseHead,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerConnection: h2ConnBuffer,
			MaxReceiveBufferPerStream:     h2StreamBuffer,
		},
	}
	t2, err := http2.ConfigureTransports(t1)
	if err != nil {
		return nil, fmt.Errorf("shellbox egress: HTTP/2 transport: %w", err)
	}
	t2.MaxHeaderListSize = maxResponseHead
	// Frames of up to the stream's window, not 16 KiB: fewer of them to
	// decrypt, parse and account for on a bulk download.
	t2.MaxReadFrameSize = h2StreamBuffer
	t2.DisableCompression = true
	return t2, nil
})

// serveH2 relays the streams of one HTTP/2 connection, client's side
// (TLS terminated, h2 negotiated) to up (h2 negotiated too): each stream
// is a request judged, rewritten and observed on its own as exchange does
// an HTTP/1.1 one, then sent as a stream of the relay's one connection
// upstream. A refused stream is answered (421, 403, …) and the others go
// on: unlike HTTP/1.1 pipelining, no stream rides behind another one. It
// returns when the client's connection ends; once the upstream's ends,
// the client is sent GOAWAY (its open streams finish, new ones go on a
// new connection, so through a new tunnel).
func (r *Relay) serveH2(client *tls.Conn, up *tls.Conn, ic *Intercept) {
	t, err := upstreamH2()
	if err != nil {
		answer(client, http.StatusBadGateway, err.Error())
		return
	}
	base := &http.Server{
		MaxHeaderBytes: maxRequestHead,
		// What the server would log (a client gone mid-stream) is the
		// client's business.
		ErrorLog: log.New(io.Discard, "", 0),
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          h2MaxStreams,
			MaxReceiveBufferPerConnection: h2ConnBuffer,
			MaxReceiveBufferPerStream:     h2StreamBuffer,
		},
	}
	srv := &http2.Server{}
	if err := http2.ConfigureServer(base, srv); err != nil {
		r.logs.warn("egress HTTP/2 server", "err", err.Error())
		return
	}
	var once sync.Once
	goaway := func() {
		// Shutdown sends GOAWAY on the connections of srv (this one
		// alone) and waits for none: base serves no listener.
		once.Do(func() { go base.Shutdown(context.Background()) })
	}
	cc, err := t.NewClientConn(watchedConn{Conn: up, onErr: goaway})
	if err != nil {
		r.logs.info("egress HTTP/2 to upstream failed", "host", ic.Host, "err", err.Error())
		return
	}
	defer cc.Close()
	srv.ServeConn(client, &http2.ServeConnOpts{
		BaseConfig: base,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.exchangeH2(w, req, cc, ic, goaway)
		}),
	})
}

// watchedConn calls onErr once its reads end (the upstream closed or
// broke the connection).
type watchedConn struct {
	net.Conn
	onErr func()
}

func (c watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.onErr()
	}
	return n, err
}

// exchangeH2 relays one stream: the rules of exchange, stream by stream.
func (r *Relay) exchangeH2(w http.ResponseWriter, req *http.Request, cc *http2.ClientConn, ic *Intercept, goaway func()) {
	start := time.Now()
	rec := RequestRecord{Host: ic.Host, Method: req.Method, Path: req.URL.Path}
	refuse := func(status int, why string) {
		why = egresswire.OneLine(why)
		rec.Status, rec.Refused, rec.Duration = status, why, time.Since(start)
		r.observeRequest(ic, rec)
		h := w.Header()
		h.Set("Shellbox-Error", why)
		if ct, ok := grpcContentType(req.Header); ok {
			// A gRPC client reads no body of an answer that is not
			// gRPC's: the refusal is a status of its own, as a server
			// ends a call (Trailers-Only: 200, grpc-status and
			// grpc-message in the one HEADERS frame), the code the one
			// gRPC gives the HTTP status, the message the reason.
			h.Set("Content-Type", ct)
			h.Set("Grpc-Status", strconv.Itoa(grpcCode(status)))
			h.Set("Grpc-Message", grpcMessage(why))
			w.WriteHeader(http.StatusOK)
			return
		}
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		io.WriteString(w, why+"\n")
	}
	switch {
	case req.Method == http.MethodConnect:
		// Extended CONNECT (RFC 8441) is not offered; a plain one would
		// be a tunnel to anywhere.
		refuse(http.StatusMethodNotAllowed, "shellbox egress: CONNECT inside a tunnel to "+ic.Host+" is not relayed")
		return
	case !sameHost(hostOnly(req.Host), ic.Host):
		// :authority (or Host) of another name, as a client coalescing
		// connections would send: the connection was allowed and proven
		// for ic.Host alone.
		refuse(http.StatusMisdirectedRequest, fmt.Sprintf("shellbox egress: a request for %s on a connection to %s", egresswire.Clip(req.Host), ic.Host))
		return
	}
	if ic.Rules != nil {
		if status, why := judge(req, ic, &rec); why != "" {
			refuse(status, why)
			return
		}
	}
	// The relay's server answered any 100-continue as the body was read.
	req.Header.Del("Expect")
	var scrub func(http.Header)
	if ic.Rewrite != nil {
		s, used, err := ic.Rewrite(req.Header)
		rec.Credentials = used
		if err != nil {
			refuse(http.StatusBadGateway, "shellbox egress: "+err.Error())
			return
		}
		scrub = s
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		// Else the transport adds Go's.
		req.Header["User-Agent"] = []string{""}
	}
	u := *req.URL // its path as judge left it (Opaque), the query as it came
	u.Scheme, u.Host = "https", req.Host
	out := &http.Request{
		Method:        req.Method,
		URL:           &u,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        req.Header,
		Host:          req.Host,
		ContentLength: req.ContentLength,
		// Filled by the server before the body's EOF, read by the
		// transport after it.
		Trailer: req.Trailer,
	}
	body := &atomicCounter{r: req.Body}
	if req.Body != nil && req.Body != http.NoBody {
		out.Body = body
	}
	out = out.WithContext(req.Context())
	resp, err := cc.RoundTrip(out)
	if err != nil {
		rec.BytesOut = body.n.Load()
		if !cc.CanTakeNewRequest() {
			goaway()
		}
		refuse(http.StatusBadGateway, fmt.Sprintf("shellbox egress: reading %s's answer: %v", ic.Host, err))
		return
	}
	defer resp.Body.Close()
	if scrub != nil {
		scrub(resp.Header)
	}
	h := w.Header()
	for k, vv := range resp.Header {
		h[k] = vv
	}
	w.WriteHeader(resp.StatusCode)
	rb := &atomicCounter{r: resp.Body}
	_, cerr := io.CopyBuffer(flushWriter{w, http.NewResponseController(w)}, rb, make([]byte, h2CopyBuffer))
	if cerr == nil {
		if scrub != nil {
			scrub(resp.Trailer)
		}
		for k, vv := range resp.Trailer {
			h[http.TrailerPrefix+k] = vv
		}
	}
	rec.Status, rec.BytesOut, rec.BytesIn, rec.Duration = resp.StatusCode, body.n.Load(), rb.n.Load(), time.Since(start)
	if cerr != nil {
		rec.Refused = "relaying the answer: " + egresswire.OneLine(cerr.Error())
	}
	r.observeRequest(ic, rec)
	if cerr != nil {
		// A body cut short must not end as a whole one: the stream is
		// reset, not ended.
		panic(http.ErrAbortHandler)
	}
}

// grpcContentType is a gRPC request's content type (application/grpc,
// application/grpc+proto, …): its answers must be too.
func grpcContentType(h http.Header) (string, bool) {
	ct := h.Get("Content-Type")
	rest, ok := strings.CutPrefix(strings.ToLower(ct), "application/grpc")
	if !ok || (rest != "" && rest[0] != '+' && rest[0] != ';') || len(ct) > 128 {
		return "", false
	}
	return ct, true
}

// grpcCode is the gRPC status code a client gives an answer of HTTP
// status (gRPC's doc/http-grpc-status-mapping.md): the code the client
// would have read from the plain refusal, so it retries, or not, alike.
func grpcCode(status int) int {
	switch status {
	case http.StatusBadRequest:
		return 13 // INTERNAL
	case http.StatusUnauthorized:
		return 16 // UNAUTHENTICATED
	case http.StatusForbidden:
		return 7 // PERMISSION_DENIED
	case http.StatusNotFound:
		return 12 // UNIMPLEMENTED
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return 14 // UNAVAILABLE
	}
	return 2 // UNKNOWN
}

// grpcMessage percent-encodes s as grpc-message is (every byte outside
// printable ASCII, and '%').
func grpcMessage(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// flushWriter sends each write on at once (a gRPC stream's messages, a
// server's events), not when a buffer fills; copied through a buffer of
// h2CopyBuffer bytes.
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil && len(p) < h2CopyBuffer {
		// A short read: the upstream had no more ready. A write of a
		// full buffer (over the stream's 4 KiB one) goes out unbuffered.
		err = f.rc.Flush()
	}
	return n, err
}

// atomicCounter counts what is read through it, read by another
// goroutine than the reader (a request's body is read by the transport).
type atomicCounter struct {
	r io.ReadCloser
	n atomic.Int64
}

func (c *atomicCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *atomicCounter) Close() error { return c.r.Close() }
