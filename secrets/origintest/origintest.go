// Package origintest runs, on the host, the upstream servers of the tests
// of credentials injected at egress (issue 25): an HTTPS origin that
// answers only the requests carrying a secret, and a git origin behind it
// (git http-backend, pushes enabled). The sandbox never talks to them
// directly: the egress relay does, trusting the origin's own CA, so what an
// origin records is what the relay sent upstream. PipIndex is the plain-HTTP
// package index of the workload suites (issue 26): pip in the sandbox
// installs from it through the relay.
//
// It is shared by the tests that run those clients through `shellbox serve`
// (cmd/shellbox, Docker and containerd) and in a session pod (kube), so
// the origin every runtime is judged against is one piece of code.
package origintest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/shellbox/shellbox/secrets"
)

// Origin is an HTTPS server for localhost on 127.0.0.1:Port, its
// certificate signed by CA (written at CAFile), which only the relay is
// told to trust.
type Origin struct {
	Port   string
	CA     *secrets.CA
	CAFile string

	mu    sync.Mutex
	auths []string
}

// Auths returns the Authorization header of every request received, in
// order, those refused included.
func (o *Origin) Auths() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.auths...)
}

// Credential starts an Origin that hands the requests carrying want (as a
// bearer token or as the password of Basic credentials) to ok; the others
// get a 401 asking for Basic credentials, as git needs to send its own. It
// is closed at the test's end.
func Credential(t testing.TB, want string, ok http.Handler) *Origin {
	t.Helper()
	dir := t.TempDir()
	ca, err := secrets.LoadOrCreateCA(filepath.Join(dir, "origin-ca.pem"), "origin")
	if err != nil {
		t.Fatal(err)
	}
	o := &Origin{CA: ca, CAFile: filepath.Join(dir, "origin-ca.crt")}
	if err := os.WriteFile(o.CAFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf("localhost")
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*leaf}})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		o.mu.Lock()
		o.auths = append(o.auths, a)
		o.mu.Unlock()
		_, pass, _ := r.BasicAuth()
		if a != "Bearer "+want && pass != want {
			w.Header().Set("WWW-Authenticate", `Basic realm="origin"`)
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		ok.ServeHTTP(w, r)
	})}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	_, o.Port, _ = net.SplitHostPort(l.Addr().String())
	return o
}

// GitOrigin is a Credential origin serving, to requests carrying the
// secret, the bare repository repo.git at Bare through git http-backend
// (pushes enabled), and /api/ with "credential ok <path>".
type GitOrigin struct {
	*Origin
	Bare string

	mu     sync.Mutex
	served []string
}

// Requests returns "METHOD path?query User-Agent" of each request served
// (those carrying the secret).
func (g *GitOrigin) Requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.served...)
}

// Git starts a GitOrigin for secret; its repository holds one commit, on
// main, of a README. It needs this host's git (with git-http-backend).
func Git(t testing.TB, secret string) *GitOrigin {
	t.Helper()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	RunGit(t, "", "init", "-q", "-b", "main", work)
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("origin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	RunGit(t, work, "add", "README")
	RunGit(t, work, "-c", "user.name=origin", "-c", "user.email=origin@example.com", "commit", "-qm", "first")
	g := &GitOrigin{Bare: filepath.Join(dir, "repo.git")}
	RunGit(t, "", "clone", "-q", "--bare", work, g.Bare)
	RunGit(t, g.Bare, "config", "http.receivepack", "true")
	backend := &cgi.Handler{
		Path: filepath.Join(RunGit(t, "", "--exec-path"), "git-http-backend"),
		Root: "/",
		Env:  []string{"GIT_PROJECT_ROOT=" + dir, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"},
	}
	mux := http.NewServeMux()
	mux.Handle("/repo.git/", backend)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "credential ok %s", r.URL.Path)
	})
	g.Origin = Credential(t, secret, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.served = append(g.served, r.Method+" "+r.URL.RequestURI()+" "+r.UserAgent())
		g.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	return g
}

// RunGit runs the host's git in dir (no system or global config) and
// returns its output, trimmed; a failure fails the test with the output.
func RunGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// maxFile bounds each file UntarGz reads.
const maxFile = 64 << 20

// UntarGz returns the regular files of a gzipped tar by name; a file past
// maxFile fails the test (the tests' tars are of a sandbox's few small
// files).
func UntarGz(t testing.TB, b []byte) map[string]string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if h.Size > maxFile {
				t.Fatalf("%s in the tar: %d bytes, past %d", h.Name, h.Size, maxFile)
			}
			c, err := io.ReadAll(io.LimitReader(tr, maxFile))
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = string(c)
		}
	}
}

// GitAndPython runs, through run (a command in the sandbox; its output,
// trimmed), the clients every runtime's credential test shares: git clone,
// commit and push of pushed.txt holding "pushed from <from>", with the
// placeholder in $GITHUB_TOKEN as the URL's password, then Python's
// urllib.request (SSL_CERT_FILE) and requests (REQUESTS_CA_BUNDLE) sending
// it as a bearer token, each to origin (host:port of g). It checks what
// came back and that the push landed in g's bare repository.
func GitAndPython(t testing.TB, g *GitOrigin, origin, from string, run func(command string) string) {
	t.Helper()
	got := run(`set -e; cd /workspace
git clone -q "https://x-access-token:$GITHUB_TOKEN@` + origin + `/repo.git" r 2>&1
cd r; echo "pushed from the ` + from + `" >pushed.txt; git add pushed.txt
git -c user.name=agent -c user.email=agent@example.com commit -qm "from the ` + from + `" 2>&1
git push -q origin HEAD:main 2>&1; git rev-parse HEAD`)
	sha := got[strings.LastIndex(got, "\n")+1:]
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(sha) {
		t.Fatalf("git clone, commit, push:\n%s\n(origin served %q)", got, g.Requests())
	}
	if head := RunGit(t, g.Bare, "rev-parse", "main"); head != sha {
		t.Errorf("the bare repository's main is %s, want the pushed %s", head, sha)
	}
	if b := RunGit(t, g.Bare, "show", "main:pushed.txt"); b != "pushed from the "+from {
		t.Errorf("pushed.txt in the bare repository: %q", b)
	}

	bearer := `{"Authorization": "Bearer " + os.environ["GITHUB_TOKEN"]}`
	if got := run(`python3 -c 'import os, urllib.request as u
print(u.urlopen(u.Request("https://` + origin + `/api/urllib", headers=` + bearer + `), timeout=30).read().decode())' 2>&1`); got != "credential ok /api/urllib" {
		t.Errorf("python urllib: %q", got)
	}
	if got := run(`python3 -c 'import os, requests
print(requests.get("https://` + origin + `/api/requests", headers=` + bearer + `, timeout=30).text)' 2>&1`); got != "credential ok /api/requests" {
		t.Errorf("python requests: %q", got)
	}
}
