package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"slices"
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
		r.refusedConn(ic, "HTTP/2", http.StatusBadGateway, "shellbox egress: HTTP/2 to "+ic.Host+" failed: "+err.Error())
		return
	}
	defer cc.Close()
	// What the HTTP/2 layer refuses never reaches the handler: it is
	// counted (srv.CountError, and the frames the client sent) and
	// recorded once the connection ends.
	watch := &h2Watch{Conn: client, pre: len(http2.ClientPreface)}
	srv.CountError = watch.countError
	srv.ServeConn(watch, &http2.ServeConnOpts{
		BaseConfig: base,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			watch.handled.Add(1)
			r.exchangeH2(w, req, cc, ic, goaway)
		}),
	})
	if why := watch.summary(); why != "" {
		r.refusedConn(ic, "HTTP/2", 0, why)
	}
}

// h2Watch is the client's side of an intercepted HTTP/2 connection as
// the relay's server reads it, counting what the HTTP/2 layer (x/net's
// server) refuses or answers itself before the relay's handler, which
// would otherwise leave no record: a stream reset for a malformed request
// or past the streams allowed, a header list over the bound (431), a
// connection ended for a protocol error or a rapid-reset flood
// (ENHANCE_YOUR_CALM). The server's CountError hook names each error
// (stream_PROTOCOL_bad_path_method, conn_ENHANCE_YOUR_CALM_…); the
// frames the client sent are counted from their 9-byte headers as they
// are read (streams opened, RST_STREAM, PING, SETTINGS), no payload
// parsed, so streams that never reached the handler (a 431 or 400 of the
// library's, which CountError does not name) show as opened and not
// relayed.
type h2Watch struct {
	*tls.Conn // ConnectionState: the server sees the TLS it runs over

	// The read side's state, the server's reading goroutine's alone.
	pre  int     // preface bytes still to pass
	hdr  [9]byte // a frame header, hn bytes of it read
	hn   int
	skip int // payload bytes of the current frame still to pass
	last uint32

	opened, resets, pings, settings atomic.Int64
	handled                         atomic.Int64

	mu   sync.Mutex
	errs map[string]int
}

// h2WatchKinds bounds the error names an h2Watch keeps (the library
// has about 40); past them, counted as "other".
const h2WatchKinds = 32

// h2ControlFlood is the count of PING or SETTINGS frames on one
// connection past which it is recorded even though nothing was refused:
// the library's own bound on control frames queued for a client that
// does not read (maxQueuedControlFrames) ends such a connection without
// naming it.
const h2ControlFlood = 10000

func (w *h2Watch) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	w.scan(p[:n])
	return n, err
}

// scan counts the frames whose headers b holds (frames may span reads).
func (w *h2Watch) scan(b []byte) {
	for len(b) > 0 {
		switch {
		case w.pre > 0:
			k := min(w.pre, len(b))
			w.pre -= k
			b = b[k:]
		case w.skip > 0:
			k := min(w.skip, len(b))
			w.skip -= k
			b = b[k:]
		default:
			k := copy(w.hdr[w.hn:], b)
			w.hn += k
			b = b[k:]
			if w.hn < len(w.hdr) {
				return
			}
			w.hn = 0
			h := w.hdr
			w.skip = int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			typ, flags := http2.FrameType(h[3]), http2.Flags(h[4])
			id := (uint32(h[5])<<24 | uint32(h[6])<<16 | uint32(h[7])<<8 | uint32(h[8])) & (1<<31 - 1)
			switch typ {
			case http2.FrameHeaders:
				if id%2 == 1 && id > w.last {
					w.last = id
					w.opened.Add(1)
				}
			case http2.FrameRSTStream:
				w.resets.Add(1)
			case http2.FramePing:
				if !flags.Has(http2.FlagPingAck) {
					w.pings.Add(1)
				}
			case http2.FrameSettings:
				if !flags.Has(http2.FlagSettingsAck) {
					w.settings.Add(1)
				}
			}
		}
	}
}

// countError is the server's CountError: errType names an error of the
// protocol layer (a stream's or the connection's).
func (w *h2Watch) countError(errType string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.errs == nil {
		w.errs = map[string]int{}
	}
	if _, ok := w.errs[errType]; !ok && len(w.errs) >= h2WatchKinds {
		errType = "other"
	}
	w.errs[errType]++
}

// summary says what the HTTP/2 layer refused on the connection, once it
// has ended; "" when nothing (every stream opened reached the handler,
// no error was counted, no flood of control frames).
func (w *h2Watch) summary() string {
	w.mu.Lock()
	kinds := slices.Sorted(maps.Keys(w.errs))
	errs := make([]string, len(kinds))
	for i, k := range kinds {
		errs[i] = fmt.Sprintf("%s %d", k, w.errs[k])
	}
	w.mu.Unlock()
	opened, handled := w.opened.Load(), w.handled.Load()
	pings, settings := w.pings.Load(), w.settings.Load()
	if len(errs) == 0 && opened <= handled && pings <= h2ControlFlood && settings <= h2ControlFlood {
		return ""
	}
	var b strings.Builder
	b.WriteString("shellbox egress: the HTTP/2 layer refused, before the relay's handler: ")
	if len(errs) == 0 {
		b.WriteString("no error it names")
	} else {
		b.WriteString(strings.Join(errs, ", "))
	}
	fmt.Fprintf(&b, "; %d streams opened, %d relayed", opened, handled)
	if opened > handled {
		fmt.Fprintf(&b, " (the other %d refused as above, answered 431 or 400 by the HTTP/2 layer, or reset by the client first)", opened-handled)
	}
	fmt.Fprintf(&b, "; the client sent %d RST_STREAM, %d PING, %d SETTINGS", w.resets.Load(), pings, settings)
	return b.String()
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
