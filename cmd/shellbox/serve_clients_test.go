package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/secrets"
	"github.com/shellbox/shellbox/secrets/origintest"
)

// clientsImage is the test image with git, python3 (requests) and node
// (images/testimage/build.sh --clients).
const clientsImage = "shellbox-test-clients:latest"

// TestServeCredentialClients: the real clients an agent uses, in a
// sandbox of `shellbox serve` on each engine and runtime (Docker and
// containerd, runc and gVisor: one case each, its time logged), get the
// credential of the tenant's policy injected by the relay while they only
// ever hold its placeholder: git clones and pushes over HTTPS (the
// placeholder as the password of the URL) to git http-backend behind a TLS
// server of the host, and Python's urllib, requests and node's fetch send
// it as a bearer token. Each trusts the relay's CA through the variable
// the relay sets for it (GIT_SSL_CAINFO, SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
// NODE_EXTRA_CA_CERTS). The server sees the secret on every request, the
// pushed commit lands in its bare repository, and nothing in the sandbox
// (every process's environment, every file it can read or wrote, the git
// objects it fetched) holds the secret. The clients image comes from
// Docker (built here when missing); containerd's copy is imported by
// .ci/setup-containerd.sh. The four cases run in parallel (each its own
// server, origin and session): sequential, the two containerd cases added
// ~15 s to the package.
func TestServeCredentialClients(t *testing.T) { eachClientsRuntime(t, serveCredentialClients) }

// eachClientsRuntime runs fn, in parallel, on Docker and containerd with
// runc and runsc, each case with the clients image present and bin the
// package's shellbox binary; it logs each case's own time.
func eachClientsRuntime(t *testing.T, fn func(t *testing.T, eng enginetest.Engine, runtime, bin string)) {
	for _, c := range []struct {
		eng     enginetest.Engine
		runtime string
	}{
		{enginetest.Docker, "runc"},
		{enginetest.Docker, "runsc"},
		{enginetest.Containerd, "runc"},
		{enginetest.Containerd, "runsc"},
	} {
		t.Run(c.eng.Name+"/"+c.runtime, func(t *testing.T) {
			t.Parallel()
			requireEngine(t)
			requireClientsImage(t)
			bin := buildBinaries(t)
			// The case's own time: the binaries are built once for the package.
			start := time.Now()
			t.Cleanup(func() { t.Logf("%s %s: %.1fs", c.eng.Name, c.runtime, time.Since(start).Seconds()) })
			c.eng.Runtime(t, t.TempDir(), filepath.Join(filepath.Dir(bin), "shellbox-agent"), c.runtime) // skips without runsc
			if c.eng.Name == enginetest.Containerd.Name {
				cc, ctx := containerdtest.Client(t, containerdtest.Address(t))
				_, err := cc.GetImage(ctx, clientsImage)
				dockertest.Require(t, err == nil, fmt.Sprintf("containerd has no %s (%v): .ci/setup-containerd.sh imports it from Docker", clientsImage, err))
			}
			fn(t, c.eng, c.runtime, bin)
		})
	}
}

func serveCredentialClients(t *testing.T, eng enginetest.Engine, runtime, bin string) {
	secret := "ghp_" + strings.ReplaceAll(strings.ToLower(base64.RawURLEncoding.EncodeToString([]byte(time.Now().String()+eng.Name+runtime))), "-", "x")
	o := origintest.Git(t, secret)
	session := "clients-" + eng.Name + "-" + runtime
	cs := serveCredentialImage(t, eng, bin, clientsImage, runtime, secret, o.Port, o.CAFile, nil, "", session)
	call := cs.call
	t.Cleanup(func() {
		if t.Failed() {
			for len(cs.p.logs) > 0 {
				t.Log(<-cs.p.logs)
			}
			b, _ := os.ReadFile(cs.audit)
			t.Logf("audit:\n%s", b)
		}
	})
	origin := "localhost:" + o.Port
	var outs []string
	run := func(command string) string {
		t.Helper()
		start := time.Now()
		out := call(command)
		t.Logf("%.1fs: %.60q", time.Since(start).Seconds(), command)
		outs = append(outs, out)
		return out
	}

	// git, Python's urllib and requests.
	origintest.GitAndPython(t, o, origin, "sandbox", run)

	// node: fetch ignores HTTPS_PROXY (Node 18 and 20 have no switch for
	// it; NODE_USE_ENV_PROXY came with later Node), so on its own it reaches no
	// network at all: fails closed. Given a dispatcher that tunnels
	// through HTTPS_PROXY, as undici's ProxyAgent does, it works, trusting
	// the relay's CA through NODE_EXTRA_CA_CERTS.
	const nodeFetch = `const url = "https://%s/api/%s", headers = {Authorization: "Bearer " + process.env.GITHUB_TOKEN};
const http = require("http"), tls = require("tls"), proxy = new URL(process.env.HTTPS_PROXY);
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
  if (%t) init.dispatcher = await withProxy();
  const r = await fetch(url, init);
  console.log(await r.text());
})().catch(e => console.log("fetch failed: " + ((e.cause && e.cause.code) || e)));`
	js := func(path string, proxied bool) string {
		return `node --no-warnings -e '` + fmt.Sprintf(nodeFetch, origin, path, proxied) + `' 2>&1`
	}
	if got := run(js("node", true)); got != "credential ok /api/node" {
		t.Errorf("node fetch through HTTPS_PROXY: %q", got)
	}
	if got := run(js("node-plain", false)); got != "credential ok /api/node-plain" && !strings.HasPrefix(got, "fetch failed: ") {
		t.Errorf("node fetch on its own: %q", got)
	} else {
		t.Logf("node fetch on its own (no proxy): %s", got)
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

	// What the sandbox holds: every process's environment, the git objects
	// it fetched, and every readable file where anything is written, as a
	// tar the test reads back in pieces and searches.
	size := run(`set -e; { env; echo; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | sort -u; } >/tmp/look-env.txt
git -C /workspace/r cat-file --batch-all-objects --batch >/tmp/look-objects.txt
tar -czf /tmp/look.tgz --exclude=/tmp/look.tgz --ignore-failed-read /workspace /tmp /home /run/shellbox 2>/dev/null || true
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
			t.Errorf("the sandbox holds the secret in %s", name)
		}
	}
	for name, want := range map[string]string{
		"tmp/look-env.txt":        "GITHUB_TOKEN=" + secrets.PlaceholderPrefix,
		"tmp/look-objects.txt":    "pushed from the sandbox",
		"workspace/r/.git/config": "x-access-token:" + secrets.PlaceholderPrefix,
	} {
		if !strings.Contains(files[name], want) {
			t.Errorf("the sandbox's %s lacks %q:\n%s", name, want, files[name])
		}
	}
	for _, v := range []string{"SSL_CERT_FILE", "GIT_SSL_CAINFO", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"} {
		if !strings.Contains(files["tmp/look-env.txt"], v+"=/run/shellbox/egress-ca.pem\n") {
			t.Errorf("the sandbox's environment lacks %s=/run/shellbox/egress-ca.pem", v)
		}
	}

	cs.p.stop(t)
	logs := ""
	for len(cs.p.logs) > 0 {
		logs += <-cs.p.logs + "\n"
	}
	if strings.Contains(logs, secret) {
		t.Errorf("serve's log holds the secret")
	}
	b, err := os.ReadFile(cs.audit)
	if err != nil || strings.Contains(string(b), secret) {
		t.Fatalf("audit: %v, or it holds the secret", err)
	}
	if !strings.Contains(string(b), `"egress":{"host":"localhost","method":"POST","path":"/repo.git/git-receive-pack","status":200,`) {
		t.Errorf("the audit lacks git's push:\n%s", b)
	}
}

// requireClientsImage builds clientsImage unless Docker has it (CI's
// .ci/setup-docker.sh builds it; after the host's git, python or node
// change, rerun images/testimage/build.sh --clients). A host without those
// clients skips (fails under CI=true).
func requireClientsImage(t *testing.T) {
	t.Helper()
	clientsImageOnce.Do(func() {
		if exec.Command("docker", "image", "inspect", clientsImage).Run() == nil {
			return
		}
		out, err := exec.Command("bash", filepath.Join("..", "..", "images", "testimage", "build.sh"), "--clients").CombinedOutput()
		if err != nil {
			clientsImageErr = fmt.Sprintf("%s: %v\n%s", clientsImage, err, out)
		}
	})
	dockertest.Require(t, clientsImageErr == "", clientsImageErr)
}

var (
	clientsImageOnce sync.Once
	clientsImageErr  string
)
