package images

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// staticBinary builds a tiny static Go program (CGO_ENABLED=0).
func staticBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module tiny\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { println(\"tiny\") }\n"), 0o644)
	bin := filepath.Join(dir, "tiny")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The server image is the two static binaries, a passwd with the non-root
// user, and nothing else: no shell, no CA certificates; it runs as that
// user.
func TestBuildServerImageOutput(t *testing.T) {
	bin := staticBinary(t)
	out := filepath.Join(t.TempDir(), "server.tar")
	if err := BuildServerImage(context.Background(), ServerOptions{Tag: "shellbox:test", Shellbox: bin, Agent: bin, Output: out}, io.Discard); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files, _ := readArchive(t, f)
	var idx ocispec.Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil || idx.Manifests[0].Annotations[AnnotationImageName] != "shellbox:test" {
		t.Fatalf("index.json %s: %v", files["index.json"], err)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(blob(t, files, idx.Manifests[0]), &man); err != nil {
		t.Fatal(err)
	}
	var img ocispec.Image
	if err := json.Unmarshal(blob(t, files, man.Config), &img); err != nil {
		t.Fatal(err)
	}
	if img.Config.User != "65532:65532" || strings.Join(img.Config.Cmd, " ") != ServerBinary+" serve" || img.Config.Labels[LabelImage] != "server" {
		t.Errorf("config: %+v", img.Config)
	}
	seen := map[string]*tar.Header{}
	for name, h := range layerHeaders(t, blob(t, files, man.Layers[0])) {
		seen[strings.TrimPrefix(name, "./")] = h
	}
	for _, want := range []struct {
		name     string
		uid, gid int
		mode     int64
	}{
		{"usr/local/bin/shellbox", 0, 0, 0o755}, {"usr/local/bin/shellbox-agent", 0, 0, 0o755},
		{"etc/passwd", 0, 0, 0o644}, {"tmp/", 0, 0, 0o1777}, {"var/lib/shellbox/", ServerUID, ServerUID, 0o700},
	} {
		h := seen[want.name]
		if h == nil {
			t.Errorf("the server image has no %s", want.name)
			continue
		}
		if h.Uid != want.uid || h.Gid != want.gid || h.Mode&0o7777 != want.mode {
			t.Errorf("%s: %d:%d %o, want %d:%d %o", want.name, h.Uid, h.Gid, h.Mode&0o7777, want.uid, want.gid, want.mode)
		}
	}
	for name := range seen {
		if strings.HasPrefix(name, "bin") || strings.HasPrefix(name, "etc/ssl") || strings.Contains(name, "lib/x86_64") {
			t.Errorf("the server image has %s: it should hold nothing but the binaries and its users", name)
		}
	}
	if len(seen) > 16 {
		t.Errorf("the server image has %d entries: %v", len(seen), seen)
	}
}

// A dynamically linked binary would not run in the image: refused, naming it.
func TestBuildServerImageRefusesDynamic(t *testing.T) {
	dyn, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "server.tar")
	err = BuildServerImage(context.Background(), ServerOptions{Shellbox: dyn, Agent: dyn, Output: out}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "shellbox binary: ") || !strings.Contains(err.Error(), "dynamically linked (build it with CGO_ENABLED=0)") {
		t.Errorf("dynamic binary: %v", err)
	}
	if err := BuildServerImage(context.Background(), ServerOptions{Shellbox: dyn, Agent: dyn}, io.Discard); err == nil || !strings.Contains(err.Error(), "nowhere to put it") {
		t.Errorf("no destination: %v", err)
	}
}
