// Command image writes a one-binary OCI image archive for the CI cluster
// (.ci/setup-kube.sh), with the images package's own archive writer
// (images.NewArchive: a deterministic layer, numeric owners, an index
// naming the image so `ctr images import` tags it):
//
//	go run .ci/kube/image.go -name NAME -binary FILE -path /IN/IMAGE -out ARCHIVE.tar
//
// The image holds FILE at -path (mode 0555, root-owned) and nothing else;
// its command is that path. It runs as root (user 0:0): the pause process
// and the init container that copies the agent both do.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shellbox/shellbox/images"
)

func main() {
	name := flag.String("name", "", "image name, e.g. shellbox-agent:ci")
	binary := flag.String("binary", "", "the static binary the image holds")
	path := flag.String("path", "", "its absolute path in the image")
	out := flag.String("out", "", "the OCI archive to write")
	flag.Parse()
	if err := run(*name, *binary, *path, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(name, binary, path, out string) error {
	if name == "" || binary == "" || out == "" || !strings.HasPrefix(path, "/") || strings.Contains(path, "..") {
		return fmt.Errorf("want -name, -binary, -out and an absolute -path without ..; got %q %q %q %q", name, binary, path, out)
	}
	root, err := os.MkdirTemp("", "shellbox-ci-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	dst := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := copyFile(binary, dst); err != nil {
		return err
	}
	// Every entry at the epoch: the same binary makes the same digest, so
	// setup-kube.sh imports it only when it changed.
	epoch := time.Unix(0, 0)
	a, err := images.NewArchive(context.Background(), root, images.ImageSpec{
		Name:       name,
		Cmd:        []string{path},
		User:       "0:0",
		WorkingDir: "/",
		Comment:    "shellbox CI: " + filepath.Base(binary) + " at " + path,
		Owner:      func(string) (int, int) { return 0, 0 },
		MTime:      &epoch,
	})
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.WriteFile(out); err != nil {
		return err
	}
	fmt.Printf("%s %s\n", a.Manifest().Digest, name)
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	o, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}
