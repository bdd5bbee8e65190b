package egress

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

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
