package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shellbox/shellbox/confine"
)

// rawCodec carries a message's bytes as they are (*[]byte): a service
// without protobuf, so without protoc.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

// echoService is test.Echo: Unary answers what it read and whether the
// call came with the secret (never the secret); Stream answers three
// messages; Secret would answer what no rule lets through. Each call's
// authorization metadata is sent on saw.
type echoService struct{ saw chan string }

func (e *echoService) note(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	auth := strings.Join(md.Get("authorization"), ",")
	e.saw <- auth
	// An echo of the credential in the answer's header metadata, as a
	// debugging server would: the relay scrubs it.
	grpc.SetHeader(ctx, metadata.Pairs("x-echo", auth))
	return auth == "Bearer "+testSecret
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Unary", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			out := []byte(fmt.Sprintf("unary %s secret=%v", in, srv.(*echoService).note(ctx)))
			return &out, nil
		}},
		{MethodName: "Secret", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			srv.(*echoService).note(ctx)
			out := []byte("the server's answer")
			return &out, nil
		}},
	},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		var in []byte
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		ok := srv.(*echoService).note(ss.Context())
		for i := range 3 {
			out := []byte(fmt.Sprintf("stream %s %d secret=%v", in, i, ok))
			if err := ss.SendMsg(&out); err != nil {
				return err
			}
		}
		return nil
	}}},
}

// grpcResult is what the client process saw, every byte of it.
type grpcResult struct {
	Unary        string
	UnaryHeader  metadata.MD
	UnaryTrailer metadata.MD
	Stream       []string
	DeniedCode   string
	DeniedMsg    string
	DeniedAnswer string
	Errors       []string
}

const grpcChildEnv = "SHELLBOX_TEST_GRPC_CHILD"

// TestInterceptGRPC: grpc-go, in a process of its own whose environment
// names the proxy (HTTPS_PROXY: grpc-go opens a CONNECT tunnel through
// it), calls a gRPC server over TLS (a test CA's) through the
// terminating relay, the placeholder as its authorization metadata: the
// server reads the secret, the client never sees it (not in a message,
// header or trailer); a unary and a server-streaming call are relayed,
// and a call whose method (its HTTP path) a rule denies gets the relay's
// refusal as a gRPC status, PermissionDenied naming the rule, not the
// server's answer.
func TestInterceptGRPC(t *testing.T) {
	if target := os.Getenv(grpcChildEnv); target != "" {
		grpcChild(target, os.Getenv(grpcChildEnv+"_CA"))
		return
	}
	rules := &confine.HTTPRules{Default: confine.HTTPRule{Name: "http[0].default"}}
	for i, s := range []string{"deny POST /test.Echo/Secret", "allow POST /test.Echo/*"} {
		r, err := confine.ParseHTTPRule(s)
		if err != nil {
			t.Fatal(err)
		}
		r.Name = fmt.Sprintf("http[0].rules[%d]", i)
		rules.Rules = append(rules.Rules, r)
	}
	ir := newOriginRig(t, rules, true)
	// This host's name, not localhost: clients go to localhost (and
	// loopback addresses) directly whatever the proxy variables say.
	// The server listens on every address, so reaches it whichever
	// address the name has here.
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	name = strings.ToLower(name)
	if addrs, err := net.LookupHost(name); err != nil || len(addrs) == 0 || name == "localhost" {
		t.Skipf("this host's name %q does not resolve here (%v)", name, err)
	}
	ir.alsoHost.Store(&name)
	leaf, err := ir.upstreamCA.Leaf(name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &echoService{saw: make(chan string, 16)}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*leaf}})), grpc.ForceServerCodec(rawCodec{}))
	gs.RegisterService(&echoDesc, svc)
	go gs.Serve(l)
	t.Cleanup(gs.Stop)

	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, ir.tenantPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	cmd := exec.Command(os.Args[0], "-test.run=^TestInterceptGRPC$", "-test.count=1")
	cmd.Env = append(os.Environ(), grpcChildEnv+"="+net.JoinHostPort(name, port), grpcChildEnv+"_CA="+ca,
		"HTTPS_PROXY=http://"+ir.proxyAddr, "https_proxy=http://"+ir.proxyAddr, "NO_PROXY=", "no_proxy=", "GRPC_GO_LOG_SEVERITY_LEVEL=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the gRPC client: %v\n%s", err, out)
	}
	if strings.Contains(string(out), testSecret) {
		t.Errorf("the client saw the secret:\n%s", out)
	}
	var res grpcResult
	for sc := bufio.NewScanner(strings.NewReader(string(out))); sc.Scan(); {
		if j, ok := strings.CutPrefix(sc.Text(), "GRPC-RESULT "); ok {
			if err := json.Unmarshal([]byte(j), &res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(res.Errors) > 0 || res.Unary != "unary hello secret=true" || len(res.Stream) != 3 || res.Stream[2] != "stream hi 2 secret=true" {
		t.Errorf("the client saw %+v\n%s", res, out)
	}
	if got := strings.Join(res.UnaryHeader.Get("x-echo"), ","); got == "" || strings.Contains(got, testSecret) {
		t.Errorf("the echoed credential reached the client as %q", got)
	}
	want := `shellbox egress: POST ` + name + `/test.Echo/Secret is denied by rule http[0].rules[0]: "deny POST /test.Echo/Secret"`
	if res.DeniedCode != codes.PermissionDenied.String() || res.DeniedMsg != want || res.DeniedAnswer != "" {
		t.Errorf("the denied call: %s %q, answer %q", res.DeniedCode, res.DeniedMsg, res.DeniedAnswer)
	}
	close(svc.saw)
	var saw []string
	for a := range svc.saw {
		saw = append(saw, a)
	}
	if len(saw) != 2 || saw[0] != "Bearer "+testSecret || saw[1] != "Bearer "+testSecret {
		t.Errorf("the server read authorization %q (two calls, the denied one never)", saw)
	}
	recs := ir.recorded()
	var paths []string
	for _, r := range recs {
		paths = append(paths, fmt.Sprintf("%s %s %d %s", r.Method, r.Path, r.Status, strings.Join(r.Credentials, ",")))
	}
	if strings.Join(paths, "; ") != "POST /test.Echo/Unary 200 test; POST /test.Echo/Stream 200 test; POST /test.Echo/Secret 403 " {
		t.Errorf("records: %q", paths)
	}
}

// grpcChild is the client process of TestInterceptGRPC: it prints what
// it saw as one GRPC-RESULT line.
func grpcChild(target, caFile string) {
	var res grpcResult
	defer func() {
		b, _ := json.Marshal(res)
		fmt.Printf("GRPC-RESULT %s\n", b)
	}()
	fail := func(what string, err error) { res.Errors = append(res.Errors, what+": "+err.Error()) }
	pem, err := os.ReadFile(caFile)
	if err != nil {
		fail("CA", err)
		return
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		fail("NewClient", err)
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testPlaceholder)

	in, out := []byte("hello"), []byte(nil)
	if err := conn.Invoke(ctx, "/test.Echo/Unary", &in, &out, grpc.Header(&res.UnaryHeader), grpc.Trailer(&res.UnaryTrailer)); err != nil {
		fail("Unary", err)
	}
	res.Unary = string(out)

	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Echo/Stream")
	if err == nil {
		in = []byte("hi")
		if err = st.SendMsg(&in); err == nil {
			err = st.CloseSend()
		}
		for err == nil {
			var m []byte
			if err = st.RecvMsg(&m); err == nil {
				res.Stream = append(res.Stream, string(m))
			}
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	if err != nil {
		fail("Stream", err)
	}

	out = nil
	err = conn.Invoke(ctx, "/test.Echo/Secret", &in, &out)
	s, _ := status.FromError(err)
	res.DeniedCode, res.DeniedMsg, res.DeniedAnswer = s.Code().String(), s.Message(), string(out)
}

// TestInterceptGRPCRefusalFrames: a refused gRPC request (by its content
// type) is answered Trailers-Only, one HEADERS frame ending the stream:
// 200, its content type, grpc-status the code of the HTTP status and
// grpc-message the reason, percent-encoded; any other content type gets
// the plain refusal.
func TestInterceptGRPCRefusalFrames(t *testing.T) {
	ir := newOriginRig(t, testRules(t), true)
	h := ir.h2raw(t)
	for i, c := range []struct{ ct, status, grpc string }{
		{"application/grpc", "200", "7"},
		{"application/grpc+proto", "200", "7"},
		{"application/grpc-web", "403", ""},
		{"application/json", "403", ""},
	} {
		id := uint32(2*i + 1)
		h.headers(id, true, append(ir.get("POST", "/repos/acme/x%C3%A9/merges"), "content-type", c.ct, "te", "trailers")...)
		a := h.await(id)
		if a.status != c.status || a.header.Get("Grpc-Status") != c.grpc {
			t.Errorf("%s: %s", c.ct, a)
		}
		if c.grpc == "" {
			continue
		}
		want := `shellbox egress: POST localhost/repos/acme/x%C3%A9/merges is denied by rule http[0].rules[2]: "deny POST /repos/acme/*/merges"`
		if a.header.Get("Content-Type") != c.ct || a.header.Get("Grpc-Message") != want || len(a.body) != 0 {
			t.Errorf("%s: %s, want grpc-message %q", c.ct, a, want)
		}
	}
	if got, want := grpcMessage("a%b\tc é"), "a%25b%09c %C3%A9"; got != want {
		t.Errorf("grpcMessage: %q, want %q", got, want)
	}
	for status, code := range map[int]int{400: 13, 403: 7, 421: 2, 405: 2, 502: 14} {
		if got := grpcCode(status); got != code {
			t.Errorf("grpcCode(%d) = %d, want %d", status, got, code)
		}
	}
}
