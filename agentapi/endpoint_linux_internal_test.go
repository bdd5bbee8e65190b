package agentapi

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// blackhole returns a TCP address that takes no connection and refuses
// none, as the IP of a deleted pod on a cluster network: a listening
// socket with a backlog of one, filled by a connection nobody accepts, so
// that Linux drops every SYN that follows (tcp_abort_on_overflow 0) and a
// connect waits out the kernel's SYN retries.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	filler, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	return addr
}

// TestDialBlackholed: a dial of an agent whose address takes no
// connection (its pod deleted) fails within connectBound, saying so, and a
// request that made it wraps ErrNotSent (the caller's cue to judge the
// sandbox and try a new one); without the bound it would wait for the
// kernel's SYN retries, over two minutes, or the caller's deadline.
func TestDialBlackholed(t *testing.T) {
	defer func(b time.Duration) { connectBound = b }(connectBound)
	connectBound = 300 * time.Millisecond
	ep := Endpoint{Network: "tcp", Address: blackhole(t)}

	start := time.Now()
	err := within(t, "Dial of a blackholed address", func() error {
		c, err := ep.Dial(context.Background())
		if err == nil {
			c.Close()
		}
		return err
	})
	if took := time.Since(start); err == nil || took > 5*connectBound {
		t.Errorf("Dial: %v after %s, want a failure within about connectBound (%s)", err, took, connectBound)
	}

	start = time.Now()
	err = within(t, "DialEndpoint of a blackholed address", func() error {
		_, err := DialEndpoint(context.Background(), ep)
		return err
	})
	took := time.Since(start)
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, executor.ErrUnavailable) || errors.Is(err, ErrNoAnswer) {
		t.Errorf("DialEndpoint: %v, want unavailable: %v", err, ErrNotSent)
	}
	if !strings.Contains(err.Error(), "no connection to the agent at tcp:"+ep.Address+" within 300ms") {
		t.Errorf("DialEndpoint: %q, want it to say no connection was made within the bound", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("DialEndpoint: %v is context.DeadlineExceeded, as a caller's own deadline", err)
	}
	if took > 5*connectBound {
		t.Errorf("DialEndpoint took %s, want about connectBound (%s)", took, connectBound)
	}
}
