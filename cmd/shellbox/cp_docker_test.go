package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/tools"
)

const fileSize = 100 << 20

// randomFile is fileSize bytes of a fixed pseudo-random stream.
func randomFile() []byte {
	b := make([]byte, fileSize)
	rand.NewChaCha8([32]byte{42}).Read(b)
	return b
}

func bashIn(t testing.TB, c *client.Client, session, command string) string {
	t.Helper()
	args, _ := json.Marshal(map[string]any{"command": command, "description": "check"})
	res, err := c.Call(context.Background(), session, "bash", args)
	if err != nil {
		t.Fatal(err)
	}
	if fg, ok := res.Value.(*tools.Foreground); !ok || fg.ExitCode != 0 {
		t.Fatalf("%s: %s", command, res.Text)
	}
	return strings.TrimSpace(res.Text)
}

// TestFilesDocker: through serve's own layer on a real runc sandbox, 100 MB
// go in and come out byte-exact, owned by the sandbox user; escapes are
// refused, and a full workspace is said (507) with nothing left.
func TestFilesDocker(t *testing.T) { testFilesDocker(t, "runc") }

// TestFilesDockerRunsc: the same under gVisor, which has no setfsuid: the
// agent acts as the sandbox user with its thread's effective ids.
func TestFilesDockerRunsc(t *testing.T) { testFilesDocker(t, "runsc") }

func testFilesDocker(t *testing.T, runtime string) {
	t.Setenv("SHELLBOX_SANDBOX_RUNTIME", runtime)
	_, s := testServe(t, "docker")
	c := client.New(s.URL, servertest.TokenAcme, nil)
	ctx := context.Background()
	data := randomFile()
	sum := sha256.Sum256(data)
	w, err := c.PutFile(ctx, "files", "/workspace/in/blob.bin", bytes.NewReader(data), client.PutOptions{Size: fileSize})
	if err != nil {
		t.Fatal(err)
	}
	if w.Bytes != fileSize || w.Path != "/workspace/in/blob.bin" {
		t.Errorf("written %+v", w)
	}
	if got := bashIn(t, c, "files", "stat -c '%u:%g %a' in in/blob.bin && sha256sum in/blob.bin | cut -d' ' -f1 && ls -a in"); got !=
		"1000:1000 755\n1000:1000 644\n"+hex.EncodeToString(sum[:])+"\n.\n..\nblob.bin" {
		t.Errorf("in the sandbox:\n%s", got)
	}
	info, body, err := c.GetFile(ctx, "files", "in/blob.bin", false)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, body)
	body.Close()
	if err != nil || n != fileSize || !bytes.Equal(h.Sum(nil), sum[:]) || info.Size != fileSize {
		t.Fatalf("download: %d bytes, %v, info %+v", n, err, info)
	}

	bashIn(t, c, "files", "ln -s /etc /workspace/etc && ln -s ../.. /workspace/up && mkdir -p /workspace/ro && chmod 555 /workspace/ro")
	for _, p := range []string{"../etc/x", "/etc/passwd", "etc/x", "up/etc/x", "/run/shellbox/agent.sock"} {
		_, err := c.PutFile(ctx, "files", p, strings.NewReader("x"), client.PutOptions{})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 400 || !strings.Contains(ce.Message, "outside the session root") && !strings.Contains(ce.Message, "leads outside") {
			t.Errorf("PUT %s: %v", p, err)
		}
	}
	// gVisor's os.Root follows these: the real-path check refuses them.
	for _, p := range []string{"etc/passwd", "up/etc/passwd", "/workspace/etc/"} {
		if _, _, err := c.GetFile(ctx, "files", p, true); err == nil || !strings.Contains(err.Error(), "leads outside") {
			t.Errorf("GET %s: %v", p, err)
		}
	}
	if _, err := c.StatFile(ctx, "files", "etc/passwd"); err == nil || !strings.Contains(err.Error(), "leads outside") {
		t.Errorf("stat etc/passwd: %v", err)
	}
	// The agent acts as the sandbox user: a directory the user cannot
	// write is refused, though the agent is root.
	if _, err := c.PutFile(ctx, "files", "ro/x", strings.NewReader("x"), client.PutOptions{}); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("PUT into a read-only directory: %v", err)
	}

	if runtime != "runc" {
		return
	}
	// A full workspace: 507, and neither the upload nor its staging file
	// is left. (runc only: under gVisor the sentry's own memory is charged
	// with the 450 MB of tmpfs.)
	bashIn(t, c, "files", "rm in/blob.bin && head -c 450M /dev/zero > fill")
	_, err = c.PutFile(ctx, "files", "in/again.bin", bytes.NewReader(data), client.PutOptions{Size: fileSize})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 507 || ce.Code != "no_space" || !strings.Contains(ce.Message, "/workspace/in/again.bin") {
		t.Errorf("upload into a full workspace: %v", err)
	}
	if got := bashIn(t, c, "files", "rm fill && ls -a in"); got != ".\n.." {
		t.Errorf("left in the workspace: %q", got)
	}
}

// BenchmarkFilesDocker: a 100 MB upload and download through the REST API
// into one hardened runc sandbox, beside the same through `docker exec -i`
// (cat) into that container and `docker cp` into and out of it. docker cp
// reaches a shellbox sandbox's /workspace only because it is a bind of the
// session's host workspace (it writes there as root, not as the sandbox
// user), nothing else of the read-only rootfs, so it also runs against an
// unhardened twin of the sandbox (the same image, a writable rootfs) for
// its figure. Throughput is what -bench prints (MB/s); nothing is asserted
// on it.
//
//	go test ./cmd/shellbox/ -run '^$' -bench BenchmarkFilesDocker -benchtime 5x
func BenchmarkFilesDocker(b *testing.B) {
	l, s := testServe(b, "docker")
	c := client.New(s.URL, servertest.TokenAcme, nil)
	ctx := context.Background()
	data := randomFile()
	local := filepath.Join(b.TempDir(), "blob.bin")
	os.WriteFile(local, data, 0o644)
	if _, err := c.PutFile(ctx, "bench", "warm", strings.NewReader("x"), client.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	list, err := l.Sandboxes(ctx)
	if err != nil || len(list) != 1 {
		b.Fatalf("sandboxes: %v, %v", list, err)
	}
	ctr := list[0].ID

	b.Run("rest_upload", func(b *testing.B) {
		b.SetBytes(fileSize)
		for b.Loop() {
			if _, err := c.PutFile(ctx, "bench", "up.bin", bytes.NewReader(data), client.PutOptions{Size: fileSize}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rest_download", func(b *testing.B) {
		b.SetBytes(fileSize)
		for b.Loop() {
			_, body, err := c.GetFile(ctx, "bench", "up.bin", false)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, body)
			body.Close()
			if err != nil || n != fileSize {
				b.Fatal(n, err)
			}
		}
	})
	docker := func(b *testing.B, stdin io.Reader, stdout io.Writer, args ...string) error {
		cmd := exec.Command("docker", args...)
		cmd.Stdin, cmd.Stdout = stdin, stdout
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}
	b.Run("docker_exec_upload", func(b *testing.B) {
		b.SetBytes(fileSize)
		for b.Loop() {
			if err := docker(b, bytes.NewReader(data), nil, "exec", "-i", "-u", "1000:1000", ctr, "sh", "-c", "cat > /workspace/exec.bin"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("docker_exec_download", func(b *testing.B) {
		b.SetBytes(fileSize)
		for b.Loop() {
			if err := docker(b, nil, io.Discard, "exec", "-u", "1000:1000", ctr, "cat", "/workspace/exec.bin"); err != nil {
				b.Fatal(err)
			}
		}
	})
	// docker cp into the sandbox itself: said once, not timed.
	if err := docker(b, nil, nil, "cp", local, ctr+":/workspace/cp.bin"); err != nil {
		b.Logf("docker cp into the sandbox: %v", err)
	}
	if err := docker(b, nil, nil, "cp", ctr+":/workspace/up.bin", filepath.Join(b.TempDir(), "out")); err != nil {
		b.Logf("docker cp out of the sandbox: %v", err)
	}
	twin := fmt.Sprintf("shellbox-test-cp-twin-%d", os.Getpid())
	if err := docker(b, nil, nil, "run", "-d", "--name", twin, "--label", "org.shellbox.test=1", "--entrypoint", "sleep", "shellbox-test:latest", "3600"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { docker(b, nil, nil, "rm", "-f", twin) })
	b.Run("docker_cp_upload_twin", func(b *testing.B) {
		b.SetBytes(fileSize)
		for b.Loop() {
			if err := docker(b, nil, nil, "cp", local, twin+":/tmp/cp.bin"); err != nil {
				b.Fatal(err)
			}
		}
	})
	out := filepath.Join(b.TempDir(), "out.bin")
	b.Run("docker_cp_download_twin", func(b *testing.B) {
		b.SetBytes(fileSize)
		for b.Loop() {
			if err := docker(b, nil, nil, "cp", twin+":/tmp/cp.bin", out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
