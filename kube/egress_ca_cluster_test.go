package kube_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/egress"
	"github.com/shellbox/shellbox/secrets"
)

// TestClusterEgressCredential: a credential reaches an HTTPS origin
// through an egress session pod on the real cluster, under runc and
// gVisor, baseline and restricted, while the pod never sees the secret.
// The relay (here, in the test; the server's in production) installs the
// tenant's CA in the pod's bundle (egresswire.CAFile, on the pod's memory
// /run/shellbox: its root is read-only) and reports nil; curl in the pod,
// pointed at the bundle by the variables the server sets (CAVars), sends
// the placeholder to an origin on this host over TLS the relay terminates;
// the relay swaps the placeholder for the secret, and the origin sees the
// secret. The sandbox user cannot write the bundle or, where the agent is
// root, its directory.
func TestClusterEgressCredential(t *testing.T) {
	c := kubetest.Connect(t)
	for _, tc := range []struct{ runtime, podSecurity string }{
		{sandbox.RuntimeRunc, kube.PodSecurityBaseline},
		{sandbox.RuntimeRunsc, kube.PodSecurityBaseline},
		{sandbox.RuntimeRunc, kube.PodSecurityRestricted},
	} {
		t.Run(tc.runtime+"-"+tc.podSecurity, func(t *testing.T) {
			t.Parallel()
			testEgressCredential(t, c, tc.runtime, tc.podSecurity)
		})
	}
}

const (
	testPlaceholder = "sbx-ph-cluster-test"
	testSecret      = "the-secret-value"
)

func testEgressCredential(t *testing.T, c *kubetest.Cluster, runtime, podSecurity string) {
	ns := c.Namespace(t)
	cfg := kubetest.Config(ns)
	cfg.PodSecurity = podSecurity
	rt := c.New(t, cfg, runtime)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The origin, on this host's loopback, with a certificate of a CA of
	// its own that only the relay trusts.
	originCA, err := secrets.LoadOrCreateCA(filepath.Join(t.TempDir(), "origin.pem"), "origin")
	if err != nil {
		t.Fatal(err)
	}
	originLeaf, err := originCA.Leaf("localhost")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 4)
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
		fmt.Fprint(w, "hello from the origin")
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{*originLeaf}}
	origin.StartTLS()
	defer origin.Close()
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	target := "localhost:" + port
	roots := x509.NewCertPool()
	roots.AddCert(originCA.Certificate())

	tenantCA, err := secrets.LoadOrCreateCA(filepath.Join(t.TempDir(), "tenant.pem"), "acme")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := rt.Create(ctx, kubetest.Spec(t, "egress-ca", "cred", "egress-ca-test", runtime, sandbox.WithNetwork(sandbox.NetworkEgress)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Remove(context.Background(), sb.ID) })

	startRelay(ctx, t, sb, target, tenantCA, roots, func(h http.Header) (func(http.Header), []string, error) {
		if v := h.Get("Authorization"); strings.Contains(v, testPlaceholder) {
			h.Set("Authorization", strings.ReplaceAll(v, testPlaceholder, testSecret))
			return nil, []string{"test"}, nil
		}
		return nil, nil, nil
	})

	out := kubetest.Exec(t, sb, `command -v curl || echo missing`)
	dockertest.Require(t, strings.TrimSpace(out) != "missing", "the test image has no curl (images/testimage/build.sh)")
	var env []string
	for k, v := range egresswire.CAEnv(egresswire.CAFile) {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	got := kubetest.Exec(t, sb, strings.Join(env, " ")+` curl -sS -m 30 -x http://`+egresswire.DefaultListen+
		` -H 'Authorization: Bearer `+testPlaceholder+`' https://`+target+`/ 2>&1; echo " rc=$?"`)
	if got != "hello from the origin rc=0\n" {
		t.Errorf("curl through the relay: %q", got)
	}
	select {
	case auth := <-seen:
		if auth != "Bearer "+testSecret {
			t.Errorf("the origin saw Authorization %q, want the secret", auth)
		}
	default:
		t.Error("the origin got no request")
	}

	// The bundle: the CA, in the agent's directory, which the sandbox
	// user can write neither where the agent is root (restricted: the
	// agent is the commands' uid, no mode keeps them out, and only their
	// own sandbox trusts the bundle). The spill and token volumes are
	// still mounted below it.
	probe := kubetest.Exec(t, sb, `f=`+egresswire.CAFile+`; grep -c 'BEGIN CERTIFICATE' $f; stat -c '%a %U' $f $(dirname $f); `+
		`[ -w $f ] && echo bundle-writable; touch $(dirname $f)/x 2>/dev/null && echo dir-writable; `+
		`grep -c ' /run/shellbox/spill \| /run/shellbox/token ' /proc/self/mounts; true`)
	t.Logf("%s %s: %q", runtime, podSecurity, probe)
	if !strings.Contains(kubetest.Exec(t, sb, `cat `+egresswire.CAFile), string(tenantCA.CertPEM())) {
		t.Error("the bundle lacks the tenant's CA")
	}
	if podSecurity == kube.PodSecurityBaseline && (strings.Contains(probe, "bundle-writable") || strings.Contains(probe, "dir-writable")) {
		t.Errorf("the sandbox user can write the bundle or its directory: %q", probe)
	}
	if !strings.HasSuffix(probe, "\n2\n") {
		t.Errorf("spill and token are not both mounted below /run/shellbox: %q", probe)
	}
}

// startRelay runs, until the test ends, an egress relay for sb that lets
// only target through, terminating TLS for localhost with a leaf of
// tenantCA, trusting roots upstream and rewriting each request's headers
// with rewrite; it waits for the outcome of the CA install, which must
// succeed.
func startRelay(ctx context.Context, t *testing.T, sb sandbox.Sandbox, target string, tenantCA *secrets.CA, roots *x509.CertPool,
	rewrite func(http.Header) (func(http.Header), []string, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	installed := make(chan error, 1)
	r, err := egress.NewRelay(egress.RelayConfig{
		Agent:      sb.Agent,
		PollHeader: map[string]string{agentapi.HeaderProtocol: strconv.Itoa(agentapi.Protocol)},
		Check: func(conn egress.Conn) (egress.Decision, error) {
			if conn.Target != target {
				return egress.Decision{}, fmt.Errorf("egress to %s is not allowed (test)", conn.Target)
			}
			return egress.Decision{Intercept: &egress.Intercept{
				Host:    "localhost",
				Cert:    func() (*tls.Certificate, error) { return tenantCA.Leaf("localhost") },
				Roots:   roots,
				Rewrite: rewrite,
			}}, nil
		},
		CA:        tenantCA.CertPEM(),
		Installed: func(err error) { installed <- err },
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-relayDone
	})
	select {
	case err := <-installed:
		if err != nil {
			t.Fatalf("the relay could not install the egress CA: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("no outcome of the CA install")
	}
}
