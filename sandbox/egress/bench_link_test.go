package egress

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	agentegress "github.com/shellbox/shellbox/agent/egress"
	"github.com/shellbox/shellbox/secrets"
)

// linkOriginEnv, set, makes the test binary the origin of
// BenchmarkEgressLink (TestMain): the directory holding its certificate.
const linkOriginEnv = "SHELLBOX_EGRESS_LINK_ORIGIN"

func TestMain(m *testing.M) {
	if dir := os.Getenv(linkOriginEnv); dir != "" {
		os.Exit(linkOrigin(dir))
	}
	os.Exit(m.Run())
}

// linkOrigin serves HTTPS (h2 and HTTP/1.1) on a port of its own, which
// it prints, until its standard input ends: /s a small answer, /big?mib=N
// N MiB of zeros.
func linkOrigin(dir string) int {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			n, _ := strconv.ParseInt(r.URL.Query().Get("mib"), 10, 64)
			w.Header().Set("Content-Length", strconv.FormatInt(n<<20, 10))
			io.Copy(w, io.LimitReader(zeros{}, n<<20))
			return
		}
		io.WriteString(w, "ok")
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go srv.ServeTLS(l, "", "")
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// linkNet is a network namespace holding the origin, behind a veth pair
// whose both ends can be given a token bucket (tc tbf): a link of a
// chosen speed between the origin and the relay and client, which stay
// in the host's namespace.
type linkNet struct {
	ns, host, peer string // namespace, veth ends (host's, the namespace's)
}

func (n *linkNet) run(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// setRate gives both directions of the link rate ("" or "none": no
// token bucket, the veth's own speed).
func (n *linkNet) setRate(rate string) error {
	for _, dev := range [][]string{{"tc"}, {"ip", "netns", "exec", n.ns, "tc"}} {
		name := n.host
		if len(dev) > 1 {
			name = n.peer
		}
		n.run(append(dev, "qdisc", "del", "dev", name, "root")...) // none yet: fine
		if rate == "" || rate == "none" {
			continue
		}
		// A burst of 4 ms of the rate (at least 1 MB): the kernel's
		// segments (GSO, up to 64 KiB) pass whole.
		bits, err := strconv.ParseInt(strings.TrimSuffix(rate, "gbit"), 10, 64)
		if err != nil {
			return fmt.Errorf("rate %q: %w", rate, err)
		}
		burst := max(1<<20, bits*1e9/8/250)
		args := append(dev, "qdisc", "add", "dev", name, "root", "tbf", "rate", rate, "burst", strconv.FormatInt(burst, 10), "latency", "50ms")
		if err := n.run(args...); err != nil {
			return err
		}
	}
	return nil
}

// newLinkNet makes the namespace and the link (10.213.7.1 the host's end;
// 10.213.7.2 and .3 the origin's), or skips the benchmark saying why.
func newLinkNet(b *testing.B) *linkNet {
	if os.Geteuid() != 0 {
		b.Skip("BenchmarkEgressLink needs root (a network namespace, a veth pair, tc): run it as root on Linux")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("BenchmarkEgressLink needs %s (iproute2): %v", tool, err)
		}
	}
	id := strconv.Itoa(os.Getpid() % 100000)
	n := &linkNet{ns: "shellbox-egress-bench-" + id, host: "sbeb" + id + "h", peer: "sbeb" + id + "p"}
	if err := n.run("ip", "netns", "add", n.ns); err != nil {
		b.Skipf("BenchmarkEgressLink: no network namespace here: %v", err)
	}
	b.Cleanup(func() {
		n.run("ip", "link", "del", n.host)
		n.run("ip", "netns", "del", n.ns)
	})
	in := []string{"ip", "netns", "exec", n.ns}
	for _, args := range [][]string{
		{"ip", "link", "add", n.host, "type", "veth", "peer", "name", n.peer},
		{"ip", "link", "set", n.peer, "netns", n.ns},
		{"ip", "addr", "add", "10.213.7.1/24", "dev", n.host},
		{"ip", "link", "set", n.host, "up"},
		append(in, "ip", "addr", "add", "10.213.7.2/24", "dev", n.peer),
		append(in, "ip", "addr", "add", "10.213.7.3/24", "dev", n.peer),
		append(in, "ip", "link", "set", n.peer, "up"),
		append(in, "ip", "link", "set", "lo", "up"),
	} {
		if err := n.run(args...); err != nil {
			b.Fatal(err)
		}
	}
	return n
}

// linkCA is a CA of the benchmark's own and a leaf it signs for the
// origin's two addresses (secrets.CA's leaves name hosts, not addresses).
func linkCA(b *testing.B, dir string, ips ...string) *x509.CertPool {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "link bench CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "origin"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &leafKey.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	kb, _ := x509.MarshalPKCS8PrivateKey(leafKey)
	os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool
}

// cpuTime is this process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEgressLink is BenchmarkEgressPaths with the origin behind a
// link of a chosen speed instead of on loopback: the origin runs in a
// process of its own (this binary, TestMain) in a network namespace
// joined to the host's by a veth pair, each end shaped by a token bucket
// (tc tbf) at 1 and 10 Gbit/s, and unshaped ("none": the veth, as fast
// as the CPU moves bytes). Client, proxy and relay are this process, so
// its CPU time per request is theirs alone: direct's is the client's,
// and what a relayed path adds to it is the proxy's and the relay's.
// Reported per path: small GET p50 and p99 and what it adds to direct's
// p50; the 100 MiB download's MB/s (median iteration), its loss against
// direct's, and the process's CPU ms per 100 MiB. Needs root, ip and tc
// (it skips saying so without them). SHELLBOX_EGRESS_LINK_RATES
// (comma-separated, "none" for no bucket) chooses the speeds.
//
//	sudo go test ./sandbox/egress/ -run XXX -bench EgressLink -benchtime 5x
func BenchmarkEgressLink(b *testing.B) {
	n := newLinkNet(b)
	dir := b.TempDir()
	const terminated, plain = "10.213.7.2", "10.213.7.3"
	upstreamPool := linkCA(b, dir, terminated, plain)

	origin := exec.Command("ip", "netns", "exec", n.ns, os.Args[0])
	origin.Env = append(os.Environ(), linkOriginEnv+"="+dir)
	stdin, _ := origin.StdinPipe()
	stdout, _ := origin.StdoutPipe()
	origin.Stderr = os.Stderr
	if err := origin.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); origin.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("the origin: %v", err)
	}
	port := strings.TrimSpace(line)

	tenantCA, err := secrets.LoadOrCreateCA(filepath.Join(dir, "tenant.pem"), "acme")
	if err != nil {
		b.Fatal(err)
	}
	tenantPool := x509.NewCertPool()
	tenantPool.AppendCertsFromPEM(tenantCA.CertPEM())
	tmpl, _ := secrets.ParseTemplate("${secret:tok}")
	inj := secrets.NewInjector(staticSource{"tok": testSecret}, []secrets.Credential{{Name: "test", Value: tmpl, Placeholder: testPlaceholder}})
	r := newRig(b, agentegress.ProxyConfig{})
	r.startRelay(b, RelayConfig{Check: func(c Conn) (Decision, error) {
		host, _, _ := net.SplitHostPort(c.Target)
		if host != terminated {
			return Decision{}, nil
		}
		return Decision{Intercept: &Intercept{
			Host:  host,
			Cert:  func() (*tls.Certificate, error) { return tenantCA.Leaf(host) },
			Roots: upstreamPool,
			Rewrite: func(h http.Header) (func(http.Header), []string, error) {
				d, err := inj.Rewrite(h)
				return d.Scrub, d.Names, err
			},
		}}, nil
	}})
	proxy := http.ProxyURL(&url.URL{Scheme: "http", Host: r.proxyAddr})
	// The tenant's leaves name hosts (DNS names) and the Go client
	// checks an address against IP SANs: the chain is verified, the name
	// as the leaf's subject.
	tenant := &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
		opts := x509.VerifyOptions{Roots: tenantPool, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return err
		}
		if cn := cs.PeerCertificates[0].Subject.CommonName; cn != terminated {
			return fmt.Errorf("leaf for %s", cn)
		}
		return nil
	}}
	upstream := &tls.Config{RootCAs: upstreamPool}
	h1Only := map[string]func(string, *tls.Conn) http.RoundTripper{}
	paths := []struct {
		name, base, proto string
		tr                *http.Transport
	}{
		{"direct", "https://" + plain + ":" + port, "HTTP/1.1", &http.Transport{TLSClientConfig: upstream.Clone(), TLSNextProto: h1Only}},
		{"blind", "https://" + plain + ":" + port, "HTTP/1.1", &http.Transport{Proxy: proxy, TLSClientConfig: upstream.Clone(), TLSNextProto: h1Only}},
		{"terminated-h1", "https://" + terminated + ":" + port, "HTTP/1.1", &http.Transport{Proxy: proxy, TLSClientConfig: tenant.Clone(), TLSNextProto: h1Only}},
		{"terminated-h2", "https://" + terminated + ":" + port, "HTTP/2.0", &http.Transport{Proxy: proxy, TLSClientConfig: tenant.Clone(), ForceAttemptHTTP2: true}},
		{"direct-h2", "https://" + plain + ":" + port, "HTTP/2.0", &http.Transport{TLSClientConfig: upstream.Clone(), ForceAttemptHTTP2: true}},
	}
	get := func(b *testing.B, i int, path string) (time.Duration, time.Duration, int64) {
		p := paths[i]
		req, _ := http.NewRequest("GET", p.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+testPlaceholder)
		cpu, start := cpuTime(), time.Now()
		resp, err := (&http.Client{Transport: p.tr}).Do(req)
		if err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		got, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d, c := time.Since(start), cpuTime()-cpu
		if err != nil || resp.StatusCode != 200 || resp.Proto != p.proto {
			b.Fatalf("%s: %s %s, %d bytes: %v", p.name, resp.Proto, resp.Status, got, err)
		}
		return d, c, got
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
	rates := []string{"1gbit", "10gbit", "none"}
	if s := os.Getenv("SHELLBOX_EGRESS_LINK_RATES"); s != "" {
		rates = strings.Split(s, ",")
	}
	for _, rate := range rates {
		if err := n.setRate(rate); err != nil {
			b.Fatal(err)
		}
		b.Run(rate+"/small", func(b *testing.B) {
			took := make([][]time.Duration, len(paths))
			for b.Loop() {
				for i := range paths {
					d, _, _ := get(b, i, "/s")
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
		b.Run(rate+"/download", func(b *testing.B) {
			const mib = 100
			took := make([][]time.Duration, len(paths))
			cpu := make([][]time.Duration, len(paths))
			for b.Loop() {
				for i := range paths {
					d, c, got := get(b, i, fmt.Sprintf("/big?mib=%d", mib))
					if got != mib<<20 {
						b.Fatalf("%s: %d bytes", paths[i].name, got)
					}
					took[i] = append(took[i], d)
					cpu[i] = append(cpu[i], c)
				}
			}
			mbps := func(d time.Duration) float64 { return float64(mib<<20) / 1e6 / d.Seconds() }
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			direct := mbps(quantile(took[0], 0.5))
			for i, p := range paths {
				m := mbps(quantile(took[i], 0.5))
				b.ReportMetric(m, p.name+"-MB/s")
				b.ReportMetric(ms(quantile(cpu[i], 0.5)), p.name+"-cpu-ms")
				if i > 0 {
					b.ReportMetric(100*(1-m/direct), p.name+"-loss-%")
				}
			}
			// What proxy and relay add to the client's CPU: a relayed
			// path's less direct's of its protocol.
			b.ReportMetric(ms(quantile(cpu[1], 0.5)-quantile(cpu[0], 0.5)), "blind-relay-cpu-ms")
			b.ReportMetric(ms(quantile(cpu[2], 0.5)-quantile(cpu[0], 0.5)), "terminated-h1-relay-cpu-ms")
			b.ReportMetric(ms(quantile(cpu[3], 0.5)-quantile(cpu[4], 0.5)), "terminated-h2-relay-cpu-ms")
		})
	}
}
