package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/server/client"
)

// tarTransfer is a session whose one directory, /workspace/src, is the
// tar it holds.
type tarTransfer struct{ tar []byte }

func (f tarTransfer) PutFile(context.Context, string, string, io.Reader, client.PutOptions) (files.Written, error) {
	return files.Written{}, io.ErrUnexpectedEOF
}

func (f tarTransfer) GetFile(context.Context, string, string, bool) (files.Info, io.ReadCloser, error) {
	return files.Info{Path: "/workspace/src", Type: files.TypeDirectory}, io.NopCloser(bytes.NewReader(f.tar)), nil
}

func (f tarTransfer) StatFile(context.Context, string, string) (files.Info, error) {
	return files.Info{Path: "/workspace/src", Type: files.TypeDirectory}, nil
}

// `shellbox cp` out of a sandbox does not extract a symlink chain that
// leads out of the destination on the operator's machine (found by an
// attack review: "up -> ." then "up2 -> up/.." pointed above it); the
// error names the link.
func TestCopyOutRefusesLinkChainOut(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "src/", Mode: 0o755},
		{Typeflag: tar.TypeSymlink, Name: "src/up", Linkname: "."},
		{Typeflag: tar.TypeSymlink, Name: "src/up2", Linkname: "up/.."},
		{Typeflag: tar.TypeSymlink, Name: "src/up3", Linkname: "up2/.."},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	dir := t.TempDir()
	// To a new name, src's entries are the destination's: up2 leads out.
	// Into an existing directory, src/ is in it: up2 is that directory,
	// up3 leads out.
	for dst, want := range map[string]string{
		filepath.Join(dir, "new"): `tar entry "up2": symlink to up/.. leads outside the destination (through the symlink up -> .)`,
		dir:                       `tar entry "src/up3": symlink to up2/.. leads outside the destination`,
	} {
		_, err := client.CopyOut(context.Background(), tarTransfer{buf.Bytes()}, client.Path{Session: "s1", Path: "src"}, dst, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cp to %s: %v, want %q", dst, err, want)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
