// Package egresswire is what the agent's egress proxy (agent/egress) and
// the server's relay (sandbox/egress) share on the agent socket: the
// upgrade's names and headers, the credential's form, where the proxy
// listens, and the byte Splice both ends run once a tunnel is up. The wire
// protocol itself is described in sandbox/egress's package doc.
//
// How a Splice ends. Each of its two halves copies one side's reads to the
// other side's writes. A half whose source ends cleanly (EOF) passes the
// end on as a half-close of its destination's write side (CloseWrite; a
// connection without one is closed) and the other half goes on: a client
// that shuts its write side still reads the answer, and a destination's
// half-close reaches the client as EOF while the client still sends. A
// half that fails (a read or a write error: a reset, a write to a side
// that closed) means the connection is broken both ways, and ends the
// other half at once: a past deadline on both connections unblocks
// whatever read or write the other half is in, so neither goroutine waits
// for a client that does not read (whose own writes would otherwise block,
// unread, until it gave up). Splice then returns and its callers close
// both connections. What a half-close leaves open is bounded by the peer
// that keeps its half open, as with any TCP connection.
package egresswire

import (
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/shellbox/shellbox/confine"
)

// Upgrade is the protocol name of the long poll's Upgrade header; Header
// carries the waiting connection's destination in the 101 answer.
// CredentialHeader carries the network grant of the process tree that
// opened the connection (ProxyConfig.Grant), when it holds one.
const (
	Upgrade          = "shellbox-egress/1"
	TargetHeader     = "Shellbox-Egress-Target"
	CredentialHeader = "Shellbox-Egress-Credential"
)

// Permission is the sandbox permission (sandbox_permissions) that, once a
// policy grants it for a call, gives the call's process tree a credential
// the relay's check honours (ProxyConfig.Grant). confine defines it, for
// policies to decide it.
const Permission = confine.PermissionNetwork

// DefaultListen is where the agent's proxy listens inside a sandbox. Each
// sandbox has its own network namespace, so a fixed port is no conflict.
const DefaultListen = "127.0.0.1:3128"

// Env returns the variables that point a command's HTTP clients at the proxy
// listening on addr. They hold no secret: a call's network grant is bound
// to its process tree by the proxy (ProxyConfig.Grant), never carried in
// the environment, which every process of the sandbox user can read
// (/proc/<pid>/environ).
func Env(addr string) map[string]string {
	u := "http://" + addr
	return map[string]string{
		"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u,
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
		// Node's fetch and http honour the variables above only when told
		// to (Node 24, 22.21): without it they get no network at all.
		"NODE_USE_ENV_PROXY": "1",
	}
}

// CAFile is where the agent writes the bundle its commands' TLS clients
// trust when the relay terminates TLS for some destinations (those a
// credential is injected into): the image's own roots and the tenant's
// egress CA. It is in the agent's directory, which commands can read and
// not write.
const CAFile = confine.HostDirMount + "/egress-ca.pem"

// CAHeader carries, on a POST /v1/egress without Upgrade, the base64 of
// the PEM certificate(s) the agent adds to its CA bundle (CAFile).
const CAHeader = "Shellbox-Egress-CA"

// CAVars are the variables that point the usual TLS clients at a CA
// bundle: OpenSSL and Go (SSL_CERT_FILE), curl, git, Python requests and
// Node (which adds it to its own roots).
var CAVars = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}

// CAEnv returns CAVars, each set to path.
func CAEnv(path string) map[string]string {
	m := make(map[string]string, len(CAVars))
	for _, k := range CAVars {
		m[k] = path
	}
	return m
}

// MaxTargetBytes bounds a destination, host:port: a DNS name is at most
// 253 bytes.
const MaxTargetBytes = 261

// ValidCredential reports whether s is a well-formed credential: 1-128 of
// [A-Za-z0-9_-].
func ValidCredential(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// OneLine makes s safe for a header and a status line: no control
// characters, at most 1 KiB.
func OneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return Clip(s)
}

// Clip cuts s to at most 1 KiB, marking the cut.
func Clip(s string) string {
	const max = 1 << 10
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// Splice copies a→b and b→a until both directions end, half-closing each
// side's write end when its source ends; ar and br are a's and b's readers
// (bufio readers that may hold read-ahead). An error in either direction
// ends both at once, by a past deadline on a and b (see the package doc).
// It closes nothing else: the callers own a and b, and close them once it
// returns.
func Splice(a net.Conn, ar io.Reader, b net.Conn, br io.Reader) {
	var wg sync.WaitGroup
	var once sync.Once
	broken := func() {
		once.Do(func() {
			a.SetDeadline(aLongTimeAgo)
			b.SetDeadline(aLongTimeAgo)
		})
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if !copyHalf(b, ar) {
			broken()
		}
	}()
	go func() {
		defer wg.Done()
		if !copyHalf(a, br) {
			broken()
		}
	}()
	wg.Wait()
}

// aLongTimeAgo is a deadline that has passed: it ends a blocked read or
// write at once.
var aLongTimeAgo = time.Unix(1, 0)

// copyHalf copies src to dst with a fixed buffer, then half-closes dst's
// write side so the peer sees EOF. It reports whether the half ended
// cleanly: false on a read or write error, or when dst cannot be
// half-closed (it is closed instead, which ends the other half's reads).
func copyHalf(dst net.Conn, src io.Reader) bool {
	buf := make([]byte, 32<<10)
	if _, err := io.CopyBuffer(dst, src, buf); err != nil {
		return false
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite() == nil
	}
	dst.Close()
	return false
}
