package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The tests of this file speak HTTP/2 to the terminating relay frame by
// frame (http2.Framer, hpack), as a hostile client would, not through a
// library's client, which would never send most of what they do; they
// assert what the relay answered (the status, RST_STREAM, GOAWAY and
// their codes) and what the origin behind it read (originSaw).

// h2raw is a hostile HTTP/2 client's connection to the relay.
type h2raw struct {
	t        *testing.T
	tc       *tls.Conn
	bw       *bufio.Writer
	fr       *http2.Framer
	enc      *hpack.Encoder
	hbuf     bytes.Buffer
	settings map[http2.SettingID]uint32

	wmu sync.Mutex // writes: a flood's writer and the reader's acks

	streams map[uint32]*h2answer
	goaway  *http2.GoAwayFrame
	err     error // the connection's reading ended
}

// h2answer is what came back on one stream.
type h2answer struct {
	status string
	header http.Header
	body   []byte
	rst    *http2.ErrCode
	done   bool
}

func (a *h2answer) String() string {
	if a.rst != nil {
		return "RST_STREAM " + a.rst.String()
	}
	return fmt.Sprintf("%s %v %q", a.status, a.header, a.body)
}

// h2raw opens a TLS connection to localhost through the proxy, h2 by
// ALPN, sends the preface and empty SETTINGS, and reads the relay's.
func (ir *interceptRig) h2raw(t *testing.T) *h2raw {
	t.Helper()
	c, br := ir.connect(t, "localhost:"+ir.port(), "")
	tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: "localhost", RootCAs: ir.tenantPool, NextProtos: []string{http2.NextProtoTLS}})
	// A stuck test fails rather than hangs; nothing is measured by it.
	tc.SetDeadline(time.Now().Add(60 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
		t.Fatalf("negotiated %q", p)
	}
	h := &h2raw{t: t, tc: tc, bw: bufio.NewWriterSize(tc, 64<<10), settings: map[http2.SettingID]uint32{}, streams: map[uint32]*h2answer{}}
	h.fr = http2.NewFramer(h.bw, tc)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 4 << 20
	h.enc = hpack.NewEncoder(&h.hbuf)
	h.write(func() error {
		if _, err := io.WriteString(h.bw, http2.ClientPreface); err != nil {
			return err
		}
		return h.fr.WriteSettings()
	})
	for len(h.settings) == 0 && h.err == nil {
		h.readOne()
	}
	if h.err != nil {
		t.Fatalf("reading the relay's SETTINGS: %v", h.err)
	}
	return h
}

// write runs w under the write lock and flushes.
func (h *h2raw) write(w func() error) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	err := w()
	if err == nil {
		err = h.bw.Flush()
	}
	return err
}

// block is the HPACK encoding of fields, given as name, value pairs.
func (h *h2raw) block(fields ...string) []byte {
	h.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		if err := h.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}); err != nil {
			h.t.Fatal(err)
		}
	}
	return bytes.Clone(h.hbuf.Bytes())
}

// headers sends a HEADERS frame of fields on stream id.
func (h *h2raw) headers(id uint32, end bool, fields ...string) {
	h.t.Helper()
	b := h.block(fields...)
	if err := h.write(func() error {
		return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: end, EndHeaders: true})
	}); err != nil {
		h.t.Fatalf("HEADERS %d: %v", id, err)
	}
}

func (h *h2raw) data(id uint32, end bool, p []byte) error {
	return h.write(func() error { return h.fr.WriteData(id, end, p) })
}

// readOne reads a frame and files it under its stream; it acks SETTINGS
// and PING and gives back the window a DATA frame took.
func (h *h2raw) readOne() {
	if h.err != nil {
		return
	}
	f, err := h.fr.ReadFrame()
	if err != nil {
		h.err = err
		return
	}
	st := func(id uint32) *h2answer {
		a := h.streams[id]
		if a == nil {
			a = &h2answer{header: http.Header{}}
			h.streams[id] = a
		}
		return a
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return
		}
		f.ForeachSetting(func(s http2.Setting) error { h.settings[s.ID] = s.Val; return nil })
		h.write(h.fr.WriteSettingsAck)
	case *http2.PingFrame:
		if !f.IsAck() {
			h.write(func() error { return h.fr.WritePing(true, f.Data) })
		}
	case *http2.MetaHeadersFrame:
		a := st(f.StreamID)
		for _, hf := range f.Fields {
			if hf.Name == ":status" {
				a.status = hf.Value
			} else if !hf.IsPseudo() {
				a.header.Add(hf.Name, hf.Value)
			}
		}
		a.done = a.done || f.StreamEnded()
	case *http2.DataFrame:
		a := st(f.StreamID)
		a.body = append(a.body, f.Data()...)
		a.done = a.done || f.StreamEnded()
		if n := uint32(len(f.Data())); n > 0 {
			h.write(func() error {
				h.fr.WriteWindowUpdate(0, n)
				return h.fr.WriteWindowUpdate(f.StreamID, n)
			})
		}
	case *http2.RSTStreamFrame:
		a := st(f.StreamID)
		code := f.ErrCode
		a.rst, a.done = &code, true
	case *http2.GoAwayFrame:
		h.goaway = f
	}
}

// await reads frames until stream id has ended (or been reset), the
// connection ended, or a GOAWAY left it unprocessed.
func (h *h2raw) await(id uint32) *h2answer {
	h.t.Helper()
	for {
		if a := h.streams[id]; a != nil && a.done {
			return a
		}
		if h.err != nil || (h.goaway != nil && id > h.goaway.LastStreamID) {
			return &h2answer{}
		}
		h.readOne()
	}
}

// drain reads until the connection ends: what GOAWAY said, if any.
func (h *h2raw) drain() *http2.GoAwayFrame {
	for h.err == nil {
		h.readOne()
	}
	return h.goaway
}

func (ir *interceptRig) sawOrigin() []originSaw {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	return append([]originSaw(nil), ir.saw...)
}

// get is a request's pseudo-headers for path on the rig's origin.
func (ir *interceptRig) get(method, path string) []string {
	return []string{":method", method, ":scheme", "https", ":authority", "localhost:" + ir.port(), ":path", path}
}

// TestInterceptH2RawAuthority: the host a stream names, however it names
// it, is the connection's or the stream is refused before the origin
// hears of it; CONNECT, plain or extended, opens nothing.
func TestInterceptH2RawAuthority(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	h := ir.h2raw(t)
	if v, ok := h.settings[http2.SettingEnableConnectProtocol]; ok && v != 0 {
		t.Errorf("the relay offers extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL=%d)", v)
	}
	self := "localhost:" + ir.port()
	base := []string{":method", "GET", ":scheme", "https"}
	for i, c := range []struct {
		name   string
		fields []string
		want   string // a status, or "reset"
	}{
		{"another :authority", []string{":authority", "evil.example", ":path", "/1"}, "421"},
		{"another :authority, the port's", []string{":authority", "evil.example:" + ir.port(), ":path", "/2"}, "421"},
		{":authority and another Host", []string{":authority", self, ":path", "/3", "host", "evil.example"}, "reset"},
		{"another :authority and Host the tunnel's", []string{":authority", "evil.example", ":path", "/4", "host", self}, "reset"},
		{"no :authority, another Host", []string{":path", "/5", "host", "evil.example"}, "421"},
		{"no :authority, no Host", []string{":path", "/6"}, "421"},
		{"no :authority, Host the tunnel's", []string{":path", "/ok-host", "host", self}, "200"},
		{":authority the tunnel's", []string{":authority", self, ":path", "/ok-authority"}, "200"},
		{"the tunnel's :authority, another host in an absolute :path", []string{":authority", self, ":path", "https://evil.example/ok-absolute"}, "reset"},
		{"userinfo naming the tunnel's host", []string{":authority", "localhost@evil.example", ":path", "/7"}, "refused"},
		{"the tunnel's host:port as userinfo", []string{":authority", self + "@evil.example", ":path", "/8"}, "refused"},
		{"another host with the tunnel's as userinfo", []string{":authority", "evil.example@" + self, ":path", "/9"}, "refused"},
		{"the tunnel's host and a suffix", []string{":authority", "localhost.evil.example:" + ir.port(), ":path", "/10"}, "421"},
		{"the tunnel's host in capitals, rooted", []string{":authority", "LOCALHOST.:" + ir.port(), ":path", "/ok-case"}, "200"},
	} {
		id := uint32(2*i + 1)
		h.headers(id, true, append(append([]string(nil), base...), c.fields...)...)
		a := h.await(id)
		got := a.status
		if a.rst != nil {
			got = "reset"
		}
		if c.want == "refused" && (got == "421" || got == "reset") {
			got = "refused"
		}
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.name, a, c.want)
		}
		if a.status == "421" && !strings.Contains(a.header.Get("Shellbox-Error"), "on a connection to localhost") {
			t.Errorf("%s: 421 without the relay's reason: %s", c.name, a)
		}
	}
	// CONNECT (to anywhere), and extended CONNECT (RFC 8441, a WebSocket
	// over the stream): refused, a 405 or the stream reset.
	h.headers(101, true, ":method", "CONNECT", ":authority", "evil.example:443")
	if a := h.await(101); a.status != "405" {
		t.Errorf("CONNECT: %s", a)
	}
	h.headers(103, true, ":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":authority", self, ":path", "/ws")
	if a := h.await(103); a.status != "405" && (a.rst == nil || *a.rst != http2.ErrCodeProtocol) {
		t.Errorf("extended CONNECT: %s", a)
	}
	// The connection goes on: a last request is relayed.
	h.headers(105, true, ir.get("GET", "/last")...)
	if a := h.await(105); a.status != "200" {
		t.Errorf("after the refusals: %s", a)
	}
	var paths []string
	for _, s := range ir.sawOrigin() {
		paths = append(paths, s.Path)
		if !strings.EqualFold(strings.Replace(s.Host, ".:", ":", 1), self) || s.Header.Get("Host") != "" {
			t.Errorf("the origin read %s for Host %q (header %q)", s.Path, s.Host, s.Header.Get("Host"))
		}
	}
	if strings.Join(paths, " ") != "/ok-host /ok-authority /ok-case /last" {
		t.Errorf("the origin read %q", paths)
	}
	if h.goaway != nil || h.err != nil {
		t.Errorf("the connection ended: %v %v", h.goaway, h.err)
	}
}

// TestInterceptH2RawRules: each stream of one connection is judged on its
// own: a denied method or path after an allowed stream, however the path
// is spelt, is refused naming its rule; the origin reads the allowed ones
// alone, with the secret for the placeholder.
func TestInterceptH2RawRules(t *testing.T) {
	ir := newOriginRig(t, testRules(t), true)
	h := ir.h2raw(t)
	auth := []string{"authorization", "Bearer " + testPlaceholder}
	h.headers(1, true, append(ir.get("GET", "/repos/acme/x"), auth...)...)
	if a := h.await(1); a.status != "200" || string(a.body) != "GET /repos/acme/x 0" {
		t.Fatalf("allowed: %s", a)
	}
	for i, c := range []struct{ method, path, rule string }{
		{"POST", "/repos/acme/x/merges", "http[0].rules[2]"},
		{"POST", "/repos/acme/x/pulls/../merges", "http[0].rules[2]"},
		{"POST", "//repos/acme//x/merges", "http[0].rules[2]"},
		{"DELETE", "/repos/acme/x", "http[0].default"},
		{"post", "/repos/acme/x/merges", "http[0].rules[2]"},
	} {
		id := uint32(3 + 2*i)
		h.headers(id, false, append(ir.get(c.method, c.path), auth...)...)
		h.data(id, true, []byte("m"))
		a := h.await(id)
		if a.status == "400" && c.method == "post" {
			continue // a method not in upper case, refused before the rules
		}
		if a.status != "403" || !strings.Contains(a.header.Get("Shellbox-Error"), "is denied by rule "+c.rule) || !strings.Contains(string(a.body), c.rule) {
			t.Errorf("%s %s on stream %d: %s", c.method, c.path, id, a)
		}
	}
	h.headers(51, true, append(ir.get("GET", "/repos/acme/y"), auth...)...)
	if a := h.await(51); a.status != "200" {
		t.Errorf("allowed after the refusals: %s", a)
	}
	saw := ir.sawOrigin()
	if len(saw) != 2 || saw[0].Path != "/repos/acme/x" || saw[1].Path != "/repos/acme/y" {
		t.Fatalf("the origin read %+v", saw)
	}
	for _, s := range saw {
		if got := s.Header.Get("Authorization"); got != "Bearer "+testSecret {
			t.Errorf("the origin read Authorization %q", got)
		}
	}
	recs := ir.recorded()
	if len(recs) != 7 {
		t.Errorf("%d records for 7 streams: %+v", len(recs), recs)
	}
}

// TestInterceptH2RawNoCredential: a placeholder sent to a host the relay
// terminates for its rules alone (no credential of its) arrives as the
// placeholder, in every header it is in.
func TestInterceptH2RawNoCredential(t *testing.T) {
	ir := newOriginRig(t, testRules(t), true)
	ir.noCredential.Store(true)
	h := ir.h2raw(t)
	h.headers(1, true, append(ir.get("GET", "/repos/acme/x"), "authorization", "Bearer "+testPlaceholder, "x-token", testPlaceholder)...)
	if a := h.await(1); a.status != "200" {
		t.Fatalf("%s", a)
	}
	saw := ir.sawOrigin()
	if len(saw) != 1 || saw[0].Header.Get("Authorization") != "Bearer "+testPlaceholder || saw[0].Header.Get("X-Token") != testPlaceholder {
		t.Fatalf("the origin read %+v", saw)
	}
}

// TestInterceptH2RawHeaderList: a request's header list over the relay's
// bound (SETTINGS_MAX_HEADER_LIST_SIZE, 64 KiB and HPACK's overhead) split
// over CONTINUATION frames is answered 431 when it ends there, and ends
// the connection when CONTINUATION frames go on past it: the relay stops
// reading, so what the client can make it read is bounded.
func TestInterceptH2RawHeaderList(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	h := ir.h2raw(t)
	limit := h.settings[http2.SettingMaxHeaderListSize]
	if limit < maxRequestHead || limit > 2*maxRequestHead {
		t.Fatalf("SETTINGS_MAX_HEADER_LIST_SIZE %d, for a head of %d bytes", limit, maxRequestHead)
	}
	// Fields of 4 KiB up to just under the limit, then one of 8 KiB that
	// passes it, in CONTINUATION frames of 1 KiB: the list is over only
	// once its last field is read, in its last frame.
	fields := ir.get("GET", "/big-head")
	size := 0
	for i := 0; i+1 < len(fields); i += 2 {
		size += len(fields[i]) + len(fields[i+1]) + 32
	}
	for i := 0; size+4096+32+8 < int(limit)-8192; i++ {
		name := fmt.Sprintf("x-f%04d", i)
		fields = append(fields, name, strings.Repeat("v", 4096))
		size += len(name) + 4096 + 32
	}
	// Over by 100 bytes, with more than 8 KiB left before it.
	fields = append(fields, "x-last", strings.Repeat("l", int(limit)-size-len("x-last")-32+100))
	sendSplit := func(id uint32, b []byte, frag int, more int) error {
		return h.write(func() error {
			first := min(frag, len(b))
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:first], EndStream: true}); err != nil {
				return err
			}
			for b = b[first:]; len(b) > 0; {
				n := min(frag, len(b))
				if err := h.fr.WriteContinuation(id, len(b) == n && more == 0, b[:n]); err != nil {
					return err
				}
				b = b[n:]
			}
			return nil
		})
	}
	if err := sendSplit(1, h.block(fields...), 1024, 0); err != nil {
		t.Fatal(err)
	}
	if a := h.await(1); a.status != "431" {
		t.Errorf("a header list of %d bytes and more: %s", size, a)
	}
	// The connection goes on (HPACK's state is kept whole).
	h.headers(3, true, ir.get("GET", "/after-431")...)
	if a := h.await(3); a.status != "200" {
		t.Errorf("after a 431: %s", a)
	}

	// A header list that goes on past the bound: fragments of a field
	// that never ends, as many as the client wants to send. The relay
	// ends the connection; the flood's writer finds it closed long
	// before the bytes it was ready to send are gone.
	const flood = 256 << 20
	first := h.block(ir.get("GET", "/flood")...)
	// Four whole fields of 4,000 bytes a frame, each a literal not
	// indexed (0x00), its name's length 5, its value's 4,000 (0x7f, then
	// 3,873 in 7-bit groups).
	field := append([]byte{0x00, 0x05}, "x-big"...)
	field = append(field, 0x7f, 0xa1, 0x1e)
	field = append(field, bytes.Repeat([]byte{'v'}, 4000)...)
	frag := bytes.Repeat(field, 4)
	written := make(chan int64, 1)
	go func() {
		var n int64
		err := h.write(func() error {
			return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: first, EndStream: true})
		})
		for err == nil && n < flood {
			err = h.write(func() error { return h.fr.WriteContinuation(5, false, frag) })
			n += int64(len(frag))
		}
		written <- n
	}()
	ga := h.drain()
	n := <-written
	if ga == nil || (ga.ErrCode != http2.ErrCodeProtocol && ga.ErrCode != http2.ErrCodeCompression) {
		t.Errorf("a header list that never ends: GOAWAY %v, reading ended with %v", ga, h.err)
	}
	if n >= flood {
		t.Errorf("the relay read %d bytes of one header list without ending the connection", n)
	}
	t.Logf("CONTINUATION flood: the writer sent %d bytes before the connection ended (%v)", n, ga)
	for _, s := range ir.sawOrigin() {
		if s.Path != "/after-431" {
			t.Errorf("the origin read %s", s.Path)
		}
	}
	// The 431 is the protocol layer's, before the relay's handler: the
	// request has no record of its own, the connection's record counts
	// it (a stream opened and not relayed) once the connection ended.
	rec := ir.connRecord(t)
	if !strings.Contains(rec.Refused, "3 streams opened, 1 relayed") {
		t.Errorf("the connection's record: %+v", rec)
	}
	if recs := ir.recorded(); len(recs) != 2 || recs[0].Path != "/after-431" {
		t.Errorf("records: %+v", recs)
	}
}

// connRecord waits for the record of a connection the HTTP/2 layer
// refused streams on (h2Watch; written once the relay's side of it has
// ended) and checks what every such record holds: the host, the layer,
// no path, and its count among the relay's outcomes.
func (ir *interceptRig) connRecord(t *testing.T) RequestRecord {
	t.Helper()
	for range 2000 { // a stuck relay fails the test, it is not timed
		for _, rec := range ir.recorded() {
			if rec.Method != "HTTP/2" {
				continue
			}
			if rec.Host != "localhost" || rec.Path != "" || !strings.HasPrefix(rec.Refused, "shellbox egress: the HTTP/2 layer refused") {
				t.Errorf("the connection's record: %+v", rec)
			}
			if !slices.Contains(ir.outcomesSeen(), "refused localhost") {
				t.Errorf("outcomes %q: the refusal is not counted", ir.outcomesSeen())
			}
			t.Logf("the connection's record: %s", rec.Refused)
			return rec
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no record of the connection's refusals: %+v", ir.recorded())
	return RequestRecord{}
}

// TestInterceptH2RawRefusalsRecorded: streams the HTTP/2 layer resets
// before the relay's handler (no :path, an extended CONNECT) and one it
// answers itself (a header list over the bound: 431) have no request
// record; the connection's record names each error and counts the
// streams not relayed, never a header's value. A CONNECT is the relay's
// own refusal (405): a request record.
func TestInterceptH2RawRefusalsRecorded(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	h := ir.h2raw(t)
	h.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", "localhost:"+ir.port(), "authorization", "Bearer "+testPlaceholder)
	if a := h.await(1); a.rst == nil {
		t.Errorf("no :path: %s", a)
	}
	h.headers(3, true, ":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":authority", "localhost:"+ir.port(), ":path", "/ws")
	if a := h.await(3); a.rst == nil {
		t.Errorf("extended CONNECT: %s", a)
	}
	h.headers(5, true, ":method", "CONNECT", ":authority", "localhost:"+ir.port())
	if a := h.await(5); a.status != "405" {
		t.Errorf("CONNECT: %s", a)
	}
	// A header list just over the bound, ending in its last frame (one
	// going on past it ends the connection: TestInterceptH2RawHeaderList).
	limit := int(h.settings[http2.SettingMaxHeaderListSize])
	big := ir.get("GET", "/huge")
	size := 0
	for i := 0; i+1 < len(big); i += 2 {
		size += len(big[i]) + len(big[i+1]) + 32
	}
	for i := 0; size+4096+32+8 < limit-8192; i++ {
		name := fmt.Sprintf("x-h%04d", i)
		big = append(big, name, strings.Repeat("h", 4096))
		size += len(name) + 4096 + 32
	}
	big = append(big, "x-last", strings.Repeat("h", limit-size-len("x-last")-32+100))
	if err := h.write(func() error {
		b := h.block(big...)
		if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: b[:1024], EndStream: true}); err != nil {
			return err
		}
		for b = b[1024:]; len(b) > 0; {
			n := min(1024, len(b))
			if err := h.fr.WriteContinuation(7, n == len(b), b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if a := h.await(7); a.status != "431" {
		t.Errorf("a header list over the bound: %s", a)
	}
	h.headers(9, true, ir.get("GET", "/after")...)
	if a := h.await(9); a.status != "200" {
		t.Errorf("after the refusals: %s", a)
	}
	h.tc.Close()
	rec := ir.connRecord(t)
	for _, want := range []string{"stream_PROTOCOL_ERROR_bad_path_method 1", "stream_PROTOCOL_ERROR_bad_connect 1", "5 streams opened, 2 relayed"} {
		if !strings.Contains(rec.Refused, want) {
			t.Errorf("the connection's record lacks %q: %s", want, rec.Refused)
		}
	}
	if strings.Contains(rec.Refused, testPlaceholder) || strings.Contains(rec.Refused, "hhhh") {
		t.Errorf("the record holds a header's value: %s", rec.Refused)
	}
	var paths []string
	for _, r := range ir.recorded() {
		paths = append(paths, r.Method+" "+r.Path)
	}
	if want := []string{"CONNECT ", "GET /after", "HTTP/2 "}; !slices.Equal(paths, want) {
		t.Errorf("records %q, want %q", paths, want)
	}
}

// TestInterceptH2RawCleanRecordsNothing: a connection on which nothing
// was refused has no connection record.
func TestInterceptH2RawCleanRecordsNothing(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	h := ir.h2raw(t)
	h.headers(1, true, ir.get("GET", "/one")...)
	h.await(1)
	h.tc.Close()
	// The relay's side ends once its reads fail; a request on another
	// connection after it is recorded after it.
	h2 := ir.h2raw(t)
	h2.headers(1, true, ir.get("GET", "/two")...)
	h2.await(1)
	h2.tc.Close()
	for range 2000 {
		if len(ir.recorded()) >= 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range ir.recorded() {
		if r.Method == "HTTP/2" {
			t.Errorf("a clean connection recorded: %+v", r)
		}
	}
}

// TestInterceptH2RawEmptyContinuations: CONTINUATION frames that carry
// nothing, half a million of them, grow neither the relay's goroutines nor its
// memory; the request they end is served.
func TestInterceptH2RawEmptyContinuations(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	h := ir.h2raw(t)
	before := heapInUse()
	b := h.block(ir.get("GET", "/after-empty")...)
	const frames = 1 << 19
	if err := h.write(func() error {
		if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b, EndStream: true}); err != nil {
			return err
		}
		for i := 0; i < frames; i++ {
			if err := h.fr.WriteContinuation(1, i == frames-1, nil); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	a := h.await(1)
	if a.status != "200" && a.rst == nil && h.goaway == nil {
		t.Errorf("half a million empty CONTINUATION frames: %s, %v", a, h.err)
	}
	// 4.5 MiB of frames went through; what stayed of them is bounded.
	if grew := heapInUse() - before; grew > 4<<20 {
		t.Errorf("the heap grew by %d bytes over %d empty frames", grew, frames)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// TestInterceptH2RawStreams: a client opening more streams than the relay
// advertises (100) has the one past them refused (RST_STREAM); the
// origin reads the 100 and no more.
func TestInterceptH2RawStreams(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	h := ir.h2raw(t)
	if n := h.settings[http2.SettingMaxConcurrentStreams]; n != h2MaxStreams {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d", n)
	}
	// The streams stay open: their bodies have not ended.
	for i := 0; i <= h2MaxStreams; i++ {
		h.headers(uint32(2*i+1), false, append(ir.get("POST", fmt.Sprintf("/s/%d", i)), "content-type", "text/plain")...)
	}
	last := uint32(2*h2MaxStreams + 1)
	if a := h.await(last); a.rst == nil || (*a.rst != http2.ErrCodeRefusedStream && *a.rst != http2.ErrCodeProtocol) {
		t.Fatalf("stream %d past %d open: %s", h2MaxStreams+1, h2MaxStreams, a)
	}
	for i := 0; i < h2MaxStreams; i++ {
		h.data(uint32(2*i+1), true, []byte("b"))
	}
	for i := 0; i < h2MaxStreams; i++ {
		if a := h.await(uint32(2*i + 1)); a.status != "200" || string(a.body) != fmt.Sprintf("POST /s/%d 1", i) {
			t.Errorf("stream %d: %s", 2*i+1, a)
		}
	}
	saw := ir.sawOrigin()
	if len(saw) != h2MaxStreams {
		t.Errorf("the origin read %d requests", len(saw))
	}
	for _, s := range saw {
		if s.Path == fmt.Sprintf("/s/%d", h2MaxStreams) {
			t.Errorf("the origin read the refused stream's request")
		}
	}
}

// gateRig holds every request's handler in Rewrite (so before anything
// goes upstream) until released; entered hears each one held.
func gateRig(t *testing.T, ir *interceptRig) (entered <-chan struct{}, release func()) {
	in := make(chan struct{}, 1024)
	out := make(chan struct{})
	g := func() {
		select {
		case in <- struct{}{}:
		default:
		}
		<-out
	}
	ir.gate.Store(&g)
	var once sync.Once
	rel := func() { once.Do(func() { close(out) }) }
	t.Cleanup(rel)
	return in, rel
}

// TestInterceptH2RawFlowControl: DATA past the window the relay granted a
// stream (its handler held, reading nothing) resets the stream with
// FLOW_CONTROL_ERROR; the relay buffered no more than the window, the
// origin reads no more of it, and the connection goes on.
func TestInterceptH2RawFlowControl(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	entered, release := gateRig(t, ir)
	h := ir.h2raw(t)
	window := h.settings[http2.SettingInitialWindowSize]
	if window != h2StreamBuffer {
		t.Errorf("SETTINGS_INITIAL_WINDOW_SIZE %d, want %d", window, h2StreamBuffer)
	}
	h.headers(1, false, append(ir.get("POST", "/flow"), "authorization", "Bearer "+testPlaceholder)...)
	<-entered
	chunk := make([]byte, 16<<10)
	var sent uint32
	for sent < window {
		n := min(uint32(len(chunk)), window-sent)
		if err := h.data(1, false, chunk[:n]); err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	if err := h.data(1, false, []byte{'!'}); err != nil {
		t.Fatal(err)
	}
	if a := h.await(1); a.rst == nil || *a.rst != http2.ErrCodeFlowControl {
		t.Errorf("%d bytes on a window of %d: %s", sent+1, window, a)
	}
	release()
	h.headers(3, true, ir.get("GET", "/after-flow")...)
	if a := h.await(3); a.status != "200" {
		t.Errorf("after the reset: %s, %v %v", a, h.goaway, h.err)
	}
	for _, s := range ir.sawOrigin() {
		if s.Path == "/flow" && s.BodyLen > int(window) {
			t.Errorf("the origin read %d bytes of a stream whose window was %d", s.BodyLen, window)
		}
	}
}

// TestInterceptH2RawResetFlood: streams opened and reset at once (the
// "rapid reset" attack), their handlers held so none finishes: the
// relay runs at most 100 handlers, queues a bounded number more, and
// ends the connection past them (GOAWAY ENHANCE_YOUR_CALM): its
// goroutines stay bounded however many streams the client opens.
func TestInterceptH2RawResetFlood(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	h := ir.h2raw(t)
	// One stream served first: the relay's upstream connection is up.
	h.headers(1, true, ir.get("GET", "/first")...)
	if a := h.await(1); a.status != "200" {
		t.Fatalf("first: %s", a)
	}
	_, release := gateRig(t, ir)
	base := runtime.NumGoroutine()
	const streams = 20000
	// The same block each time: one that indexes nothing (it sets the
	// dynamic table's size to 0 first), so it decodes the same however
	// often it is sent.
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.SetMaxDynamicTableSizeLimit(0)
	for f := ir.get("GET", "/reset"); len(f) > 1; f = f[2:] {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	b := hb.Bytes()
	wrote := make(chan int, 1)
	go func() {
		i := 0
		var err error
		for ; i < streams && err == nil; i++ {
			id := uint32(2*i + 3)
			err = h.write(func() error {
				if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				return h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
		}
		wrote <- i
	}()
	ga := h.drain()
	n := <-wrote
	peak := runtime.NumGoroutine()
	if ga == nil || ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("%d streams opened and reset: GOAWAY %v, reading ended with %v", n, ga, h.err)
	}
	// What the client wrote may sit in buffers on the way; the streams
	// the relay took are those GOAWAY says it processed: the 100 run, and
	// the 400 queued, and the one that overflowed the queue.
	if ga != nil && ga.LastStreamID > 2*(5*h2MaxStreams+2)+3 {
		t.Errorf("the relay took streams up to %d of %d opened and reset, their handlers held", ga.LastStreamID, n)
	}
	// Each held handler is a goroutine or two (the stream's, the
	// relay's); the bound is the streams advertised, not those opened.
	if grew := peak - base; grew > 3*h2MaxStreams {
		t.Errorf("goroutines grew by %d over %d streams opened and reset", grew, n)
	}
	if ga != nil {
		t.Logf("rapid reset: %d streams written, GOAWAY %v after stream %d; goroutines %d -> %d", n, ga.ErrCode, ga.LastStreamID, base, peak)
	}
	release()
	if rec := ir.connRecord(t); !strings.Contains(rec.Refused, "conn_ENHANCE_YOUR_CALM_too_many_early_resets 1") {
		t.Errorf("the connection's record: %s", rec.Refused)
	}
}

// TestInterceptH2RawMalformed: what HTTP/2 forbids in a request, which a
// relay re-encoding it might carry on (a body longer than its
// content-length, connection-specific fields, a field with CR LF, upper
// case names), resets the stream; the origin reads none of it whole.
func TestInterceptH2RawMalformed(t *testing.T) {
	ir := newOriginRig(t, nil, true)
	h := ir.h2raw(t)
	for i, c := range []struct {
		name   string
		fields []string
		body   string
	}{
		{"a body past its content-length", []string{"content-length", "1"}, "abcd"},
		{"transfer-encoding", []string{"transfer-encoding", "chunked"}, "0\r\n\r\n"},
		{"connection", []string{"connection", "keep-alive"}, ""},
		{"CR LF in a value", []string{"x-a", "b\r\nHost: evil.example"}, ""},
		{"an upper-case name", []string{"X-Upper", "v"}, ""},
	} {
		id := uint32(2*i + 1)
		h.headers(id, c.body == "", append(ir.get("POST", fmt.Sprintf("/malformed/%d", i)), c.fields...)...)
		if c.body != "" {
			h.data(id, true, []byte(c.body))
		}
		if a := h.await(id); a.rst == nil && a.status != "400" {
			t.Errorf("%s: %s", c.name, a)
		}
	}
	h.headers(99, true, ir.get("GET", "/after-malformed")...)
	if a := h.await(99); a.status != "200" {
		t.Errorf("after the malformed streams: %s, %v %v", a, h.goaway, h.err)
	}
	for _, s := range ir.sawOrigin() {
		if s.Path != "/after-malformed" && s.BodyErr == nil {
			t.Errorf("the origin read %s whole: %+v", s.Path, s)
		}
	}
}
