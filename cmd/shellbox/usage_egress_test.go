package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/usage"
)

// tcpCount counts the bytes an origin's TCP connections read and wrote,
// beneath any TLS: what the egress relay's connections to it carried.
type tcpCount struct{ read, written atomic.Int64 }

type countingListener struct {
	net.Listener
	n *tcpCount
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n *tcpCount
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.read.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.written.Add(int64(n))
	return n, err
}

// sizedBody answers any request with size bytes of 'x'.
func sizedBody(size int) http.Handler {
	body := strings.Repeat("x", size)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		io.WriteString(w, body)
	})
}

// countedOrigin serves h on a fresh port of addr (a host loopback address
// sandboxes reach only through the relay), over TLS if tls, counting its
// connections' bytes.
func countedOrigin(t *testing.T, addr string, h http.Handler, tls bool) (hostPort string, n *tcpCount) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	n = &tcpCount{}
	s := httptest.NewUnstartedServer(h)
	s.Listener.Close()
	s.Listener = countingListener{Listener: l, n: n}
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return l.Addr().String(), n
}

// TestUsageEgress runs `shellbox serve` on each engine and runtime with a
// policy that allows two origins of the host, fetches a 1,000,000-byte
// body over plain HTTP and a 200,000-byte one over HTTPS (a blind CONNECT
// tunnel) with curl in the session's sandbox, and is refused a third
// origin. GET /v1/usage (the session and its tenant), `shellbox usage` and
// /metrics then count 2 egress connections (the refused one is not
// dialled) and, as received bytes, exactly what the origins' own TCP
// connections wrote (status lines, headers, bodies, the TLS records with
// the handshake); as sent bytes what they read (the requests as the proxy
// forwards them, the TLS records), up to 1 KiB more: a TLS close_notify
// the relay writes after the origin closed is sent, never read by it.
func TestUsageEgress(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, eng enginetest.Engine) {
		for _, runtime := range []string{"runc", "runsc"} {
			t.Run(runtime, func(t *testing.T) { usageEgress(t, eng, runtime) })
		}
	})
}

func usageEgress(t *testing.T, eng enginetest.Engine, runtime string) {
	requireEngine(t)
	bin := buildBinaries(t)
	eng.Runtime(t, t.TempDir(), filepath.Join(filepath.Dir(bin), "shellbox-agent"), runtime) // skips without runsc
	const bigBody, tlsBody = 1_000_000, 200_000
	plain, plainN := countedOrigin(t, "127.0.0.2:0", sizedBody(bigBody), false)
	secure, tlsN := countedOrigin(t, "127.0.0.2:0", sizedBody(tlsBody), true)
	refused := egressHost(t, "127.0.0.3:0")

	pols := t.TempDir()
	pol := strings.Replace(egressPolicy(plain, secure), "runtime: runc", "runtime: "+runtime, 1)
	if err := os.WriteFile(filepath.Join(pols, dockerTenant+".yaml"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(eng.Config(t)+fmt.Sprintf(`policies:
  dir: %s
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  runtime: %s
  labels:
    %s: "1"
usage:
  interval: 1s
server:
  tenants:
    %s:
      tokens: [%q]
`, pols, dockertest.StateDir(t), dockertest.Owner(t), dockertest.Image, runtime, dockertest.LabelTest, dockerTenant, server.HashToken(testToken))), 0o644)
	const session = "egress"
	removeSandboxesAtEnd(t, cfg, dockerTenant, session)
	srv := startServeProcess(t, bin, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			for len(srv.logs) > 0 {
				t.Log(<-srv.logs)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := client.New(srv.url, testToken, nil)
	call := func(command string) string {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"command": command, "description": "egress usage test"})
		r, err := c.Call(ctx, session, "bash", args)
		if err != nil || r.IsError {
			t.Fatalf("%s: %v %q", command, err, r.Text)
		}
		return r.Text
	}
	if got := call("curl -sS -m 60 -o /dev/null -w '%{http_code} %{size_download}' http://" + plain + "/big 2>&1"); got != "200 1000000" {
		t.Fatalf("plain HTTP: %q", got)
	}
	if got := call("curl -sSk -m 60 -o /dev/null -w '%{http_code} %{size_download}' https://" + secure + "/tls 2>&1"); got != "200 200000" {
		t.Fatalf("HTTPS through a CONNECT tunnel: %q", got)
	}
	if got := call("curl -sS -m 30 -o /dev/null -w '%{http_code}' http://" + refused + "/ 2>&1"); got != "403" {
		t.Fatalf("an origin off the list: %q", got)
	}

	// The relay counts as the bytes go, and the origins close first: wait
	// until two readings a second apart agree.
	read := func() egressFigures {
		t.Helper()
		rep, err := c.Usage(ctx, map[string][]string{"session": {session}})
		if err != nil || len(rep.Sessions) != 1 {
			t.Fatalf("usage: %v %+v", err, rep)
		}
		if s, tn := egressOf(rep.Sessions[0].Figures), egressOf(rep.Tenants[dockerTenant]); s != tn {
			t.Errorf("tenant %s's egress %+v, want its one session's %+v", dockerTenant, tn, s)
		}
		return egressOf(rep.Sessions[0].Figures)
	}
	f := read()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		g := read()
		if g == f {
			break
		}
		f = g
	}
	wantSent, wantRecv := plainN.read.Load()+tlsN.read.Load(), plainN.written.Load()+tlsN.written.Load()
	t.Logf("origins' TCP: plain read %d wrote %d; TLS read %d wrote %d", plainN.read.Load(), plainN.written.Load(), tlsN.read.Load(), tlsN.written.Load())
	t.Logf("/v1/usage: %d egress connections, %d bytes sent (origins read %d: %+d), %d received (origins wrote %d: %+d; %d over the bodies)",
		f.EgressRequests, f.EgressSentBytes, wantSent, f.EgressSentBytes-wantSent, f.EgressReceivedBytes, wantRecv, f.EgressReceivedBytes-wantRecv,
		f.EgressReceivedBytes-bigBody-tlsBody)
	if f.EgressRequests != 2 || f.EgressSentBytes < wantSent || f.EgressSentBytes-wantSent > 1024 || f.EgressReceivedBytes != wantRecv {
		t.Errorf("/v1/usage: %d connections, %d bytes sent, %d received: want 2, %d (up to 1 KiB more) and %d",
			f.EgressRequests, f.EgressSentBytes, f.EgressReceivedBytes, wantSent, wantRecv)
	}

	// `shellbox usage` prints the same figures.
	out, stderr, code := runBinary(t, bin, cfg, "usage", "--server", srv.url, "--token", testToken, "--session", session)
	if code != 0 {
		t.Fatalf("shellbox usage: %d\n%s\n%s", code, out, stderr)
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 2 {
		t.Fatalf("shellbox usage: want a header and one row:\n%s", out)
	}
	cols, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	for col, want := range map[string]int64{"EGRESS-REQ": f.EgressRequests, "EGRESS-OUT-B": f.EgressSentBytes, "EGRESS-IN-B": f.EgressReceivedBytes} {
		i := slices.Index(cols, col)
		if i < 0 || len(row) != len(cols) || row[i] != strconv.FormatInt(want, 10) {
			t.Errorf("shellbox usage: column %s: want %d in\n%s", col, want, out)
		}
	}

	// /metrics, by tenant, since the process started: the same.
	resp, err := http.Get(srv.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), `{tenant="`+dockerTenant+`"} `); ok {
			metrics[k] = v
		}
	}
	resp.Body.Close()
	for name, want := range map[string]int64{"shellbox_usage_egress_requests_total": f.EgressRequests,
		"shellbox_usage_egress_sent_bytes_total": f.EgressSentBytes, "shellbox_usage_egress_received_bytes_total": f.EgressReceivedBytes} {
		if v, err := strconv.ParseFloat(metrics[name], 64); err != nil || int64(v) != want {
			t.Errorf("/metrics: %s{tenant=%q} %q, want %d", name, dockerTenant, metrics[name], want)
		}
	}
	srv.stop(t)
}

// egressFigures are the egress counters of usage.Figures.
type egressFigures struct{ EgressRequests, EgressSentBytes, EgressReceivedBytes int64 }

func egressOf(f usage.Figures) egressFigures {
	return egressFigures{f.EgressRequests, f.EgressSentBytes, f.EgressReceivedBytes}
}
