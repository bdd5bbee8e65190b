package egress

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	agentegress "github.com/shellbox/shellbox/agent/egress"
)

// BenchmarkRequest compares one HTTP request on a new connection, direct
// and through proxy + relay (a tunnel per request: the proxy closes
// connections after one request), side by side.
func BenchmarkRequest(b *testing.B) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer origin.Close()
	r := newRig(b, agentegress.ProxyConfig{}, hostPort(b, origin.URL))
	r.startRelay(b, RelayConfig{})
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	proxied := r.client(nil)
	for _, c := range []struct {
		name string
		hc   *http.Client
	}{{"direct", direct}, {"relayed", proxied}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := c.hc.Get(origin.URL)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkThroughput moves 64 MiB per iteration through a tunnel.
func BenchmarkThroughput(b *testing.B) {
	const size = 64 << 20
	chunk := strings.Repeat("x", 1<<20)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range size / len(chunk) {
			io.WriteString(w, chunk)
		}
	}))
	defer origin.Close()
	r := newRig(b, agentegress.ProxyConfig{}, hostPort(b, origin.URL))
	r.startRelay(b, RelayConfig{})
	hc := r.client(nil)
	b.SetBytes(size)
	for b.Loop() {
		resp, err := hc.Get(origin.URL)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != size {
			b.Fatalf("got %d bytes", n)
		}
	}
}

// BenchmarkHolders is the attribution a grant lookup costs per proxied
// connection (TreeGrant): the client socket's line in /proc/net/tcp, then
// the fd links of every process, here with a child process holding the
// socket among this host's processes.
func BenchmarkHolders(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	port := strings.TrimPrefix(l.Addr().String(), "127.0.0.1:")
	child := exec.Command("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port+"; read -r _ <&3")
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	c, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	procs, _ := os.ReadDir("/proc")
	b.ReportMetric(float64(len(procs)), "proc-entries")
	for b.Loop() {
		hs, err := agentegress.Holders(c, nil)
		if err != nil || len(hs) != 1 || hs[0].PID != child.Process.Pid {
			b.Fatalf("holders %v %v, want the child %d", hs, err, child.Process.Pid)
		}
	}
}

// BenchmarkEgressPaths: the four ways a sandbox's HTTPS request can
// leave, side by side in one run, on kept-alive connections to one
// origin (HTTP/2 and HTTP/1.1, a certificate of an "upstream" CA): direct
// (no proxy), today's blind tunnel, and the terminating relay injecting a
// credential, over HTTP/1.1 and over HTTP/2 (and direct over HTTP/2, the
// protocol's own cost). Differences are to direct's (HTTP/1.1). Each iteration makes one
// request on every path in turn, so a load that drifts during the run
// weighs on all of them alike. small: a small GET, reported as p50 and
// p99 per path and the p50 each adds to direct's; download: a 100 MiB
// GET, reported as MB/s per path (the median iteration's) and the share
// of direct's throughput lost.
func BenchmarkEgressPaths(b *testing.B) {
	ir := newOriginRig(b, nil, true)
	port := ir.port()
	proxy := http.ProxyURL(&url.URL{Scheme: "http", Host: ir.proxyAddr})
	// Direct and blind, the client sends no server name (an address's
	// URL) and verifies the origin's leaf for localhost itself: a
	// ClientHello naming localhost, the intercepted host, would close
	// the blind tunnel (blind.go).
	upstream := &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
		opts := x509.VerifyOptions{Roots: ir.upstreamPool, DNSName: "localhost", Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}}
	tenant := &tls.Config{RootCAs: ir.tenantPool}
	// Each transport has its own TLS config: one that may speak h2 adds
	// "h2" to the one it is given.
	h1Only := map[string]func(string, *tls.Conn) http.RoundTripper{}
	paths := []struct {
		name, base, proto string
		tr                *http.Transport
	}{
		{"direct", "https://127.0.0.1:" + port, "HTTP/1.1", &http.Transport{TLSClientConfig: upstream.Clone(), TLSNextProto: h1Only}},
		// 127.0.0.1 is not intercepted: the rig's check terminates
		// localhost only.
		{"blind", "https://127.0.0.1:" + port, "HTTP/1.1", &http.Transport{Proxy: proxy, TLSClientConfig: upstream.Clone(), TLSNextProto: h1Only}},
		{"terminated-h1", "https://localhost:" + port, "HTTP/1.1", &http.Transport{Proxy: proxy, TLSClientConfig: tenant.Clone(), TLSNextProto: h1Only}},
		{"terminated-h2", "https://localhost:" + port, "HTTP/2.0", &http.Transport{Proxy: proxy, TLSClientConfig: tenant.Clone(), ForceAttemptHTTP2: true}},
		// What h2 costs without a relay, for terminated-h2's sake.
		{"direct-h2", "https://127.0.0.1:" + port, "HTTP/2.0", &http.Transport{TLSClientConfig: upstream.Clone(), ForceAttemptHTTP2: true}},
	}
	get := func(b *testing.B, i int, path string) (time.Duration, int64) {
		p := paths[i]
		req, _ := http.NewRequest("GET", p.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+testPlaceholder)
		start := time.Now()
		resp, err := (&http.Client{Transport: p.tr}).Do(req)
		if err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err != nil || resp.StatusCode != 200 || resp.Proto != p.proto {
			b.Fatalf("%s: %s %s, %d bytes: %v", p.name, resp.Proto, resp.Status, n, err)
		}
		return d, n
	}
	for i, p := range paths {
		get(b, i, "/s") // the connection, kept alive from here on
		defer p.tr.CloseIdleConnections()
	}
	quantile := func(ds []time.Duration, q float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	b.Run("small", func(b *testing.B) {
		took := make([][]time.Duration, len(paths))
		for b.Loop() {
			for i := range paths {
				d, _ := get(b, i, "/s")
				took[i] = append(took[i], d)
			}
		}
		direct := quantile(took[0], 0.5)
		for i, p := range paths {
			p50 := quantile(took[i], 0.5)
			b.ReportMetric(float64(p50.Microseconds()), p.name+"-p50-µs")
			b.ReportMetric(float64(quantile(took[i], 0.99).Microseconds()), p.name+"-p99-µs")
			if i > 0 {
				b.ReportMetric(float64((p50 - direct).Microseconds()), p.name+"-added-p50-µs")
			}
		}
	})
	b.Run("download", func(b *testing.B) {
		const mib = 100
		took := make([][]time.Duration, len(paths))
		for b.Loop() {
			for i := range paths {
				d, n := get(b, i, fmt.Sprintf("/big?mib=%d", mib))
				if n != mib<<20 {
					b.Fatalf("%s: %d bytes", paths[i].name, n)
				}
				took[i] = append(took[i], d)
			}
		}
		mbps := func(d time.Duration) float64 { return float64(mib<<20) / 1e6 / d.Seconds() }
		direct := mbps(quantile(took[0], 0.5))
		for i, p := range paths {
			m := mbps(quantile(took[i], 0.5))
			b.ReportMetric(m, p.name+"-MB/s")
			if i > 0 {
				b.ReportMetric(100*(1-m/direct), p.name+"-loss-%")
			}
		}
	})
}
