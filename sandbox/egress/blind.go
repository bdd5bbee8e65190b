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
// once; a client's is read as a ClientHello (0x16) or an HTTP method (a
// run of capital letters and a space), else the tunnel is blind. A
// ClientHello or method that begins and does not end within headTimeout
// is refused, never let through unread: dribbling it cannot outwait the
// check.

// Bounds of a blind tunnel's first flight.
const (
	// maxClientHello bounds the TLS records read for one ClientHello
	// (post-quantum key shares make them a few KiB; the protocol allows
	// up to 16 MiB).
	maxClientHello = 64 << 10
	// maxMethod bounds an HTTP method's length when guessing whether a
	// first flight is HTTP.
	maxMethod = 16
)

// aLongTimeAgo is a deadline that has passed: it ends a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// blind relays an allowed, unterminated connection (see above): agent is
// the client's side, out the dialled destination, c the connection as the
// client asked for it.
func (r *Relay) blind(agent *agentConn, out net.Conn, c Conn) {
	obr := bufio.NewReaderSize(out, 32<<10)
	clientFirst, err := firstSpeaker(agent, obr, out)
	if err != nil || !clientFirst {
		egresswire.Splice(agent.Conn, agent.br, out, obr)
		return
	}
	_, port, _ := net.SplitHostPort(c.Target)
	elsewhere := func(host string) error { return r.elsewhere(c, host, port) }
	refuse := func(why string) {
		r.logs.info("egress denied", "target", egresswire.Clip(c.Target), "reason", egresswire.Clip(why))
		out.Close()
		agent.Close()
	}
	head, _ := agent.br.Peek(1)
	switch {
	case head[0] == 0x16: // a TLS handshake record
		hello, name, err := readClientHello(agent)
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
		egresswire.Splice(agent.Conn, io.MultiReader(bytes.NewReader(hello), agent.br), out, obr)
	default:
		isHTTP, err := httpMethodFirst(agent)
		if err != nil {
			refuse(fmt.Sprintf("shellbox egress: the first request to %s: %v", c.Target, err))
			return
		}
		if !isHTTP {
			egresswire.Splice(agent.Conn, agent.br, out, obr)
			return
		}
		r.serve(agent.Conn, agent.br, readerConn{out, obr}, &Intercept{Host: hostOnly(c.Target), Elsewhere: elsewhere})
	}
}

// elsewhere judges a name a blind tunnel's client gave (SNI, Host) that is
// not the tunnel's: as a connection of its own to host:port (port: the
// tunnel's, unless the name carries one), by the same Check and grant.
// Refused there, or terminated there, it is an error.
func (r *Relay) elsewhere(c Conn, host, port string) error {
	if h, p, err := net.SplitHostPort(host); err == nil {
		host, port = h, p
	}
	// As DNS reads a name: without case or a final dot.
	host = strings.ToLower(strings.TrimSuffix(host, "."))
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

// readClientHello reads one TLS ClientHello from agent.br (its first byte
// is a handshake record's) under headTimeout and maxClientHello, and
// returns its bytes, as read, and the server name it gives ("": none). An
// error: not a ClientHello, or one that did not come whole in time.
func readClientHello(agent *agentConn) ([]byte, string, error) {
	agent.SetReadDeadline(time.Now().Add(headTimeout))
	defer agent.SetReadDeadline(time.Time{})
	var raw, msg []byte
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(agent.br, hdr[:]); err != nil {
			return nil, "", fmt.Errorf("reading its record: %w", err)
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		if hdr[0] != 0x16 || n == 0 || len(raw)+5+n > maxClientHello {
			return nil, "", errors.New("not a TLS ClientHello of at most 64 KiB")
		}
		rec := make([]byte, 5+n)
		copy(rec, hdr[:])
		if _, err := io.ReadFull(agent.br, rec[5:]); err != nil {
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

// httpMethodFirst reports whether the client's first bytes (in agent.br)
// are an HTTP request line's method: capital letters (or '-') and a space,
// within maxMethod. It waits for as many bytes as it takes to know, each
// within headTimeout of the first: a method that begins and stalls is an
// error, not a protocol let through unread.
func httpMethodFirst(agent *agentConn) (bool, error) {
	agent.SetReadDeadline(time.Now().Add(headTimeout))
	defer agent.SetReadDeadline(time.Time{})
	for n := 1; n <= maxMethod+1; n++ {
		b, err := agent.br.Peek(n)
		if err != nil {
			if len(b) > 0 && errors.Is(err, io.EOF) {
				return false, nil // a short message, then the client's end
			}
			return false, fmt.Errorf("after %d bytes that may begin a request line: %w", len(b), err)
		}
		switch c := b[n-1]; {
		case c == ' ' && n > 1:
			// HTTP/2's connection preface (h2c with prior knowledge,
			// plain-text gRPC) is not read: its frames name their
			// authority each.
			return string(b) != "PRI ", nil
		case c >= 'A' && c <= 'Z', c == '-' && n > 1:
		default:
			return false, nil
		}
	}
	return false, nil
}
