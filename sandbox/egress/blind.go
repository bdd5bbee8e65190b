package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/shellbox/shellbox/agentapi/egresswire"
)

// A blind tunnel is one the relay does not terminate: its bytes are the
// client's and the destination's own. Yet a front end that serves many
// names (a CDN, a shared load balancer, a virtual-hosting server) routes
// what it is sent by the name the client's first flight gives, not by the
// address the tunnel was allowed for: a TLS ClientHello's server name
// (SNI), a plain HTTP request's Host. A tunnel allowed for one name could
// so reach another one: a name the policy refuses, or one whose
// connections are terminated to be judged (HTTP rules) or given a secret
// (credentials), unjudged.
//
// So the relay reads what the client sends first on every blind tunnel,
// and judges the name it gives as a connection of its own to that name,
// by the same Check (with the same grant): refused there, or terminated
// there, the tunnel is closed. A ClientHello's server name is read once;
// plain HTTP is read request by request (a kept-alive or pipelined request
// may name another host), each re-framed as on terminated connections.
// Anything else (SSH, a database protocol, TLS without a server name,
// HTTP/2 with prior knowledge, a protocol whose server speaks first) goes
// as it came: what is not read cannot be judged, and docs/security.md
// says so.
//
// Who speaks first decides: the relay waits for the first byte of either
// side. A server's (a banner: SMTP, SSH, FTP) makes the tunnel blind at
// once. A client's is read on as far as it takes to know what it is:
//   - TLS: a record header (a content type, 0x03 and a version byte); its
//     first record must be a handshake record whose message is a
//     ClientHello (an alert or anything else first is refused: a front end
//     may skip it and route by the hello after);
//   - HTTP/1: a request line (a method token, a target of visible bytes,
//     "HTTP/1.x" and a line end), after any blank lines;
//   - anything else, as soon as a byte shows it is neither (RTSP's or
//     SIP's version, a Redis command's line end, a binary length prefix).
// What begins as TLS or a request line and stalls is refused after
// headTimeout, never let through unread: dribbling it cannot outwait the
// check.

// Bounds of a blind tunnel's first flight.
const (
	// maxClientHello bounds the TLS records read for one ClientHello
	// (post-quantum key shares make them a few KiB; the protocol allows
	// up to 16 MiB).
	maxClientHello = 64 << 10
)

// aLongTimeAgo is a deadline that has passed: it ends a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// blind relays an allowed, unterminated connection (see above): agent is
// the client's side, out the dialled destination, c the connection as the
// client asked for it. It returns why it refused the connection at its
// first flight ("": it did not).
func (r *Relay) blind(agent *agentConn, out net.Conn, c Conn) (refused string) {
	obr := bufio.NewReaderSize(out, 32<<10)
	clientFirst, err := firstSpeaker(agent, obr, out)
	if err != nil || !clientFirst {
		r.observe(c.Target, Allowed)
		egresswire.Splice(agent.Conn, agent.br, out, obr)
		return
	}
	elsewhere := func(host string) error { return r.elsewhere(c, host) }
	refuse := func(why string) {
		refused = egresswire.Clip(egresswire.OneLine(why))
		r.observe(c.Target, Denied)
		r.logs.info("egress denied", "target", egresswire.Clip(c.Target), "reason", egresswire.Clip(why))
		out.Close()
		agent.Close()
	}
	kind, first, err := classify(agent)
	if err != nil {
		refuse(fmt.Sprintf("shellbox egress: the first bytes to %s: %v", c.Target, err))
		return
	}
	cr := io.MultiReader(bytes.NewReader(first), agent.br)
	if kind != flightTLS {
		// (Plain-text requests naming a refused host are answered 421 one
		// by one: the connection was allowed.)
		r.observe(c.Target, Allowed)
	}
	switch kind {
	case flightTLS:
		hello, name, err := readClientHello(agent, cr)
		if err != nil {
			refuse(fmt.Sprintf("shellbox egress: the TLS handshake to %s: %v", c.Target, err))
			return
		}
		if name != "" && !sameHost(name, hostOnly(c.Target)) {
			if err := elsewhere(name); err != nil {
				refuse(fmt.Sprintf("shellbox egress: TLS names %s on a connection to %s: %v", egresswire.Clip(name), c.Target, err))
				return
			}
		}
		r.observe(c.Target, Allowed)
		egresswire.Splice(agent.Conn, io.MultiReader(bytes.NewReader(hello), cr), out, obr)
	case flightHTTP:
		r.serve(agent.Conn, cr, readerConn{out, obr}, &Intercept{Host: hostOnly(c.Target), Elsewhere: elsewhere})
	default:
		egresswire.Splice(agent.Conn, cr, out, obr)
	}
	return refused
}

// elsewhere judges a name a blind tunnel's client gave (SNI, Host) that is
// not the tunnel's: as a connection of its own to that host at the
// tunnel's port (where the bytes go, whatever port the name carries), by
// the same Check and grant. Refused there, or terminated there, it is an
// error.
func (r *Relay) elsewhere(c Conn, name string) error {
	_, port, _ := net.SplitHostPort(c.Target)
	// As DNS reads a name: without case or a final dot.
	host := strings.ToLower(strings.TrimSuffix(hostOnly(name), "."))
	d, err := r.cfg.Check(Conn{Target: net.JoinHostPort(host, port), Credential: c.Credential})
	if err != nil {
		return err
	}
	if d.Intercept != nil {
		return fmt.Errorf("connections to %s are terminated by the relay (HTTP rules or credentials), and this one is not", egresswire.Clip(host))
	}
	return nil
}

// firstSpeaker waits for the first byte of either side (the client's, in
// agent.br; the destination's, in obr) and reports whether the client's
// came first. The other side's wait is ended by a past deadline, and its
// deadline cleared again; bytes either side sent stay buffered. An error
// is the first side's (it closed, or failed, before sending).
func firstSpeaker(agent *agentConn, obr *bufio.Reader, out net.Conn) (bool, error) {
	type first struct {
		client bool
		err    error
	}
	ch := make(chan first, 2)
	go func() {
		_, err := agent.br.Peek(1)
		ch <- first{true, err}
	}()
	go func() {
		_, err := obr.Peek(1)
		ch <- first{false, err}
	}()
	f := <-ch
	if f.client {
		out.SetReadDeadline(aLongTimeAgo)
	} else {
		agent.SetReadDeadline(aLongTimeAgo)
	}
	<-ch
	// A Peek that failed on the deadline returned (and so cleared) its
	// error: the readers are usable again.
	out.SetReadDeadline(time.Time{})
	agent.SetReadDeadline(time.Time{})
	return f.client, f.err
}

// readClientHello reads one TLS ClientHello from cr (the client's bytes:
// classify found its first record's header) under headTimeout and
// maxClientHello, and returns its bytes, as read, and the server name it
// gives ("": none). An error: not a ClientHello, or one that did not come
// whole in time.
func readClientHello(agent *agentConn, cr io.Reader) ([]byte, string, error) {
	agent.SetReadDeadline(time.Now().Add(headTimeout))
	defer agent.SetReadDeadline(time.Time{})
	var raw, msg []byte
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(cr, hdr[:]); err != nil {
			return nil, "", fmt.Errorf("reading its record: %w", err)
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		if hdr[0] != 0x16 || n == 0 || len(raw)+5+n > maxClientHello {
			return nil, "", errors.New("not a TLS ClientHello of at most 64 KiB")
		}
		rec := make([]byte, 5+n)
		copy(rec, hdr[:])
		if _, err := io.ReadFull(cr, rec[5:]); err != nil {
			return nil, "", fmt.Errorf("reading its record: %w", err)
		}
		raw = append(raw, rec...)
		msg = append(msg, rec[5:]...)
		if len(msg) >= 4 {
			if msg[0] != 1 { // client_hello
				return nil, "", fmt.Errorf("the first handshake message is of type %d, not a ClientHello", msg[0])
			}
			if len(msg) >= 4+int(msg[1])<<16|int(msg[2])<<8|int(msg[3]) {
				break
			}
		}
	}
	name, err := serverName(raw)
	if err != nil {
		return nil, "", err
	}
	return raw, name, nil
}

// errHelloRead ends serverName's handshake once the ClientHello is read.
var errHelloRead = errors.New("client hello read")

// serverName parses a ClientHello's records with crypto/tls's own parser
// (a server handshake over them, ended as soon as the hello is read) and
// returns the server name it gives.
func serverName(records []byte) (string, error) {
	var name string
	var read bool
	srv := tls.Server(helloConn{r: bytes.NewReader(records)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, read = h.ServerName, true
			return nil, errHelloRead
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), headTimeout)
	defer cancel()
	err := srv.HandshakeContext(ctx)
	if !read {
		return "", fmt.Errorf("not a ClientHello crypto/tls reads: %w", err)
	}
	return name, nil
}

// helloConn is the connection serverName's handshake runs over: it reads
// the hello's records and discards what the handshake writes (an alert).
type helloConn struct {
	net.Conn // nil: only the methods below are used
	r        io.Reader
}

func (c helloConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c helloConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c helloConn) Close() error                     { return nil }
func (c helloConn) SetDeadline(time.Time) error      { return nil }
func (c helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c helloConn) SetWriteDeadline(time.Time) error { return nil }
func (c helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// What a client's first flight is (classify).
type flight int

const (
	flightOther flight = iota
	flightTLS
	flightHTTP
)

// classify reads the client's first bytes (agent.br) as far as it takes to
// tell a TLS ClientHello's record or an HTTP/1 request line from anything
// else (see the top of the file), and returns what it read. Each byte is
// waited for within headTimeout of the first: a TLS header or request line
// that begins and stalls is an error, as is one over maxRequestHead or a
// TLS record other than a ClientHello's first.
func classify(agent *agentConn) (flight, []byte, error) {
	agent.SetReadDeadline(time.Now().Add(headTimeout))
	defer agent.SetReadDeadline(time.Time{})
	var b []byte
	next := func() (byte, error) {
		if len(b) >= maxRequestHead {
			return 0, fmt.Errorf("a request line over %d bytes", maxRequestHead)
		}
		c, err := agent.br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, errEnd
			}
			return 0, fmt.Errorf("after %d bytes that may begin TLS or HTTP: %w", len(b), err)
		}
		b = append(b, c)
		return c, nil
	}
	kind, err := classifyBytes(next)
	if errors.Is(err, errEnd) {
		return flightOther, b, nil // a short message, then the client's end
	}
	return kind, b, err
}

// errEnd: the client ended before its first flight could be told.
var errEnd = errors.New("the client ended")

// classifyBytes is classify's decision, on the bytes next gives.
func classifyBytes(next func() (byte, error)) (flight, error) {
	c, err := next()
	if err != nil {
		return 0, err
	}
	if c >= 0x14 && c <= 0x18 { // a TLS record's content type
		typ := c
		if c, err = next(); err != nil || c != 0x03 {
			return flightOther, err
		}
		if c, err = next(); err != nil || c < 0x01 || c > 0x04 {
			return flightOther, err
		}
		for range 2 { // the record's length
			if _, err := next(); err != nil {
				return 0, err
			}
		}
		c, err = next()
		if err != nil {
			return 0, err
		}
		if typ != 0x16 || c != 0x01 {
			return 0, fmt.Errorf("a TLS record (type %d, message %d) before the ClientHello", typ, c)
		}
		return flightTLS, nil
	}
	for c == '\r' || c == '\n' { // blank lines before a request
		if c, err = next(); err != nil {
			return 0, err
		}
	}
	// method SP target SP HTTP/1.x CRLF
	n := 0
	for ; isTokenByte(c); n++ {
		if c, err = next(); err != nil {
			return 0, err
		}
	}
	if n == 0 || c != ' ' {
		return flightOther, nil
	}
	for n = 0; ; n++ {
		if c, err = next(); err != nil {
			return 0, err
		}
		if c == ' ' && n > 0 {
			break
		}
		if c <= ' ' || c == 0x7f {
			return flightOther, nil
		}
	}
	for _, want := range []byte("HTTP/1.") {
		if c, err = next(); err != nil {
			return 0, err
		}
		if c != want {
			return flightOther, nil // RTSP/1.0, SIP/2.0, HTTP/2.0 (h2c's preface), ...
		}
	}
	if c, err = next(); err != nil || c < '0' || c > '9' {
		return flightOther, err
	}
	if c, err = next(); err != nil || (c != '\r' && c != '\n') {
		return flightOther, err
	}
	return flightHTTP, nil
}

// isTokenByte reports whether c may be in an HTTP token (RFC 9110 tchar).
func isTokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
