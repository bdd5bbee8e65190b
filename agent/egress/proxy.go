package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shellbox/shellbox/agentapi/egresswire"
)

// Bounds of a Proxy (see ProxyConfig for the defaults' use).
const (
	DefaultMaxConns    = 256
	DefaultMaxPending  = 64
	DefaultRelayWait   = 30 * time.Second
	DefaultPollTimeout = 50 * time.Second
	// maxHeadBytes bounds a client's request head (request line and headers).
	maxHeadBytes = 64 << 10
	// headTimeout bounds reading a client's request head.
	headTimeout = 30 * time.Second
	// verdictTimeout bounds waiting for the Relay's verdict, which follows
	// its dial (bounded by the Relay's DialTimeout).
	verdictTimeout = 60 * time.Second
	// maxVerdictBytes bounds the verdict line.
	maxVerdictBytes = 4 << 10
)

// ProxyConfig configures a Proxy. Zero values take the defaults.
type ProxyConfig struct {
	// MaxConns bounds the client connections held at once (waiting or
	// tunnelled); one more is answered 503 and closed.
	MaxConns int
	// MaxPending bounds the connections waiting for a relay.
	MaxPending int
	// RelayWait is how long a connection waits for a relay before it is
	// answered 503 (the server is away, or the sandbox has no relay).
	RelayWait time.Duration
	// PollTimeout is how long a relay's poll is held open with no
	// connection waiting before it is answered 204.
	PollTimeout time.Duration
	// Logger hears about failures; nil discards.
	Logger *log.Logger
	// Grant, if set, returns the network grant (a credential, see
	// ValidCredential) of the process tree that opened a client
	// connection, "" when it holds none; the proxy hands it to the relay
	// (CredentialHeader). An error gives no grant, and is logged. Unset,
	// no connection carries a grant (TreeGrant is the agent's).
	Grant func(c net.Conn) (string, error)
	// CAFile, if set, is where a relay's CA (egresswire.CAHeader) is
	// installed, after the image's own roots (ca.go); unset, a relay
	// asking for it is answered 501.
	CAFile string
}

// Proxy is the in-sandbox end: an HTTP proxy whose connections leave only
// through a Relay's polls. Serve accepts clients; ServeHTTP is the agent
// socket's POST /v1/egress.
type Proxy struct {
	cfg     ProxyConfig
	pending queue
	conns   chan struct{} // a slot per client connection held

	systemBundles []string // the image's roots: systemBundles, or a test's
	caMu          sync.Mutex
	caInstalled   []byte // the certificates in CAFile now
}

// waiter is a client connection waiting for, then handed to, a relay.
type waiter struct {
	target     string
	credential string
	verdict    chan relayed
}

// relayed is what a poll hands the waiting client: the tunnel on OK, or the
// refusal.
type relayed struct {
	tunnel net.Conn
	rd     *bufio.Reader // the tunnel's reader (may hold read-ahead)
	status int           // 0 on OK, else the status to answer the client
	reason string
}

// NewProxy returns a Proxy.
func NewProxy(cfg ProxyConfig) *Proxy {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.RelayWait <= 0 {
		cfg.RelayWait = DefaultRelayWait
	}
	if cfg.PollTimeout <= 0 {
		cfg.PollTimeout = DefaultPollTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = log.New(io.Discard, "", 0)
	}
	return &Proxy{cfg: cfg, pending: queue{max: cfg.MaxPending, ready: make(chan struct{}, 1)}, conns: make(chan struct{}, cfg.MaxConns),
		systemBundles: systemBundles}
}

// Serve accepts client connections on l until ctx ends or l fails, then
// closes l. Connections already accepted end on their own (their tunnels
// close when either side does); Serve does not wait for them.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("egress proxy: accept: %w", err)
		}
		select {
		case p.conns <- struct{}{}:
		default:
			go refuse(c, http.StatusServiceUnavailable, fmt.Sprintf("shellbox egress proxy: %d connections are open already", p.cfg.MaxConns))
			continue
		}
		go func() {
			defer func() { <-p.conns }()
			p.client(c)
		}()
	}
}

// Open is the client connections the proxy holds now (waiting for a relay
// or spliced), for the agent's GET /v1/activity.
func (p *Proxy) Open() int { return len(p.conns) }

// client serves one client connection: reads its request head, waits for a
// relay, answers, and splices.
func (p *Proxy) client(c net.Conn) {
	defer c.Close()
	lr := &io.LimitedReader{R: c, N: maxHeadBytes}
	br := bufio.NewReaderSize(lr, 4096)
	c.SetReadDeadline(time.Now().Add(headTimeout))
	req, err := http.ReadRequest(br)
	if err != nil {
		if lr.N <= 0 {
			refuse(c, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("shellbox egress proxy: request head over %d bytes", maxHeadBytes))
			return
		}
		if !errors.Is(err, io.EOF) {
			refuse(c, http.StatusBadRequest, "shellbox egress proxy: bad request: "+err.Error())
		}
		return
	}
	c.SetReadDeadline(time.Time{})
	// The head is read: the body and the tunnelled bytes are not bounded by
	// the head limit.
	lr.N = 1<<63 - 1

	target, err := targetOf(req)
	if err != nil {
		refuse(c, http.StatusBadRequest, "shellbox egress proxy: "+err.Error())
		return
	}
	if req.Header.Get("Proxy-Authorization") != "" {
		// Grants used to be credentials in the environment: a client
		// replaying one (read from another process's environ) is told why
		// it does not work rather than silently treated as ungranted.
		refuse(c, http.StatusForbidden, "shellbox egress proxy: Proxy-Authorization is not accepted: a network grant holds only for the processes of the call it was granted to, which need no credential")
		return
	}
	w := &waiter{target: target, verdict: make(chan relayed, 1)}
	if p.cfg.Grant != nil {
		g, err := p.cfg.Grant(c)
		switch {
		case err != nil:
			p.cfg.Logger.Printf("egress %s from %s: no grant: %v", target, c.RemoteAddr(), err)
		case g != "" && !egresswire.ValidCredential(g):
			p.cfg.Logger.Printf("egress %s from %s: no grant: malformed credential", target, c.RemoteAddr())
		default:
			w.credential = g
		}
	}
	if !p.pending.push(w) {
		refuse(c, http.StatusServiceUnavailable, fmt.Sprintf("shellbox egress proxy: %d connections are waiting for the server already", p.cfg.MaxPending))
		return
	}
	var r relayed
	timer := time.NewTimer(p.cfg.RelayWait)
	select {
	case r = <-w.verdict:
		timer.Stop()
	case <-timer.C:
		if p.pending.remove(w) {
			refuse(c, http.StatusServiceUnavailable, fmt.Sprintf("shellbox egress proxy: no relay answered within %s (is the shellbox server running?)", p.cfg.RelayWait))
			return
		}
		// A poll took it just now: its verdict is on its way.
		r = <-w.verdict
	}
	if r.status != 0 {
		refuse(c, r.status, r.reason)
		return
	}
	defer r.tunnel.Close()
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		egresswire.Splice(c, br, r.tunnel, r.rd)
		return
	}
	// Forward the request in origin form, without the proxy's headers, and
	// nothing after it: a client may pipeline a next request, meant for
	// another destination (Go's Transport reuses proxy connections across
	// hosts), which must not reach this one. The answer flows back until
	// the destination or the client closes.
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.Close = true
	// A write that fails part way (a destination, or the relay refusing
	// the request, that answered and closed before reading the whole
	// body) still lets the answer through: it is what the client needs
	// to read, not an empty reply.
	_ = req.Write(r.tunnel)
	go func() {
		io.Copy(io.Discard, br)
		// The client is done: so is the tunnel.
		r.tunnel.Close()
	}()
	buf := make([]byte, 32<<10)
	io.CopyBuffer(c, r.rd, buf)
}

// targetOf returns the host:port a proxy request is for: CONNECT's
// authority, or an absolute http:// URL's host (port 80 by default).
func targetOf(req *http.Request) (string, error) {
	if req.Method == http.MethodConnect {
		if _, _, err := net.SplitHostPort(req.Host); err != nil {
			return "", fmt.Errorf("CONNECT %q: want host:port", egresswire.Clip(req.Host))
		}
		if len(req.Host) > egresswire.MaxTargetBytes {
			return "", fmt.Errorf("CONNECT %s: destination over %d bytes", egresswire.Clip(req.Host), egresswire.MaxTargetBytes)
		}
		return req.Host, nil
	}
	if !req.URL.IsAbs() {
		return "", fmt.Errorf("%s %s: this is an HTTP proxy (use it as HTTP_PROXY / HTTPS_PROXY); a request must name an absolute http:// URL or CONNECT host:port", req.Method, egresswire.Clip(req.RequestURI))
	}
	if req.URL.Scheme != "http" {
		return "", fmt.Errorf("%s: only http:// URLs are proxied as requests; use CONNECT for %s", egresswire.Clip(req.URL.Redacted()), req.URL.Scheme)
	}
	host := req.URL.Host
	if req.URL.Port() == "" {
		host = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	if req.URL.Hostname() == "" {
		return "", fmt.Errorf("%s: no host", egresswire.Clip(req.URL.Redacted()))
	}
	if len(host) > egresswire.MaxTargetBytes {
		return "", fmt.Errorf("%s: destination over %d bytes", egresswire.Clip(host), egresswire.MaxTargetBytes)
	}
	return host, nil
}

// ServeHTTP is the relay's long poll (POST /v1/egress): it answers 204 when
// no connection waits for PollTimeout, else takes the oldest waiting
// connection, switches protocols naming its destination, reads the relay's
// verdict and hands the socket connection to the client as its tunnel.
// A POST carrying egresswire.CAHeader and no Upgrade installs that CA
// (ProxyConfig.CAFile) and is answered 204, or 501/400 with why not.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ca := r.Header.Get(egresswire.CAHeader); r.Method == http.MethodPost && ca != "" && r.Header.Get("Upgrade") == "" {
		if err := p.installCA(ca); err != nil {
			status := http.StatusBadRequest
			if p.cfg.CAFile == "" {
				status = http.StatusNotImplemented
			}
			p.cfg.Logger.Printf("egress CA: %v", err)
			http.Error(w, "egress: "+err.Error(), status)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodPost || !strings.EqualFold(r.Header.Get("Upgrade"), egresswire.Upgrade) {
		http.Error(w, fmt.Sprintf("egress: want POST with Upgrade: %s", egresswire.Upgrade), http.StatusBadRequest)
		return
	}
	timer := time.NewTimer(p.cfg.PollTimeout)
	defer timer.Stop()
	var wt *waiter
	for wt == nil {
		if wt = p.pending.pop(); wt != nil {
			break
		}
		select {
		case <-r.Context().Done():
			return
		case <-timer.C:
			w.WriteHeader(http.StatusNoContent)
			return
		case <-p.pending.ready:
		}
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		wt.verdict <- relayed{status: http.StatusBadGateway, reason: "shellbox egress proxy: relay connection failed: " + err.Error()}
		return
	}
	fail := func(err error) {
		conn.Close()
		p.cfg.Logger.Printf("egress %s: relay: %v", wt.target, err)
		wt.verdict <- relayed{status: http.StatusBadGateway, reason: fmt.Sprintf("shellbox egress proxy: the relay to %s failed: %v", wt.target, err)}
	}
	head := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + egresswire.Upgrade + "\r\n" + egresswire.TargetHeader + ": " + wt.target + "\r\n"
	if wt.credential != "" {
		head += egresswire.CredentialHeader + ": " + wt.credential + "\r\n"
	}
	head += "\r\n"
	if _, err := brw.WriteString(head); err != nil {
		fail(err)
		return
	}
	if err := brw.Flush(); err != nil {
		fail(err)
		return
	}
	conn.SetReadDeadline(time.Now().Add(verdictTimeout))
	line, err := readLine(brw.Reader, maxVerdictBytes)
	if err != nil {
		fail(fmt.Errorf("reading its verdict: %w", err))
		return
	}
	conn.SetReadDeadline(time.Time{})
	verb, reason, _ := strings.Cut(line, " ")
	switch verb {
	case "OK":
		wt.verdict <- relayed{tunnel: conn, rd: brw.Reader}
	case "DENY":
		conn.Close()
		wt.verdict <- relayed{status: http.StatusForbidden, reason: reason}
	case "FAIL":
		conn.Close()
		wt.verdict <- relayed{status: http.StatusBadGateway, reason: reason}
	default:
		fail(fmt.Errorf("unknown verdict %q", egresswire.Clip(line)))
	}
}

// refuse answers a client with status and a one-line reason (body and
// Shellbox-Error header, so a client that shows neither CONNECT bodies nor
// headers still gets the status), then closes it.
func refuse(c net.Conn, status int, reason string) {
	defer c.Close()
	reason = egresswire.OneLine(reason)
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nShellbox-Error: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, http.StatusText(status), reason, len(reason)+1, reason)
}

// readLine reads one \n-terminated line of at most max bytes, without the
// newline.
func readLine(r *bufio.Reader, max int) (string, error) {
	var b []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(b)+len(frag) > max {
			return "", fmt.Errorf("line over %d bytes", max)
		}
		b = append(b, frag...)
		if err == nil {
			return strings.TrimRight(string(b), "\r\n"), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return "", err
		}
	}
}

// queue holds the connections waiting for a relay, oldest first, at most
// max. A connection that gives up takes itself out, so it never holds a
// place it no longer needs.
type queue struct {
	max   int
	ready chan struct{} // a token when the queue may be non-empty

	mu    sync.Mutex
	items []*waiter
}

// push appends w; false when the queue is full.
func (q *queue) push(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= q.max {
		return false
	}
	q.items = append(q.items, w)
	q.signal()
	return true
}

// pop takes the oldest waiter, nil when there is none.
func (q *queue) pop() *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	w := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	if len(q.items) > 0 {
		// Another poll may take the next one.
		q.signal()
	}
	return w
}

// remove takes w out; false when a poll has taken it already.
func (q *queue) remove(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.items {
		if x == w {
			q.items = append(q.items[:i], q.items[i+1:]...)
			return true
		}
	}
	return false
}

// signal leaves a token for a waiting poll; callers hold mu.
func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}
