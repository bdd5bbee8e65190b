package kube_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/secrets"
	"github.com/shellbox/shellbox/secrets/origintest"
)

// clientsImage is the test image with git, python3 (requests) and node
// (images/testimage/build.sh --clients), imported into the cluster's
// containerd by .ci/setup-kube.sh.
const clientsImage = "shellbox-test-clients:latest"

// TestClusterCredentialClients: the real clients an agent uses, in a
// session pod of the clients image on the cluster (runc and gVisor,
// baseline), get a credential injected by the relay (in the test, as in
// TestClusterEgressCredential; the server's in production, with the same
// secrets.Injector) while they only ever hold its placeholder: git clones,
// commits and pushes over HTTPS (the placeholder as the URL's password) to
// git http-backend behind a TLS server of this host, Python's urllib and
// requests and node's fetch send it as a bearer token, each trusting the
// relay's CA through the variable the server sets (egresswire.CAVars). The
// server sees the secret on every request and the pushed commit lands in
// its bare repository; no output, no process environment of the pod and
// no file under /workspace, /tmp or /run/shellbox holds the secret.
// cmd/shellbox TestServeCredentialClients is the same on Docker and
// containerd, through `shellbox serve`.
func TestClusterCredentialClients(t *testing.T) {
	c := kubetest.Connect(t)
	requireHostGit(t)
	for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
		t.Run(runtime, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			t.Cleanup(func() { t.Logf("%s: %.1fs", runtime, time.Since(start).Seconds()) })
			testCredentialClients(t, c, runtime)
		})
	}
}

// mapSource is a secrets.Source of fixed values.
type mapSource map[string]string

func (m mapSource) Secret(name string) (string, error) {
	if v, ok := m[name]; ok {
		return v, nil
	}
	return "", fmt.Errorf("secret %s: %w", name, secrets.ErrNotSet)
}

func testCredentialClients(t *testing.T, c *kubetest.Cluster, runtime string) {
	ns := c.Namespace(t)
	cfg := kubetest.Config(ns)
	// Never: a node without the clients image fails the pod at once
	// (ErrImageNeverPull) rather than after ReadyTimeout.
	cfg.ImagePullPolicy = corev1.PullNever
	rt := c.New(t, cfg, runtime)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	secret := "ghp_" + hex.EncodeToString(rnd[:])
	placeholder := secrets.PlaceholderPrefix + hex.EncodeToString(rnd[:6]) + "clusterclients"
	tmpl, err := secrets.ParseTemplate("${secret:github-token}")
	if err != nil {
		t.Fatal(err)
	}
	injector := secrets.NewInjector(mapSource{"github-token": secret}, []secrets.Credential{
		{Name: "github", Value: tmpl, Placeholder: placeholder},
	})

	o := origintest.Git(t, secret)
	target := "localhost:" + o.Port
	roots := x509.NewCertPool()
	roots.AddCert(o.CA.Certificate())
	tenantCA, err := secrets.LoadOrCreateCA(filepath.Join(t.TempDir(), "tenant.pem"), "acme")
	if err != nil {
		t.Fatal(err)
	}

	sb, err := rt.Create(ctx, kubetest.Spec(t, "clients", "cred", "clients-test", runtime,
		sandbox.WithImage(clientsImage), sandbox.WithNetwork(sandbox.NetworkEgress)))
	if err != nil && strings.Contains(err.Error(), "ErrImageNeverPull") {
		dockertest.Require(t, false, fmt.Sprintf("the cluster's node has no %s (%v): .ci/setup-kube.sh imports it from Docker, "+
			"where images/testimage/build.sh --clients builds it", clientsImage, err))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Remove(context.Background(), sb.ID) })

	startRelay(ctx, t, sb, target, tenantCA, roots, func(h http.Header) (func(http.Header), []string, error) {
		d, err := injector.Rewrite(h)
		return d.Scrub, d.Names, err
	})

	// The environment the server gives a command of an egress session
	// with a credential: the proxy (NO_PROXY without localhost: the
	// origin is this host's localhost, reached through the relay), the CA
	// bundle, and the placeholder.
	vars := egresswire.Env(egresswire.DefaultListen)
	vars["NO_PROXY"], vars["no_proxy"] = "127.0.0.1,::1", "127.0.0.1,::1"
	for k, v := range egresswire.CAEnv(egresswire.CAFile) {
		vars[k] = v
	}
	vars["GITHUB_TOKEN"] = placeholder
	var env []string
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	prefix := "export " + strings.Join(env, " ") + "\n"

	var outs []string
	call := func(command string) string {
		t.Helper()
		res, err := kubetest.Run(ctx, sb, prefix+command, time.Minute)
		if err != nil {
			t.Fatalf("run %.60q in %s: %v", command, sb.ID, err)
		}
		out := strings.TrimSpace(res.Stdout + res.Stderr)
		outs = append(outs, out)
		return out
	}
	run := func(command string) string {
		t.Helper()
		start := time.Now()
		out := call(command)
		t.Logf("%s %.1fs: %.60q", runtime, time.Since(start).Seconds(), command)
		return out
	}
	origin := target

	// git, Python's urllib and requests.
	origintest.GitAndPython(t, o, origin, "pod", run)

	// node: fetch honours HTTPS_PROXY only where NODE_USE_ENV_PROXY
	// exists (Node 24, 22.21; set above); an older node (the image copies
	// the host's) is given a dispatcher that tunnels through HTTPS_PROXY,
	// as undici's ProxyAgent does. Either way the relay's CA is trusted
	// through NODE_EXTRA_CA_CERTS. (The script is
	// cmd/shellbox TestServeCredentialClients'.)
	const nodeFetch = `const url = "https://%s/api/node", headers = {Authorization: "Bearer " + process.env.GITHUB_TOKEN};
const http = require("http"), tls = require("tls"), proxy = new URL(process.env.HTTPS_PROXY);
const [major, minor] = process.versions.node.split(".").map(Number);
async function withProxy() {
  await fetch("data:,"); // loads undici, whose global dispatcher is an Agent
  const Agent = globalThis[Symbol.for("undici.globalDispatcher.1")].constructor;
  return new Agent({connect(o, cb) {
    http.request({host: proxy.hostname, port: proxy.port, method: "CONNECT", path: o.hostname + ":" + (o.port || 443)})
      .on("connect", (res, sock) => {
        if (res.statusCode !== 200) return cb(new Error("proxy answered " + res.statusCode));
        const s = tls.connect({socket: sock, servername: o.servername || o.hostname, ALPNProtocols: ["http/1.1"]}, () => cb(null, s));
        s.on("error", cb);
      }).on("error", cb).end();
  }});
}
(async () => {
  const init = {headers};
  if (major < 22 || (major === 22 && minor < 21)) init.dispatcher = await withProxy();
  const r = await fetch(url, init);
  console.log(await r.text());
})().catch(e => console.log("fetch failed: " + ((e.cause && e.cause.code) || e)));`
	if got := run(`node --no-warnings -e '` + fmt.Sprintf(nodeFetch, origin) + `' 2>&1`); got != "credential ok /api/node" {
		t.Errorf("node fetch: %q", got)
	}

	// The upstream saw the secret on each: only requests that carry it
	// reach these handlers.
	reqs := strings.Join(o.Requests(), "\n")
	for _, want := range []string{
		"GET /repo.git/info/refs?service=git-upload-pack git/",
		"POST /repo.git/git-upload-pack git/",
		"GET /repo.git/info/refs?service=git-receive-pack git/",
		"POST /repo.git/git-receive-pack git/",
		"GET /api/urllib Python-urllib/",
		"GET /api/requests python-requests/",
		"GET /api/node ",
	} {
		if !strings.Contains(reqs, want) {
			t.Errorf("the origin served no %q with the secret; it served:\n%s", want, reqs)
		}
	}

	// What the pod holds: every process's environment, the git objects it
	// fetched, and every readable file under /workspace, /tmp and
	// /run/shellbox, as a tar read back in pieces and searched here (a grep
	// in the pod would put the secret in its command line).
	size := call(`set -e; { env; echo; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | sort -u; } >/tmp/look-env.txt
git -C /workspace/r cat-file --batch-all-objects --batch >/tmp/look-objects.txt
tar -czf /tmp/look.tgz --exclude=/tmp/look.tgz --ignore-failed-read /workspace /tmp /run/shellbox 2>/dev/null || true
stat -c %s /tmp/look.tgz`)
	n, err := strconv.Atoi(size)
	if err != nil {
		t.Fatalf("look: %q", size)
	}
	var tgz []byte
	for off := 0; off < n; off += 15000 {
		b64 := call(fmt.Sprintf(`tail -c +%d /tmp/look.tgz | head -c 15000 | base64 -w0`, off+1))
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("look at %d: %v", off, err)
		}
		tgz = append(tgz, b...)
	}
	files := origintest.UntarGz(t, tgz)
	for _, out := range outs {
		files["(output)"] += out
	}
	for name, content := range files {
		if strings.Contains(content, secret) {
			t.Errorf("the pod holds the secret in %s", name)
		}
	}
	for name, want := range map[string]string{
		"tmp/look-env.txt":           "GITHUB_TOKEN=" + placeholder,
		"tmp/look-objects.txt":       "pushed from the pod",
		"workspace/r/.git/config":    "x-access-token:" + placeholder,
		"run/shellbox/egress-ca.pem": string(tenantCA.CertPEM()),
	} {
		if !strings.Contains(files[name], want) {
			t.Errorf("the pod's %s lacks %q (%d files looked at)", name, want, len(files))
		}
	}
	t.Logf("%s: looked at %d files (%d bytes of tar.gz)", runtime, len(files)-1, n)
}

// requireHostGit: the origin runs this host's git http-backend.
func requireHostGit(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("git")
	dockertest.Require(t, err == nil, "no git on this host: the origin runs git http-backend")
}
