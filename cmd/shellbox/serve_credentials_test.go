package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/secrets"
	"github.com/shellbox/shellbox/secrets/origintest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
)

// credentialOrigin is an HTTPS server for localhost on the host (its
// certificate from a CA of the test, which serve trusts by
// egress.upstreamCA) that answers whether the request carried want, as a
// bearer token or as the password of Basic credentials.
func credentialOrigin(t *testing.T, want string) (port, caFile string, seen func() []string) {
	t.Helper()
	return credentialServer(t, want, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "credential ok %s", r.URL.Path)
	}))
}

// credentialServer is credentialOrigin with ok answering the requests that
// carry want; the others get a 401 asking for Basic credentials, as git
// needs to send its own.
func credentialServer(t *testing.T, want string, ok http.Handler) (port, caFile string, seen func() []string) {
	t.Helper()
	o := origintest.Credential(t, want, ok)
	return o.Port, o.CAFile, o.Auths
}

// TestServeCredentials: a tenant's policy names a credential; serve
// resolves its secret from secrets.dir, and curl in the sandbox, sending
// only the placeholder its environment holds (as a bearer token, and as a
// URL's password the way git sends one), reaches an HTTPS server of the
// host that receives the real secret, through the relay terminating TLS
// with the tenant's CA. The same placeholder sent to another host arrives
// as the placeholder. Nothing in the sandbox (its environment, every
// process's environ, its writable files, the CA bundle), nor serve's log
// and audit, holds the secret.
func TestServeCredentials(t *testing.T) { enginetest.Each(t, serveCredentials) }

func serveCredentials(t *testing.T, eng enginetest.Engine) {
	requireEngine(t)
	bin := buildBinaries(t)
	// Random per run: a secret of an earlier run cannot be found by luck.
	secret := "ghp_" + strings.ReplaceAll(strings.ToLower(base64.RawURLEncoding.EncodeToString([]byte(time.Now().String()))), "-", "x")
	port, originCA, seen := credentialOrigin(t, secret)
	otherSeen := make(chan string, 4)
	other := egressHostFunc(t, "127.0.0.3:0", func(r *http.Request) { otherSeen <- r.Header.Get("Authorization") })

	cs := serveWithCredential(t, eng, bin, secret, port, originCA, []string{other}, "", "cred")
	p, audit, call := cs.p, cs.audit, cs.call
	origin := "localhost:" + port
	if got := call(`curl -sS -m 30 -H "Authorization: Bearer $GITHUB_TOKEN" https://` + origin + `/api 2>&1`); got != "credential ok /api" {
		t.Fatalf("bearer placeholder: %q (origin saw %q)", got, seen())
	}
	if got := call(`curl -sS -m 30 "https://x-access-token:$GITHUB_TOKEN@` + origin + `/repo.git/info/refs" 2>&1`); got != "credential ok /repo.git/info/refs" {
		t.Fatalf("basic placeholder: %q (origin saw %q)", got, seen())
	}
	// Without the placeholder nothing is injected.
	if got := call(`curl -sS -m 30 -o /dev/null -w '%{http_code}' https://` + origin + `/none`); got != "401" {
		t.Errorf("no placeholder: %q", got)
	}
	ph := call(`printf %s "$GITHUB_TOKEN"`)
	if !strings.HasPrefix(ph, secrets.PlaceholderPrefix) || len(ph) != len(secrets.PlaceholderPrefix)+26 {
		t.Fatalf("placeholder %q", ph)
	}
	// Sent elsewhere, the placeholder is the placeholder.
	call(`curl -sS -m 30 -H "Authorization: Bearer $GITHUB_TOKEN" http://` + other + `/ >/dev/null`)
	if got := <-otherSeen; got != "Bearer "+ph {
		t.Errorf("another host saw %q, want the placeholder", got)
	}
	// What the sandbox holds: its environment, every process's, and every
	// file it can read where anything is written (base64, for the test to
	// search; bounded).
	look := call(`env; echo; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | sort -u; echo; echo "$SSL_CERT_FILE $CURL_CA_BUNDLE $GIT_SSL_CAINFO"
ls -l /run/shellbox/egress-ca.pem; [ -w /run/shellbox/egress-ca.pem ] && echo writable
find /workspace /tmp /run/shellbox -xdev -type f -readable 2>/dev/null | while read -r f; do cat "$f"; done | head -c 12000 | base64 -w0`)
	files := look[strings.LastIndex(look, "\n")+1:]
	raw, err := base64.StdEncoding.DecodeString(files)
	if err != nil {
		t.Fatalf("files: %v in %q", err, look)
	}
	for _, s := range []string{look, string(raw)} {
		if strings.Contains(s, secret) {
			t.Fatalf("the sandbox holds the secret:\n%s", look)
		}
	}
	for _, want := range []string{"GITHUB_TOKEN=" + ph, "/run/shellbox/egress-ca.pem /run/shellbox/egress-ca.pem /run/shellbox/egress-ca.pem", "-rw-r--r--", "BEGIN CERTIFICATE"} {
		if !strings.Contains(look+string(raw), want) {
			t.Errorf("the sandbox's view lacks %q:\n%s", want, look)
		}
	}
	if strings.Contains(look, "writable") || strings.Contains(string(raw), "PRIVATE KEY") {
		t.Errorf("the CA bundle is writable, or holds a key:\n%s", look)
	}
	for _, a := range seen() {
		if a != "" && !strings.Contains(a, secret) && !strings.HasPrefix(a, "Basic ") {
			t.Errorf("the origin saw %q", a)
		}
	}
	p.stop(t)
	logs := ""
	for len(p.logs) > 0 {
		logs += <-p.logs + "\n"
	}
	if strings.Contains(logs, secret) {
		t.Errorf("serve's log holds the secret")
	}
	b, err := os.ReadFile(audit)
	if err != nil || strings.Contains(string(b), secret) {
		t.Errorf("audit: %v, or it holds the secret", err)
	}
	// Every request on the terminated connections is audited: host,
	// method, path (no query), status, credential names; a connection
	// tunnelled blind as one record.
	for _, want := range []string{
		`"tool":"egress","command":"GET localhost/api","decision":"allow","rule":"sandbox.network","egress":{"host":"localhost","method":"GET","path":"/api","status":200,`,
		`"path":"/repo.git/info/refs","status":200,`,
		`"path":"/none","status":401,`,
		`"credentials":["github"]}`,
		// The connection to the other host went blind: one record of it.
		`"tool":"egress","command":"CONNECT ` + other + `","decision":"allow","rule":"sandbox.network","egress":{"host":"` + other + `","method":"CONNECT",`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the audit lacks %s:\n%s", want, b)
		}
	}
}

// egressHostFunc is egressHost hearing each request.
func egressHostFunc(t *testing.T, addr string, hear func(*http.Request)) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hear(r)
		fmt.Fprintf(w, "egress ok %s", r.URL.Path)
	})}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return l.Addr().String()
}

// credentialServe is a `shellbox serve` whose tenant's policy names the
// credential github (secret in secrets.dir, placeholder GITHUB_TOKEN) for
// localhost, allows localhost:port and allow, and has network (indented
// as the policy's sandbox.network keys) besides; call runs a bash command
// in session, failing t on an error; client and session are for calls of
// any tool with any arguments.
type credentialServe struct {
	p       *serveProcess
	audit   string
	call    func(command string) string
	client  *client.Client
	session string
}

func serveWithCredential(t *testing.T, eng enginetest.Engine, bin string, secret, port, originCA string, allow []string, network, session string) credentialServe {
	t.Helper()
	return serveCredentialImage(t, eng, bin, dockertest.Image, "runc", secret, port, originCA, allow, network, session)
}

// serveCredentialImage is serveWithCredential with the sandboxes' image
// and runtime.
func serveCredentialImage(t *testing.T, eng enginetest.Engine, bin, image, runtime, secret, port, originCA string, allow []string, network, session string) credentialServe {
	t.Helper()
	secretsDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(secretsDir, "github-token"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pols := t.TempDir()
	allowed := fmt.Sprintf("%q", "localhost:"+port)
	for _, a := range allow {
		allowed += fmt.Sprintf(", %q", a)
	}
	// NO_PROXY without localhost: the origin is the host's localhost, which
	// the sandbox reaches through the proxy only.
	// opaque: allow: interpreters' code (python3 -c, node -e) runs unasked.
	pol := fmt.Sprintf(`default: allow
opaque: allow
env:
  NO_PROXY: "127.0.0.1"
  no_proxy: "127.0.0.1"
sandbox:
  images: [%s]
  runtime: %s
  network:
    allow: [%s]
    credentials:
      - name: github
        hosts: [localhost]
        value: "${secret:github-token}"
        placeholder: GITHUB_TOKEN
%s`, image, runtime, allowed, network)
	if err := os.WriteFile(filepath.Join(pols, dockerTenant+".yaml"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "audit.log")
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(eng.Config(t)+fmt.Sprintf(`tenant: %s
policies:
  dir: %s
audit:
  file: %s
secrets:
  dir: %s
egress:
  blocked: []
  upstreamCA: %s
  caDir: %s
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  labels:
    %s: "1"
server:
  tenants:
    %s:
      tokens: [%q]
`, dockerTenant, pols, audit, secretsDir, originCA, t.TempDir(), dockertest.StateDir(t), dockertest.Owner(t), image, dockertest.LabelTest,
		dockerTenant, server.HashToken(testToken))), 0o644)
	removeSandboxesAtEnd(t, cfg, dockerTenant, session)

	p := startServeProcess(t, bin, cfg)
	c := client.New(p.url, testToken, nil)
	return credentialServe{p: p, audit: audit, client: c, session: session, call: func(command string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		args, _ := json.Marshal(map[string]string{"command": command, "description": "credentials test"})
		r, err := c.Call(ctx, session, "bash", args)
		if err != nil || r.IsError {
			t.Fatalf("%s: %v %q", command, err, r.Text)
		}
		return r.Text
	}}
}
