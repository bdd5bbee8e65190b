package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/shellbox/shellbox/executor/agentapi"
)

// Outcome is what became of one proxied connection, as a Relay reports it.
type Outcome string

const (
	Allowed Outcome = "allowed" // checked, dialled, tunnelled
	Denied  Outcome = "denied"  // the check refused the destination
	Failed  Outcome = "failed"  // allowed, but the dial failed
)

// ErrNoProxy is returned by Relay.Run when the agent runs no egress proxy
// (an agent started without --egress-listen, or one from before egress).
var ErrNoProxy = errors.New("the agent runs no egress proxy")

// Conn is a proxied connection as the Relay's check sees it.
type Conn struct {
	// Target is the destination, host:port, as the client named it.
	Target string
	// Credential is the password of the client's Proxy-Authorization, if it
	// sent a well-formed one (see EnvWithCredential); "" otherwise. It is
	// the client's claim: the check decides what it is worth.
	Credential string
}

// RelayConfig configures a Relay. Socket and Check are required.
type RelayConfig struct {
	// Socket is the agent's socket path (in the session's host directory).
	Socket string
	// Check decides a connection: nil allows it; an error refuses it, and
	// its text is what the client reads (403, in the body and the
	// Shellbox-Error header). It is called for every connection, so a policy
	// reload applies to the next one.
	Check func(c Conn) error
	// Dial connects to an allowed destination (default: a net.Dialer with
	// DialTimeout, resolving names on this host).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds a dial (default 10s).
	DialTimeout time.Duration
	// Pollers is how many polls wait on the agent at once (default 2): how
	// many connections can be taken at the same instant.
	Pollers int
	// MaxTunnels bounds the tunnels open at once (default 64); while it is
	// reached nobody polls, so new connections wait in the proxy.
	MaxTunnels int
	// Observe, if set, hears each connection's outcome (for metrics).
	Observe func(target string, o Outcome)
	// Logger hears refusals and failures (default: discard).
	Logger *slog.Logger
}

// Relay is the host end of a sandbox's egress: see the package doc.
type Relay struct {
	cfg  RelayConfig
	slot chan struct{}

	mu    sync.Mutex
	conns map[net.Conn]struct{} // polls and tunnels, closed when Run's ctx ends
}

// NewRelay checks cfg and returns a Relay.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	switch {
	case cfg.Socket == "":
		return nil, errors.New("egress: RelayConfig.Socket is required")
	case cfg.Check == nil:
		return nil, errors.New("egress: RelayConfig.Check is required")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout}
		cfg.Dial = d.DialContext
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
	return &Relay{cfg: cfg, slot: make(chan struct{}, cfg.MaxTunnels), conns: map[net.Conn]struct{}{}}, nil
}

// Run relays until ctx ends, then closes every poll and tunnel it holds and
// returns nil once they are gone. It returns ErrNoProxy (wrapped) at once
// when the agent has no proxy. An agent it cannot reach (a sandbox starting
// or dying) is retried with backoff: the owner of ctx decides when the
// sandbox is gone.
func (r *Relay) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, r.closeAll)
	defer stop()

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
		conn    net.Conn
		br      *bufio.Reader
		backoff = 50 * time.Millisecond
	)
	defer func() {
		if conn != nil {
			r.drop(conn)
		}
	}()
	for {
		select {
		case r.slot <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		var (
			target Conn
			err    error
		)
		for target.Target == "" {
			if conn == nil {
				conn, err = r.dialAgent(ctx)
				if err != nil {
					if ctx.Err() != nil {
						<-r.slot
						return nil
					}
					r.cfg.Logger.Debug("egress relay: agent unreachable", "socket", r.cfg.Socket, "err", err)
					select {
					case <-ctx.Done():
						<-r.slot
						return nil
					case <-time.After(backoff):
					}
					backoff = min(2*backoff, 2*time.Second)
					continue
				}
				br = bufio.NewReaderSize(conn, 4096)
			}
			target, err = r.request(conn, br)
			if err != nil {
				r.drop(conn)
				conn = nil
				if errors.Is(err, ErrNoProxy) {
					<-r.slot
					return err
				}
				if ctx.Err() != nil {
					<-r.slot
					return nil
				}
				continue
			}
			backoff = 50 * time.Millisecond
		}
		// The connection is the tunnel's now; the slot is released when it
		// ends.
		tc, tr := conn, br
		conn, br = nil, nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-r.slot }()
			r.tunnel(ctx, target, tc, tr)
		}()
	}
}

func (r *Relay) dialAgent(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "unix", r.cfg.Socket)
	if err != nil {
		return nil, err
	}
	if !r.track(c) {
		c.Close()
		return nil, ctx.Err()
	}
	return c, nil
}

// pollRequest is the long poll, byte for byte.
var pollRequest = "POST /v1/egress HTTP/1.1\r\nHost: agent\r\n" + agentapi.HeaderProtocol + ": " + strconv.Itoa(agentapi.Protocol) +
	"\r\nConnection: Upgrade\r\nUpgrade: " + Upgrade + "\r\nContent-Length: 0\r\n\r\n"

// request sends one poll and returns the connection it was handed, or a
// zero Conn when the poll timed out (204; conn stays usable).
func (r *Relay) request(conn net.Conn, br *bufio.Reader) (Conn, error) {
	if _, err := io.WriteString(conn, pollRequest); err != nil {
		return Conn{}, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return Conn{}, err
	}
	switch resp.StatusCode {
	case http.StatusNoContent:
		resp.Body.Close()
		return Conn{}, nil
	case http.StatusSwitchingProtocols:
		c := Conn{Target: resp.Header.Get(TargetHeader), Credential: resp.Header.Get(CredentialHeader)}
		if c.Target == "" {
			return Conn{}, fmt.Errorf("agent switched protocols without a %s header", TargetHeader)
		}
		if c.Credential != "" && !ValidCredential(c.Credential) {
			c.Credential = ""
		}
		return c, nil
	case http.StatusNotFound:
		resp.Body.Close()
		return Conn{}, fmt.Errorf("%w (agent at %s)", ErrNoProxy, r.cfg.Socket)
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		return Conn{}, fmt.Errorf("egress poll: agent answered %s: %s", resp.Status, oneLine(string(msg)))
	}
}

// tunnel decides one connection, dials it and splices until either side
// closes or ctx ends.
func (r *Relay) tunnel(ctx context.Context, c Conn, agent net.Conn, ar *bufio.Reader) {
	target := c.Target
	defer r.drop(agent)
	verdict := func(line string) bool {
		agent.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := io.WriteString(agent, line+"\n")
		agent.SetWriteDeadline(time.Time{})
		return err == nil
	}
	if err := r.cfg.Check(c); err != nil {
		r.observe(target, Denied)
		r.cfg.Logger.Info("egress denied", "target", target, "reason", err.Error())
		verdict("DENY " + oneLine(err.Error()))
		return
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout)
	out, err := r.cfg.Dial(dctx, "tcp", target)
	cancel()
	if err != nil {
		r.observe(target, Failed)
		r.cfg.Logger.Info("egress dial failed", "target", target, "err", err.Error())
		verdict(fmt.Sprintf("FAIL shellbox egress: cannot reach %s: %s", target, oneLine(err.Error())))
		return
	}
	if !r.track(out) {
		out.Close()
		return
	}
	defer r.drop(out)
	r.observe(target, Allowed)
	if !verdict("OK") {
		return
	}
	splice(agent, ar, out, out)
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
