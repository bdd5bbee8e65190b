package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
)

// Outcome is what became of one proxied connection, as a Relay reports it.
type Outcome string

const (
	Allowed Outcome = "allowed" // checked, dialled, tunnelled
	Denied  Outcome = "denied"  // the check refused the destination, or an address it resolved to
	Failed  Outcome = "failed"  // allowed, but the dial failed
	// Refused: a connection, already counted allowed, that was
	// terminated and whose TLS failed or whose HTTP/2 layer refused
	// streams or ended it before the relay read them (RequestRecord's
	// connection records): one count per such record.
	Refused Outcome = "refused"
)

// ErrNoProxy is returned by Relay.Run when the agent runs no egress proxy
// (an agent started without --egress-listen, or one from before egress).
var ErrNoProxy = errors.New("the agent runs no egress proxy")

// Conn is a proxied connection as the Relay's check sees it.
type Conn struct {
	// Target is the destination, host:port, as the client named it.
	Target string
	// Credential is the network grant the proxy found on the process tree
	// that opened the connection (ProxyConfig.Grant), if well-formed; ""
	// otherwise. It is the agent's claim (the agent runs in the sandbox):
	// the check decides what it is worth.
	Credential string
}

// Decision is a check's answer for a connection it allows.
type Decision struct {
	// Addr vets every address the dial would connect to (a name's, after
	// resolution on this host, so a name cannot smuggle in an address the
	// check would refuse): an error refuses the connection (403, with the
	// error's text). Nil allows any.
	Addr func(netip.Addr) error
	// Until, if set, bounds the tunnel: it is closed when Until is done (a
	// grant that ended).
	Until context.Context
	// Intercept, if set, terminates the connection's TLS in the relay
	// (intercept.go) instead of tunnelling it blind.
	Intercept *Intercept
}

// RelayConfig configures a Relay. Agent and Check are required.
type RelayConfig struct {
	// Agent is how to reach the sandbox's agent (its Token, if set, goes
	// with every poll as a bearer token).
	Agent agentapi.Endpoint
	// PollHeader are extra header fields of every poll: the agent
	// protocol's version header, which this package does not know.
	PollHeader map[string]string
	// Check decides a connection: an error refuses it, and its text is what
	// the client reads (403, in the body and the Shellbox-Error header). It
	// is called for every connection, so a policy reload applies to the
	// next one.
	Check func(c Conn) (Decision, error)
	// DialTimeout bounds a dial (default 10s). Names are resolved on this
	// host.
	DialTimeout time.Duration
	// Pollers is how many polls wait on the agent at once (default 2): how
	// many connections can be taken at the same instant.
	Pollers int
	// MaxTunnels bounds the tunnels open at once (default 64); while it is
	// reached nobody polls, so new connections wait in the proxy.
	MaxTunnels int
	// Observe, if set, hears each connection's outcome (for metrics).
	Observe func(target string, o Outcome)
	// Record, if set, hears the end of each connection no RequestRecord
	// covers (for the audit): one refused or failed before or at its
	// first flight, and one tunnelled blind (TLS the relay does not
	// terminate, plain text to a host without rules), with its bytes each
	// way. A terminated connection's requests are Intercept.Observe's.
	Record func(ConnRecord)
	// Traffic, if set, hears each connection dialled to a destination and
	// the bytes that go over it, as they go (traffic.go; for usage). It is
	// called from the tunnels' goroutines and must not block.
	Traffic func(Traffic)
	// Logger hears refusals and failures, at most about one line a second
	// (default: discard).
	Logger *slog.Logger
	// CA, if set, is the PEM certificate the agent adds to its commands'
	// CA bundle (egresswire.CAFile) before the first poll: the CA of the
	// leaves Intercepts show. Installed reports the outcome (nil: done).
	CA        []byte
	Installed func(error)
}

// Bounds of what the relay reads from the agent: the agent runs inside the
// sandbox and is not trusted to be well-behaved.
const (
	// maxPollHead bounds one poll's answer head.
	maxPollHead = 16 << 10
	// pollDeadline bounds waiting for one poll's answer (the agent answers
	// 204 after its PollTimeout, 50 s by default).
	pollDeadline = 5 * time.Minute
)

// ConnRecord is the end of one connection the relay did not read as
// requests (RelayConfig.Record).
type ConnRecord struct {
	Target  string
	Outcome Outcome
	// Reason is why it was refused or failed (one line, clipped).
	Reason string
	// Sent to the destination, Received from it.
	Sent, Received int64
	// Duration is from the connection's check to its end.
	Duration time.Duration
}

// Relay is the host end of a sandbox's egress: see the package doc. A Relay
// runs once.
type Relay struct {
	cfg     RelayConfig
	slot    chan struct{}
	logs    logLimiter
	pollReq string // the long poll, byte for byte

	mu    sync.Mutex
	conns map[net.Conn]struct{} // polls and tunnels, closed when Run's ctx ends
}

// NewRelay checks cfg and returns a Relay.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	switch {
	case cfg.Agent.Network == "":
		return nil, errors.New("egress: RelayConfig.Agent is required")
	case cfg.Check == nil:
		return nil, errors.New("egress: RelayConfig.Check is required")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Pollers <= 0 {
		cfg.Pollers = 2
	}
	if cfg.MaxTunnels <= 0 {
		cfg.MaxTunnels = 64
	}
	if cfg.MaxTunnels < cfg.Pollers {
		cfg.Pollers = cfg.MaxTunnels
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Relay{cfg: cfg, slot: make(chan struct{}, cfg.MaxTunnels), conns: map[net.Conn]struct{}{},
		logs: logLimiter{log: cfg.Logger, every: time.Second}, pollReq: pollRequest(cfg)}, nil
}

// Run relays until ctx ends, then closes every poll and tunnel it holds and
// returns nil once they are gone. It returns ErrNoProxy (wrapped) at once
// when the agent has no proxy. An agent it cannot reach or that answers
// nonsense (a sandbox starting or dying, an agent of another version) is
// retried with backoff: the owner of ctx decides when the sandbox is gone.
func (r *Relay) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, r.closeAll)
	defer stop()

	if len(r.cfg.CA) > 0 {
		err := r.installCA(ctx)
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("egress relay: the sandbox does not trust the egress CA: credentials will fail TLS", "agent", r.cfg.Agent.String(), "err", err)
		}
		if r.cfg.Installed != nil {
			r.cfg.Installed(err)
		}
	}
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		runErr  error
	)
	for range r.cfg.Pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.poll(ctx, &wg); err != nil {
				errOnce.Do(func() { runErr = err })
				cancel()
			}
		}()
	}
	wg.Wait()
	r.closeAll()
	return runErr
}

// poll is one poller: it takes a tunnel slot, polls on its connection until
// a client is handed over, starts the tunnel, and goes again.
func (r *Relay) poll(ctx context.Context, wg *sync.WaitGroup) error {
	var (
		ac      *agentConn
		backoff = 50 * time.Millisecond
	)
	defer func() {
		if ac != nil {
			r.drop(ac.Conn)
		}
	}()
	// pause waits out the backoff after a failure; false when ctx ended.
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		return true
	}
	for {
		select {
		case r.slot <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		var c Conn
		for c.Target == "" {
			var err error
			if ac == nil {
				if ac, err = r.dialAgent(ctx); err != nil {
					r.cfg.Logger.Debug("egress relay: agent unreachable", "agent", r.cfg.Agent.String(), "err", err)
					if ctx.Err() != nil || !pause() {
						<-r.slot
						return nil
					}
					continue
				}
			}
			c, err = r.request(ac)
			if err != nil {
				r.drop(ac.Conn)
				ac = nil
				if errors.Is(err, ErrNoProxy) {
					<-r.slot
					return err
				}
				if ctx.Err() != nil {
					<-r.slot
					return nil
				}
				r.logs.warn("egress relay: poll failed", "agent", r.cfg.Agent.String(), "err", err)
				if !pause() {
					<-r.slot
					return nil
				}
				continue
			}
			backoff = 50 * time.Millisecond
		}
		// The connection is the tunnel's now; the slot is released when it
		// ends.
		tunnel := ac
		ac = nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-r.slot }()
			r.tunnel(ctx, c, tunnel)
		}()
	}
}

// agentConn is a connection to the agent's socket; lr bounds what a poll's
// answer may make the relay read.
type agentConn struct {
	net.Conn
	lr *io.LimitedReader
	br *bufio.Reader
}

func (r *Relay) dialAgent(ctx context.Context) (*agentConn, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := r.cfg.Agent.Dial(dctx)
	if err != nil {
		return nil, err
	}
	if !r.track(c) {
		c.Close()
		return nil, ctx.Err()
	}
	lr := &io.LimitedReader{R: c}
	return &agentConn{Conn: c, lr: lr, br: bufio.NewReaderSize(lr, 4096)}, nil
}

// pollRequest is the long poll of cfg, byte for byte. Header names and
// values with CR, LF or NUL are dropped (they would split the request).
func pollRequest(cfg RelayConfig) string {
	var b strings.Builder
	b.WriteString("POST /v1/egress HTTP/1.1\r\nHost: agent\r\n")
	keys := slices.Sorted(maps.Keys(cfg.PollHeader))
	for _, k := range keys {
		if v := cfg.PollHeader[k]; k != "" && !strings.ContainsAny(k, "\r\n\x00: ") && !strings.ContainsAny(v, "\r\n\x00") {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	if cfg.Agent.Token != "" && !strings.ContainsAny(cfg.Agent.Token, "\r\n\x00") {
		b.WriteString("Authorization: Bearer " + cfg.Agent.Token + "\r\n")
	}
	b.WriteString("Connection: Upgrade\r\nUpgrade: " + egresswire.Upgrade + "\r\nContent-Length: 0\r\n\r\n")
	return b.String()
}

// request sends one poll and returns the connection it was handed, or a
// zero Conn when the poll timed out (204; the agent connection stays
// usable). The answer is read under pollDeadline and maxPollHead.
func (r *Relay) request(ac *agentConn) (Conn, error) {
	if _, err := io.WriteString(ac, r.pollReq); err != nil {
		return Conn{}, err
	}
	ac.lr.N = maxPollHead
	ac.SetReadDeadline(time.Now().Add(pollDeadline))
	resp, err := http.ReadResponse(ac.br, nil)
	if err != nil {
		if ac.lr.N <= 0 {
			return Conn{}, fmt.Errorf("egress poll: the agent's answer is over %d bytes", maxPollHead)
		}
		return Conn{}, err
	}
	switch resp.StatusCode {
	case http.StatusNoContent:
		resp.Body.Close()
		return Conn{}, nil
	case http.StatusSwitchingProtocols:
		c := Conn{Target: resp.Header.Get(egresswire.TargetHeader), Credential: resp.Header.Get(egresswire.CredentialHeader)}
		if c.Target == "" || len(c.Target) > egresswire.MaxTargetBytes {
			return Conn{}, fmt.Errorf("egress poll: agent switched protocols without a valid %s header", egresswire.TargetHeader)
		}
		if c.Credential != "" && !egresswire.ValidCredential(c.Credential) {
			c.Credential = ""
		}
		// The tunnel's bytes are not the poll's: unbounded from here.
		ac.lr.N = 1<<63 - 1
		ac.SetReadDeadline(time.Time{})
		return c, nil
	case http.StatusNotFound:
		resp.Body.Close()
		return Conn{}, fmt.Errorf("%w (agent at %s)", ErrNoProxy, r.cfg.Agent)
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		return Conn{}, fmt.Errorf("egress poll: agent answered %s: %s", resp.Status, egresswire.OneLine(string(msg)))
	}
}

// errBlocked marks a dial refused for an address the Decision refused.
type errBlocked struct{ err error }

func (e errBlocked) Error() string { return e.err.Error() }

// tunnel decides one connection, dials it and splices until either side
// closes, ctx ends or the decision's Until does.
func (r *Relay) tunnel(ctx context.Context, c Conn, agent *agentConn) {
	defer r.drop(agent.Conn)
	target := c.Target
	// rec is the connection's record, written at its end unless the
	// relay terminates it (its requests are recorded instead).
	rec := ConnRecord{Target: egresswire.Clip(target), Outcome: Allowed}
	start := time.Now()
	var moved *byteCount
	defer func() {
		if r.cfg.Record == nil || rec.Outcome == "" {
			return
		}
		rec.Duration = time.Since(start)
		if moved != nil {
			rec.Sent, rec.Received = moved.sent.Load(), moved.received.Load()
		}
		r.cfg.Record(rec)
	}()
	verdict := func(line string) bool {
		agent.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := io.WriteString(agent, line+"\n")
		agent.SetWriteDeadline(time.Time{})
		return err == nil
	}
	deny := func(reason string) {
		rec.Outcome, rec.Reason = Denied, egresswire.Clip(egresswire.OneLine(reason))
		r.observe(target, Denied)
		r.logs.info("egress denied", "target", egresswire.Clip(target), "reason", egresswire.Clip(reason))
		verdict("DENY " + egresswire.OneLine(reason))
	}
	d, err := r.cfg.Check(c)
	if err != nil {
		deny(err.Error())
		return
	}
	if d.Until != nil && d.Until.Err() != nil {
		deny(fmt.Sprintf("shellbox: egress to %s: the grant this connection names has ended", target))
		return
	}
	dialer := &net.Dialer{Timeout: r.cfg.DialTimeout}
	if d.Addr != nil {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return errBlocked{fmt.Errorf("shellbox: egress to %s: unexpected address %q", target, address)}
			}
			if err := d.Addr(ap.Addr().Unmap()); err != nil {
				return errBlocked{fmt.Errorf("shellbox: egress to %s is not allowed: %w", target, err)}
			}
			return nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout)
	out, err := dialer.DialContext(dctx, "tcp", target)
	cancel()
	if err != nil {
		var blocked errBlocked
		if errors.As(err, &blocked) {
			deny(blocked.Error())
			return
		}
		rec.Outcome, rec.Reason = Failed, egresswire.Clip(egresswire.OneLine(err.Error()))
		r.observe(target, Failed)
		r.logs.info("egress dial failed", "target", egresswire.Clip(target), "err", err.Error())
		verdict(fmt.Sprintf("FAIL shellbox egress: cannot reach %s: %s", target, egresswire.OneLine(err.Error())))
		return
	}
	if !r.track(out) {
		out.Close()
		return
	}
	defer r.drop(out)
	out = counted(out, r.cfg.Traffic)
	if r.cfg.Record != nil {
		moved = &byteCount{}
		out = counted(out, moved.add)
	}
	if d.Until != nil {
		stop := context.AfterFunc(d.Until, func() {
			out.Close()
			agent.Close()
		})
		defer stop()
	}
	if !verdict("OK") {
		r.observe(target, Allowed)
		return
	}
	if d.Intercept != nil {
		rec.Outcome = "" // its requests are recorded
		r.observe(target, Allowed)
		r.intercept(ctx, agent, out, d.Intercept)
		return
	}
	// Counted allowed or denied once its first flight is judged.
	if why := r.blind(agent, out, c); why != "" {
		rec.Outcome, rec.Reason = Denied, why
	}
}

// byteCount counts a connection's bytes for its ConnRecord.
type byteCount struct{ sent, received atomic.Int64 }

func (b *byteCount) add(t Traffic) {
	b.sent.Add(t.Sent)
	b.received.Add(t.Received)
}

func (r *Relay) observe(target string, o Outcome) {
	if r.cfg.Observe != nil {
		r.cfg.Observe(target, o)
	}
}

// track records c so Run's end closes it; false if Run is ending (c is not
// recorded).
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) drop(c net.Conn) {
	r.mu.Lock()
	if r.conns != nil {
		delete(r.conns, c)
	}
	r.mu.Unlock()
	c.Close()
}

// closeAll closes every poll and tunnel and refuses new ones.
func (r *Relay) closeAll() {
	r.mu.Lock()
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// logLimiter logs at most one line per every; the lines it drops are
// counted in the next one. Sandboxed code decides how often connections are
// refused, not how much the server logs.
type logLimiter struct {
	log   *slog.Logger
	every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (l *logLimiter) info(msg string, args ...any) { l.emit(slog.LevelInfo, msg, args) }
func (l *logLimiter) warn(msg string, args ...any) { l.emit(slog.LevelWarn, msg, args) }

func (l *logLimiter) emit(level slog.Level, msg string, args []any) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.last) < l.every {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.last = now
	n := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	l.log.Log(context.Background(), level, msg, args...)
}
