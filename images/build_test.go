package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// requireDocker skips the test when no Docker engine answers, except in CI
// (CI=true), where a missing engine is a failure.
func requireDocker(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	if err == nil {
		return
	}
	msg := "no Docker engine reachable (docker info: " + strings.TrimSpace(string(out)) + ": " + err.Error() + ")"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI=true, so this is a failure (run .ci/setup-docker.sh)", msg)
	}
	t.Skip(msg + "; skipping (with CI=true this fails)")
}

// dockerRun runs a labelled, removed-on-exit container and returns its output.
// The container has a unique name and is force-removed at cleanup even if the
// run was cut short.
func dockerRun(t *testing.T, args []string, image string, cmd ...string) (string, error) {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "shellbox-images-test-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_ = exec.Command("docker", "rm", "-f", name).Run()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := append([]string{"run", "--rm", "--name", name, "--label", LabelTest + "=1", "--network", "none"}, args...)
	all = append(all, image)
	all = append(all, cmd...)
	out, err := exec.CommandContext(ctx, "docker", all...).CombinedOutput()
	return string(out), err
}

func imageLabel(t *testing.T, image, label string) string {
	t.Helper()
	out, err := exec.Command("docker", "image", "inspect", "-f", `{{index .Config.Labels "`+label+`"}}`, image).Output()
	if err != nil {
		t.Fatalf("docker image inspect %s: %v", image, err)
	}
	return strings.TrimSpace(string(out))
}

func TestBuildTestImage(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var log bytes.Buffer
	start := time.Now()
	if err := BuildTest(ctx, &log); err != nil {
		t.Fatalf("BuildTest: %v\n%s", err, log.String())
	}
	t.Logf("BuildTest took %s:\n%s", time.Since(start).Round(time.Millisecond), log.String())
	if got := imageLabel(t, TestImage, LabelImage); got != "test" {
		t.Errorf("label %s = %q, want test", LabelImage, got)
	}

	// Idempotent: a second build keeps the same image.
	id := imageID(ctx, "docker", TestImage)
	log.Reset()
	if err := BuildTest(ctx, &log); err != nil {
		t.Fatalf("second BuildTest: %v\n%s", err, log.String())
	}
	if id2 := imageID(ctx, "docker", TestImage); id2 != id {
		t.Errorf("second BuildTest replaced the image: %s -> %s\n%s", id, id2, log.String())
	}

	out, err := dockerRun(t, nil, TestImage, "bash", "-c", "echo ok")
	if err != nil || out != "ok\n" {
		t.Fatalf("docker run %s bash -c 'echo ok': %v: %q", TestImage, err, out)
	}
}

// The test image under the hardening shellbox applies: read-only root, no
// capabilities, no-new-privileges, non-root, a writable workspace mount.
func TestTestImageHardened(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := BuildTest(ctx, nil); err != nil {
		t.Fatal(err)
	}
	script := `set -e
id -u; id -un; pwd
for t in bash sh head tr wc cat sleep ls pwd env mkdir rm id dd yes seq touch chmod stat readlink tail sort grep sed setsid nohup timeout true false printf; do
  command -v "$t" >/dev/null || { echo "missing: $t"; exit 1; }
done
sh -c 'echo dash-ok'
echo data > /tmp/f && cat /tmp/f
if touch /etc/x 2>/dev/null; then echo "rootfs writable"; exit 1; fi
seq 3 | sort -r | tr '\n' ' ' | sed 's/ $//'; echo
set +e; timeout 0.2 sleep 5; echo "timeout=$?"`
	args := []string{"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--tmpfs", "/tmp", "--pids-limit", "64", "--memory", "64m"}
	out, err := dockerRun(t, args, TestImage, "bash", "-c", script)
	want := "1000\nsandbox\n/workspace\ndash-ok\ndata\n3 2 1\ntimeout=124\n"
	if err != nil || out != want {
		t.Fatalf("hardened run: %v\ngot:\n%s\nwant:\n%s", err, out, want)
	}
}

// With the runsc runtime registered (.ci/setup-docker.sh does it), a container
// runs under gVisor: its kernel is not the host's.
func TestTestImageRunsc(t *testing.T) {
	requireDocker(t)
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"runsc"`) {
		if os.Getenv("CI") == "true" && os.Getenv("SKIP_RUNSC") != "1" {
			t.Fatalf("no runsc runtime in docker info (%s); CI=true: run .ci/setup-docker.sh or set SKIP_RUNSC=1", strings.TrimSpace(string(out)))
		}
		t.Skipf("no runsc runtime registered with Docker (%s)", strings.TrimSpace(string(out)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := BuildTest(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got, err := dockerRun(t, []string{"--runtime", "runsc"}, TestImage, "bash", "-c", "echo ok; cat /proc/version")
	if err != nil || !strings.HasPrefix(got, "ok\n") {
		t.Fatalf("runsc run: %v: %q", err, got)
	}
	host, _ := os.ReadFile("/proc/version")
	if strings.TrimSpace(strings.TrimPrefix(got, "ok\n")) == strings.TrimSpace(string(host)) {
		t.Fatalf("runsc container reports the host kernel: %q", got)
	}
	t.Logf("runsc kernel: %s", strings.TrimSpace(strings.TrimPrefix(got, "ok\n")))
}

// The real offline build takes minutes and needs root, debootstrap and the
// Debian mirror, so it runs only when asked: SHELLBOX_TEST_OFFLINE_BUILD=1.
// It produces (and leaves) SandboxImage.
func TestBuildOffline(t *testing.T) {
	if os.Getenv("SHELLBOX_TEST_OFFLINE_BUILD") != "1" {
		t.Skip("set SHELLBOX_TEST_OFFLINE_BUILD=1 to run the debootstrap build (minutes, root, mirror access)")
	}
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	if err := BuildOffline(ctx, Options{}, testWriter{t}); err != nil {
		t.Fatal(err)
	}
	t.Logf("BuildOffline took %s", time.Since(start).Round(time.Second))
	if got := imageLabel(t, SandboxImage, LabelImage); got != "sandbox" {
		t.Errorf("label %s = %q, want sandbox", LabelImage, got)
	}
	script := `id; pwd; stat -c '%u:%g %a' /workspace; git --version; python3 --version; curl --version | head -n 1; ps -o pid,comm | head -n 2; find /workspace -maxdepth 0; ls /etc/ssl/certs/ca-certificates.crt`
	out, err := dockerRun(t, []string{"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"}, SandboxImage, "bash", "-c", script)
	if err != nil {
		t.Fatalf("docker run %s: %v\n%s", SandboxImage, err, out)
	}
	t.Logf("sandbox image:\n%s", out)
	for _, want := range []string{"uid=1000(sandbox) gid=1000(sandbox)", "\n/workspace\n", "1000:1000 755", "git version", "Python 3", "curl ", "PID COMMAND"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestMirrorFromAPT(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  string
		file  string
	}{
		{
			name: "deb822 with security and updates",
			files: map[string]string{"sources.list.d/debian.sources": `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`},
			want: "http://deb.debian.org/debian", file: "sources.list.d/debian.sources",
		},
		{
			name: "security first, disabled stanza, deb-src",
			files: map[string]string{"sources.list.d/a.sources": `Types: deb
URIs: http://security.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: http://disabled.example/debian
Suites: bookworm
Enabled: no

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb deb-src
URIs: https://mirror.example/debian
Suites: bookworm
Components: main contrib
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 abc
 -----END PGP PUBLIC KEY BLOCK-----
`},
			want: "https://mirror.example/debian", file: "sources.list.d/a.sources",
		},
		{
			name: "one-line format with options and comments",
			files: map[string]string{"sources.list": `# deb http://commented.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://ftp.example.org/debian/ bookworm main
deb http://security.debian.org/ bookworm-security main
`},
			want: "http://ftp.example.org/debian/", file: "sources.list",
		},
		{
			name: "exact suite preferred over an earlier other suite",
			files: map[string]string{
				"sources.list":                "deb http://first.example/debian trixie main\n",
				"sources.list.d/other.list":   "deb http://second.example/debian bookworm main\n",
				"sources.list.d/x.disabled":   "deb http://ignored.example/debian bookworm main\n",
				"sources.list.d/cloud.list":   "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n",
				"sources.list.d/zz.sources":   "Types: deb\nURIs: cdrom:/media\nSuites: bookworm\n",
				"sources.list.d/empty.source": "",
			},
			want: "http://second.example/debian", file: "sources.list.d/other.list",
		},
		{
			name: "fallback prefers a Debian archive over third-party repositories",
			files: map[string]string{
				"sources.list.d/a.list": "deb https://deb.nodesource.com/node_20.x nodistro main\n",
				"sources.list.d/b.list": "deb http://deb.debian.org/debian/ trixie main\n",
			},
			want: "http://deb.debian.org/debian/", file: "sources.list.d/b.list",
		},
		{
			name:  "fallback to another suite",
			files: map[string]string{"sources.list": "deb http://only.example/debian trixie main\n"},
			want:  "http://only.example/debian", file: "sources.list",
		},
		{
			name:  "nothing usable",
			files: map[string]string{"sources.list": "deb http://security.debian.org/debian-security bookworm-security main\n"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range c.files {
				p := filepath.Join(root, "etc/apt", name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, file, err := MirrorFromAPT(root, "bookworm")
			if c.want == "" {
				if err == nil {
					t.Fatalf("got %q from %s, want an error", got, file)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want || file != filepath.Join(root, "etc/apt", c.file) {
				t.Errorf("got %q from %s, want %q from %s", got, file, c.want, c.file)
			}
		})
	}
}

// The host this runs on: whatever it finds must be a usable URI (or there is
// no Debian mirror at all, e.g. on a non-Debian host).
func TestMirrorFromHost(t *testing.T) {
	m, file, err := MirrorFromAPT("/", "bookworm")
	if err != nil {
		t.Skipf("no apt sources on this host: %v", err)
	}
	if !strings.Contains(m, "://") && !strings.HasPrefix(m, "file:/") {
		t.Errorf("mirror %q from %s is not a URI", m, file)
	}
	t.Logf("host mirror: %s (from %s)", m, file)
}

func TestTrimRootfs(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{
		"var/cache/apt/archives/bash_5.2_amd64.deb", "var/cache/apt/pkgcache.bin",
		"var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease",
		"var/log/dpkg.log", "debootstrap/debootstrap.log", "etc/resolv.conf", "etc/hostname",
		"usr/bin/bash", "var/lib/apt/lists/lock",
	} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := trimRootfs(root); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]int64{ // -1: gone
		"var/cache/apt/archives/bash_5.2_amd64.deb":                        -1,
		"var/cache/apt/pkgcache.bin":                                       -1,
		"var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease": -1,
		"var/log/dpkg.log":                                                 -1,
		"debootstrap":                                                      -1,
		"etc/resolv.conf":                                                  0,
		"etc/hostname":                                                     0,
		"usr/bin/bash":                                                     1,
		"var/lib/apt/lists/lock":                                           1,
	} {
		st, err := os.Stat(filepath.Join(root, f))
		switch {
		case want == -1 && err == nil:
			t.Errorf("%s still there", f)
		case want >= 0 && err != nil:
			t.Errorf("%s: %v", f, err)
		case want >= 0 && st.Size() != want:
			t.Errorf("%s: size %d, want %d", f, st.Size(), want)
		}
	}
}

func TestSlimRootfs(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{
		"usr/share/doc/git/copyright", "usr/share/doc/git/README.md", "usr/share/doc/git/contrib/x.sh",
		"usr/share/man/man1/ls.1.gz", "usr/share/locale/de/LC_MESSAGES/coreutils.mo", "usr/share/info/sed.info.gz",
		"usr/share/zoneinfo/UTC", "usr/bin/git",
	} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("git", filepath.Join(root, "usr/share/doc/git-man")); err != nil {
		t.Fatal(err)
	}
	if err := slimRootfs(root); err != nil {
		t.Fatal(err)
	}
	var got []string
	_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(root, p)
			got = append(got, rel)
		}
		return nil
	})
	want := []string{"etc/dpkg/dpkg.cfg.d/docker", "usr/bin/git", "usr/share/doc/git/copyright", "usr/share/zoneinfo/UTC"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("after slimRootfs: %v, want %v", got, want)
	}
}
