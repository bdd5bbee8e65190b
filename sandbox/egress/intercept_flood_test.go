package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The tests of this file flood the relay with what costs a sender
// nothing (PING, SETTINGS: each asks for an answer) from either side,
// and read a large answer slowly or not at all; they assert bounds on
// the relay's memory (the heap after a collection, sampled while the
// flood or the stall lasts) and goroutines, never durations.

// Bounds the tests hold the process to (relay, proxy, and the tests'
// own client and origin: all one process).
const (
	// floodHeapBound bounds the heap's growth during a flood of control
	// frames: the library queues at most 10,000 answers to a client that
	// does not read, a few hundred bytes each.
	floodHeapBound = 16 << 20
	// slowHeapBound bounds the heap's growth while a 100 MiB answer waits
	// for a client that stopped reading: on h2 the relay's stream window
	// (1 MiB) and copy buffer (64 KiB), the client transport's own window
	// (4 MiB); on HTTP/1.1 and the blind tunnel a few buffers of 32 KiB.
	// The rest waits in the kernel's socket buffers, not in the heap.
	slowHeapBound = 16 << 20
	// goroutineBound bounds the goroutines a flood or a stalled answer
	// adds (a connection's reader, writer and handler, each side).
	goroutineBound = 20
)

// sample is the heap in use after a collection and the goroutines: what
// a flood's test compares with the figures before it.
func sample() (heap int64, goroutines int) {
	return heapInUse(), runtime.NumGoroutine()
}

// TestInterceptH2RawControlFlood: a sandbox's client sends PING or
// SETTINGS frames, each asking for an answer, as fast as it can and
// reads none of the answers. PING: the relay's HTTP/2 layer queues the
// answers it cannot write, at most 10,000 (x/net's
// maxQueuedControlFrames), and past them closes the connection (without
// a GOAWAY: a client that reads nothing would not read one). SETTINGS:
// x/net owes one acknowledgement however many came (a flag, not a
// queue), so the flood costs it nothing that grows and the connection
// stays open; the test stops at half a million. Either way the heap and the
// goroutines stay bounded, and the connection's record counts the
// frames.
func TestInterceptH2RawControlFlood(t *testing.T) {
	for _, kind := range []string{"PING", "SETTINGS"} {
		t.Run(kind, func(t *testing.T) {
			ir := newOriginRig(t, nil, true)
			h := ir.h2raw(t)
			h.headers(1, true, ir.get("GET", "/first")...)
			if a := h.await(1); a.status != "200" {
				t.Fatalf("first: %s", a)
			}
			heap0, g0 := sample()
			var peakHeap int64
			peakG := g0
			// Up to 4 million frames (68 MiB), written 4,096 at a time; the
			// kernel's buffers on the way back hold a few hundred thousand
			// answers before the relay's writes block.
			const batch = 1 << 12
			frames := 1 << 22
			if kind == "SETTINGS" {
				frames = 1 << 19
			}
			sent := 0
			var err error
			for sent < frames && err == nil {
				err = h.write(func() error {
					for i := range batch {
						var err error
						if kind == "PING" {
							err = h.fr.WritePing(false, [8]byte{byte(i), byte(i >> 8)})
						} else {
							err = h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
				sent += batch
				if sent%(64*batch) == 0 {
					heap, g := sample()
					peakHeap, peakG = max(peakHeap, heap-heap0), max(peakG, g)
				}
			}
			if err == nil && kind == "PING" {
				t.Errorf("%d %s frames and no answer read: the connection is still open", sent, kind)
			}
			heap, g := sample()
			peakHeap, peakG = max(peakHeap, heap-heap0), max(peakG, g)
			t.Logf("%s flood: %d frames written (the writes ended with: %v); heap grew by at most %d KiB, goroutines %d -> %d at most",
				kind, sent, err, peakHeap>>10, g0, peakG)
			if peakHeap > floodHeapBound {
				t.Errorf("the heap grew by %d bytes during a %s flood (bound %d)", peakHeap, kind, floodHeapBound)
			}
			if peakG-g0 > goroutineBound {
				t.Errorf("goroutines grew from %d to %d during a %s flood", g0, peakG, kind)
			}
			h.tc.Close()
			if rec := ir.connRecord(t); !strings.Contains(rec.Refused, "1 streams opened, 1 relayed") {
				t.Errorf("the connection's record: %s", rec.Refused)
			}
		})
	}
}

// TestInterceptH2RawPingFloodRead: a flood of PINGs whose answers the
// client reads, never more than 2,000 unanswered, is answered, every one
// (HTTP/2 sets no rate), with the relay's heap and goroutines bounded,
// and the connection still serves. (A client that sends faster than it
// reads has its connection closed as one that reads nothing does, once
// 10,000 answers wait.)
func TestInterceptH2RawPingFloodRead(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	h := ir.h2raw(t)
	heap0, g0 := sample()
	const pings = 200000
	acked := 0
	done := make(chan error, 1)
	thousands := make(chan struct{}, pings/1000)
	go func() {
		var err error
		for i := 0; i < pings && err == nil; i += 1000 {
			if i >= 2000 {
				<-thousands // the answers to all but the last 2,000 came
			}
			err = h.write(func() error {
				for j := range 1000 {
					if err := h.fr.WritePing(false, [8]byte{byte(j), byte(j >> 8), byte(i >> 10)}); err != nil {
						return err
					}
				}
				return nil
			})
		}
		done <- err
	}()
	var peakHeap int64
	peakG := g0
	for acked < pings && h.err == nil {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.err = err
			break
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			if acked++; acked%1000 == 0 {
				thousands <- struct{}{}
			}
			if acked%20000 == 0 {
				heap, g := sample()
				peakHeap, peakG = max(peakHeap, heap-heap0), max(peakG, g)
			}
		}
	}
	if err := <-done; err != nil || acked != pings {
		t.Fatalf("%d of %d PINGs answered: %v, %v", acked, pings, err, h.err)
	}
	t.Logf("%d PINGs answered; heap grew by at most %d KiB, goroutines %d -> %d at most", acked, peakHeap>>10, g0, peakG)
	if peakHeap > floodHeapBound || peakG-g0 > goroutineBound {
		t.Errorf("during %d PINGs the heap grew by %d bytes, goroutines from %d to %d", pings, peakHeap, g0, peakG)
	}
	h.headers(1, true, ir.get("GET", "/after-pings")...)
	if a := h.await(1); a.status != "200" {
		t.Errorf("after the PINGs: %s", a)
	}
}

// TestInterceptH2OriginControlFlood: the upstream floods the relay's own
// HTTP/2 connection to it with PING or SETTINGS frames and reads none of
// the answers. The relay's transport answers each from its reading loop,
// so once its writes block it reads no more: the origin's writes block
// in turn, and the relay's heap and goroutines stay bounded however long
// it goes on. Once the origin gives up, the sandbox's request is answered
// 502.
func TestInterceptH2OriginControlFlood(t *testing.T) {
	for _, kind := range []string{"PING", "SETTINGS"} {
		t.Run(kind, func(t *testing.T) {
			ir := newOriginRig(t, nil, true)
			leaf, err := ir.upstreamCA.Leaf("localhost")
			if err != nil {
				t.Fatal(err)
			}
			l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{http2.NextProtoTLS}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var written atomic.Int64
			conns := make(chan net.Conn, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				conns <- c
				br := bufio.NewReader(c)
				if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
					return
				}
				bw := bufio.NewWriterSize(c, 64<<10)
				fr := http2.NewFramer(bw, br)
				if fr.WriteSettings() != nil || bw.Flush() != nil {
					return
				}
				// From here on nothing is read: the relay's answers pile up
				// on its side.
				for {
					for i := range 1 << 10 {
						if kind == "PING" {
							err = fr.WritePing(false, [8]byte{byte(i)})
						} else {
							err = fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16384})
						}
					}
					if err == nil {
						err = bw.Flush()
					}
					if err != nil {
						return
					}
					written.Add(1 << 10)
				}
			}()
			port := l.Addr().(*net.TCPAddr).Port
			answered := make(chan *http.Response, 1)
			go func() {
				resp, err := ir.client().Get(fmt.Sprintf("https://localhost:%d/flooded", port))
				if err != nil {
					answered <- nil
					return
				}
				resp.Body.Close()
				answered <- resp
			}()
			var c net.Conn
			select {
			case c = <-conns:
			case resp := <-answered:
				t.Fatalf("answered before the origin was reached: %v", resp)
			}
			heap0, g0 := sample()
			n := stalled(t, &written)
			heap, g := sample()
			t.Logf("%s flood from the origin: %d frames written before its writes blocked; heap grew by %d KiB, goroutines %d -> %d",
				kind, n, (heap-heap0)>>10, g0, g)
			if heap-heap0 > floodHeapBound || g-g0 > goroutineBound {
				t.Errorf("the origin's %s flood grew the heap by %d bytes, goroutines from %d to %d", kind, heap-heap0, g0, g)
			}
			c.Close()
			if resp := <-answered; resp == nil || resp.StatusCode != http.StatusBadGateway {
				t.Errorf("once the origin closed: %v", resp)
			}
		})
	}
}

// stalled waits until the count n stops growing (unchanged over 50
// looks 20 ms apart; the test fails if it never does within a minute)
// and returns it: a writer blocked by a reader that stopped.
func stalled(t *testing.T, n *atomic.Int64) int64 {
	t.Helper()
	last, same := int64(-1), 0
	for range 3000 {
		v := n.Load()
		if v == last {
			if same++; same == 50 {
				return v
			}
		} else {
			last, same = v, 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the writer never stalled: %d written", n.Load())
	return 0
}

// TestInterceptSlowReader: a sandbox's client reads the first MiB of a
// 100 MiB download a KiB at a time, then stops reading; the origin goes
// on writing until every buffer on the way is full and stalls. What the
// relay holds meanwhile is bounded (slowHeapBound: its flow-control
// window and copy buffers, not the answer) on each path: terminated
// HTTP/1.1 and h2, and the blind tunnel under either. How much the
// origin sent before it stalled is the kernel's socket buffers' doing
// (loopback's autotuned receive buffers reach tcp_rmem's maximum, 32 MiB
// here, on each of the connections on the way), logged, not asserted.
func TestInterceptSlowReader(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	proxy := http.ProxyURL(&url.URL{Scheme: "http", Host: ir.proxyAddr})
	// The blind tunnel's client names no server (an address's URL) and
	// checks the origin's leaf for localhost itself (as
	// BenchmarkEgressPaths).
	upstream := &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
		opts := x509.VerifyOptions{Roots: ir.upstreamPool, DNSName: "localhost", Intermediates: x509.NewCertPool()}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}}
	tenant := &tls.Config{RootCAs: ir.tenantPool}
	h1Only := map[string]func(string, *tls.Conn) http.RoundTripper{}
	for _, p := range []struct {
		name, base, proto string
		tr                *http.Transport
	}{
		{"terminated-h1", "https://localhost:" + ir.port(), "HTTP/1.1", &http.Transport{Proxy: proxy, TLSClientConfig: tenant.Clone(), TLSNextProto: h1Only}},
		{"terminated-h2", "https://localhost:" + ir.port(), "HTTP/2.0", &http.Transport{Proxy: proxy, TLSClientConfig: tenant.Clone(), ForceAttemptHTTP2: true}},
		{"blind-h1", "https://127.0.0.1:" + ir.port(), "HTTP/1.1", &http.Transport{Proxy: proxy, TLSClientConfig: upstream.Clone(), TLSNextProto: h1Only}},
		{"blind-h2", "https://127.0.0.1:" + ir.port(), "HTTP/2.0", &http.Transport{Proxy: proxy, TLSClientConfig: upstream.Clone(), ForceAttemptHTTP2: true}},
	} {
		t.Run(p.name, func(t *testing.T) {
			defer p.tr.CloseIdleConnections()
			ir.mu.Lock()
			ir.records = nil
			ir.mu.Unlock()
			hc := &http.Client{Transport: p.tr}
			if resp, err := hc.Get(p.base + "/warm"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			heap0, g0 := sample()
			sent0 := ir.bigSent.Load()
			resp, err := hc.Get(p.base + "/big?mib=100")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.Proto != p.proto || resp.StatusCode != 200 {
				t.Fatalf("%s %s", resp.Proto, resp.Status)
			}
			buf := make([]byte, 1<<10)
			var read int64
			for read < 1<<20 {
				n, err := resp.Body.Read(buf)
				read += int64(n)
				if err != nil {
					t.Fatal(err)
				}
			}
			sent := stalled(t, &ir.bigSent) - sent0
			heap, g := sample()
			t.Logf("%s: read %d KiB, the origin sent %d KiB and stalled; heap grew by %d KiB, goroutines %d -> %d",
				p.name, read>>10, sent>>10, (heap-heap0)>>10, g0, g)
			if heap-heap0 > slowHeapBound {
				t.Errorf("the heap grew by %d bytes while the answer waited (bound %d)", heap-heap0, slowHeapBound)
			}
			if g-g0 > goroutineBound {
				t.Errorf("goroutines grew from %d to %d", g0, g)
			}
			// The client goes: the relay's exchange ends (its reader of
			// the answer with it) and records what it relayed.
			resp.Body.Close()
			p.tr.CloseIdleConnections()
			if !strings.HasPrefix(p.name, "terminated") {
				return
			}
			for range 3000 { // a stuck relay fails the test, it is not timed
				for _, r := range ir.recorded() {
					if r.Path == "/big" {
						if r.BytesIn >= 100<<20 || r.BytesIn < read {
							t.Errorf("the record of an answer cut short: %+v", r)
						}
						return
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Errorf("no record of the answer once its client went")
		})
	}
}
