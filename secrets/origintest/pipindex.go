package origintest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// The project a PipIndex serves: PipWheel is its wheel, whose one module,
// shellbox_workload, holds GREETING = PipGreeting.
const (
	PipProject  = "shellbox-workload"
	PipWheel    = "shellbox_workload-1.0-py3-none-any.whl"
	PipGreeting = "hello from the local index"
)

// PipIndex is a PEP 503 "simple" index over plain HTTP on the host (the
// workload suites' pip install, reached through the egress relay),
// serving PipWheel, made here, and recording each request.
type PipIndex struct {
	Addr string // host:port
	mu   sync.Mutex
	seen []string
}

// Requests are the requests served so far, "METHOD PATH".
func (p *PipIndex) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// NewPipIndex serves a PipIndex on addr (such as "127.0.0.5:0") until the
// test ends.
func NewPipIndex(t testing.TB, addr string) *PipIndex {
	t.Helper()
	whl := pureWheel(t)
	sum := sha256.Sum256(whl)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &PipIndex{Addr: l.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /simple/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/simple/%s/\">%[1]s</a></body></html>\n", PipProject)
	})
	mux.HandleFunc("GET /simple/"+PipProject+"/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/packages/%s#sha256=%x\">%[1]s</a></body></html>\n", PipWheel, sum)
	})
	mux.HandleFunc("GET /packages/"+PipWheel, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(whl)
	})
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, r.Method+" "+r.URL.Path)
		p.mu.Unlock()
		mux.ServeHTTP(w, r)
	})}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return p
}

// pureWheel is PipWheel: a pure-Python wheel of one module with its
// METADATA, WHEEL and RECORD.
func pureWheel(t testing.TB) []byte {
	t.Helper()
	const info = "shellbox_workload-1.0.dist-info/"
	files := []struct{ name, body string }{
		{"shellbox_workload/__init__.py", fmt.Sprintf("GREETING = %q\n", PipGreeting)},
		{info + "METADATA", "Metadata-Version: 2.1\nName: " + PipProject + "\nVersion: 1.0\nSummary: shellbox's workload test package\n"},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: shellbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		zw, err := z.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		zw.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(info + "RECORD,,\n")
	zw, err := z.Create(info + "RECORD")
	if err != nil {
		t.Fatal(err)
	}
	zw.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
