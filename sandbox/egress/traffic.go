package egress

import (
	"net"
)

// Traffic is what a Relay reports to RelayConfig.Traffic: a connection it
// opened to a destination (Requests 1, when the dial succeeded), or bytes
// that went over one (Sent to the destination, Received from it).
type Traffic struct {
	Requests       int64
	Sent, Received int64
}

// counted wraps out, a dialled destination, so its bytes are reported to
// fn as they go (one report per read or write that moved any: at most one
// a 32 KiB buffer on a spliced tunnel), after reporting the connection.
// It keeps CloseWrite, which the splice's half-close asks for.
func counted(out net.Conn, fn func(Traffic)) net.Conn {
	if fn == nil {
		return out
	}
	fn(Traffic{Requests: 1})
	return &countedConn{Conn: out, fn: fn}
}

type countedConn struct {
	net.Conn
	fn func(Traffic)
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.fn(Traffic{Received: int64(n)})
	}
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.fn(Traffic{Sent: int64(n)})
	}
	return n, err
}

// CloseWrite half-closes the destination where it can, else closes it.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
