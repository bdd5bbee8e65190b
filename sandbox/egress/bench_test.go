package egress

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkRequest compares one HTTP request on a new connection, direct
// and through proxy + relay (a tunnel per request: the proxy closes
// connections after one request), side by side.
func BenchmarkRequest(b *testing.B) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer origin.Close()
	r := newRig(b, ProxyConfig{}, hostPort(b, origin.URL))
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
	r := newRig(b, ProxyConfig{}, hostPort(b, origin.URL))
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
