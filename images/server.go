package images

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// The server image: what `shellbox serve` runs in on Kubernetes, and what
// the session pods' init container copies the agent from (kube.agentImage).
const (
	// ServerImage is the server image's default tag.
	ServerImage = "shellbox:latest"
	// ServerUID is the uid and gid of the server's non-root user
	// "shellbox" (the chart's runAsUser).
	ServerUID = 65532
	// ServerBinary and AgentBinary are where the image holds the two
	// binaries (AgentBinary is kube.agentPath's default).
	ServerBinary = "/usr/local/bin/shellbox"
	AgentBinary  = "/usr/local/bin/shellbox-agent"
)

// ServerOptions says what BuildServerImage builds and where it goes.
type ServerOptions struct {
	// Tag of the image; default ServerImage.
	Tag string
	// Shellbox and Agent are the static binaries to put in (CGO_ENABLED=0
	// builds of ./cmd/shellbox and ./cmd/shellbox-agent). Required.
	Shellbox, Agent string
	// Containerd, if set, is where the image is imported (a node's
	// containerd: namespace k8s.io).
	Containerd *Containerd
	// Output, if set, is an OCI image archive file written instead of or
	// besides the import (`ctr -n k8s.io images import FILE` on a node).
	Output string
	// Force imports even when containerd has the image already.
	Force bool
}

// BuildServerImage builds the server image from two static binaries and
// a minimal filesystem written here (no base image, no registry, no
// shell, no CA certificates: the server dials only the API server, whose
// CA the service account brings), into containerd or an OCI archive.
func BuildServerImage(ctx context.Context, opts ServerOptions, progress io.Writer) error {
	if opts.Containerd == nil && opts.Output == "" {
		return fmt.Errorf("server image build: nowhere to put it: give an output file or a containerd")
	}
	p := newProgress(progress)
	start := time.Now()
	if opts.Containerd != nil {
		if err := opts.Containerd.Ping(ctx); err != nil {
			return fmt.Errorf("server image build: %w", err)
		}
	}
	a, err := serverArchive(ctx, opts)
	if err != nil {
		return fmt.Errorf("server image build: %w", err)
	}
	defer a.Close()
	return deliver(ctx, p, a, opts.Containerd, opts.Output, opts.Force, start)
}

// serverArchive writes the server image's rootfs into a temporary
// directory and archives it. Its Close removes the directory.
func serverArchive(ctx context.Context, opts ServerOptions) (_ *Archive, err error) {
	if opts.Tag == "" {
		opts.Tag = ServerImage
	}
	for _, b := range []struct{ what, path string }{{"shellbox", opts.Shellbox}, {"shellbox-agent", opts.Agent}} {
		if err := checkStatic(b.path); err != nil {
			return nil, fmt.Errorf("%s binary: %w", b.what, err)
		}
	}
	work, err := os.MkdirTemp("", "shellbox-serverimage-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(work)
		}
	}()
	rootfs := filepath.Join(work, "rootfs")
	if err := serverRootfs(rootfs, opts.Shellbox, opts.Agent); err != nil {
		return nil, err
	}
	return archiveWork(ctx, work, rootfs, ImageSpec{
		Name:       opts.Tag,
		Labels:     map[string]string{LabelImage: "server"},
		Cmd:        []string{ServerBinary, "serve"},
		User:       fmt.Sprintf("%d:%d", ServerUID, ServerUID),
		WorkingDir: "/",
		Env:        []string{DefaultPath, "HOME=/var/lib/shellbox"},
		Comment:    "shellbox server image (static shellbox and shellbox-agent)",
		Owner:      serverImageOwner,
	})
}

// serverRootfs is the whole filesystem: the two binaries, the users, and
// the directories a read-only root still needs (the chart mounts emptyDirs
// on /tmp and /var/lib/shellbox).
func serverRootfs(root, shellbox, agent string) error {
	dirs := map[string]os.FileMode{"etc": 0o755, "etc/shellbox": 0o755, "usr/local/bin": 0o755,
		"tmp": os.ModeSticky | 0o777, "var/lib/shellbox": 0o700}
	for d, mode := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(root, d), mode); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd":        fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nshellbox:x:%d:%d:shellbox:/var/lib/shellbox:/sbin/nologin\n", ServerUID, ServerUID),
		"etc/group":         fmt.Sprintf("root:x:0:\nshellbox:x:%d:\n", ServerUID),
		"etc/nsswitch.conf": "hosts: files dns\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	for _, b := range [][2]string{{shellbox, ServerBinary}, {agent, AgentBinary}} {
		if err := copyFile(b[0], filepath.Join(root, b[1]), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// serverImageOwner: everything is root's but the server's state directory.
func serverImageOwner(name string) (int, int) {
	if name == "var/lib/shellbox" {
		return ServerUID, ServerUID
	}
	return 0, 0
}

// checkStatic refuses a binary that is not a statically linked ELF
// executable: the image has no libraries and no dynamic loader.
func checkStatic(path string) error {
	if path == "" {
		return fmt.Errorf("not given")
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (build it with CGO_ENABLED=0)", path)
		}
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s is not an executable", path)
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
