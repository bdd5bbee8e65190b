package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	ctrimages "github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// testRootfs makes a small tree with every kind of entry the layer writer
// handles, and returns it.
func testRootfs(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"usr/bin", "etc", "tmp", "workspace", "home/sandbox", "empty"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for _, d := range []string{"home", "home/sandbox", "workspace"} {
		must(os.Chmod(filepath.Join(root, d), 0o755))
	}
	must(os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky))
	must(os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\necho tool\n"), 0o755))
	must(os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "etc/empty"), nil, 0o600))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool2")))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(syscall.Mkfifo(filepath.Join(root, "etc/fifo"), 0o644))
	for f, mode := range map[string]os.FileMode{"usr/bin/tool": 0o755, "etc/passwd": 0o644, "etc/empty": 0o600, "etc/fifo": 0o644} {
		must(os.Chmod(filepath.Join(root, f), mode))
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	must(os.WriteFile(filepath.Join(root, "usr/bin/big"), big, 0o644))
	return root
}

func newTestArchive(t *testing.T, root, name string) *Archive {
	t.Helper()
	epoch := time.Unix(0, 0)
	a, err := NewArchive(context.Background(), root, ImageSpec{
		Name:    name,
		Labels:  map[string]string{LabelImage: "test", "org.example.x": "y"},
		Comment: "test",
		Owner:   testImageOwner,
		MTime:   &epoch,
		TempDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// readArchive reads an OCI layout tar into a map of file name to content.
func readArchive(t *testing.T, r io.Reader) (map[string][]byte, []string) {
	t.Helper()
	files := map[string][]byte{}
	var order []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, h.Name)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 64<<20))
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
	return files, order
}

// blob returns the blob d names, checking its digest and size.
func blob(t *testing.T, files map[string][]byte, d ocispec.Descriptor) []byte {
	t.Helper()
	b, ok := files[blobPath(d.Digest)]
	if !ok {
		t.Fatalf("blob %s (%s) is not in the archive", d.Digest, d.MediaType)
	}
	if got := digest.FromBytes(b); got != d.Digest {
		t.Fatalf("blob %s has digest %s", d.Digest, got)
	}
	if int64(len(b)) != d.Size {
		t.Fatalf("blob %s is %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
	}
	return b
}

// layerHeaders returns the tar headers of a gzipped layer, by name.
func layerHeaders(t *testing.T, layer []byte) map[string]*tar.Header {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	seen := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = h
	}
	return seen
}

func TestArchiveLayout(t *testing.T) {
	root := testRootfs(t)
	a := newTestArchive(t, root, "shellbox-test-archive")
	var buf bytes.Buffer
	n, err := a.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Errorf("WriteTo returned %d, wrote %d", n, buf.Len())
	}
	files, order := readArchive(t, bytes.NewReader(buf.Bytes()))
	if order[0] != "oci-layout" || order[len(order)-1] != "index.json" {
		t.Errorf("archive order %v: want oci-layout first, index.json last", order)
	}

	var layout ocispec.ImageLayout
	if err := json.Unmarshal(files["oci-layout"], &layout); err != nil || layout.Version != ocispec.ImageLayoutVersion {
		t.Fatalf("oci-layout %q: %v", files["oci-layout"], err)
	}

	// index -> manifest
	var idx ocispec.Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != ocispec.MediaTypeImageIndex {
		t.Errorf("index: schema %d, media type %q", idx.SchemaVersion, idx.MediaType)
	}
	wantNames := []string{"shellbox-test-archive:latest", "docker.io/library/shellbox-test-archive:latest"}
	if len(idx.Manifests) != len(wantNames) {
		t.Fatalf("index has %d manifests, want %d: %+v", len(idx.Manifests), len(wantNames), idx.Manifests)
	}
	host := platforms.DefaultSpec()
	for i, m := range idx.Manifests {
		if m.Annotations[AnnotationImageName] != wantNames[i] || m.Annotations[ocispec.AnnotationRefName] != "latest" {
			t.Errorf("index manifest %d annotations %v, want name %s and ref.name latest", i, m.Annotations, wantNames[i])
		}
		if m.Digest != a.Manifest().Digest || m.MediaType != ocispec.MediaTypeImageManifest {
			t.Errorf("index manifest %d: %s %s, want %s", i, m.MediaType, m.Digest, a.Manifest().Digest)
		}
		if m.Platform == nil || m.Platform.OS != host.OS || m.Platform.Architecture != host.Architecture {
			t.Errorf("index manifest %d platform %+v, want the host's %+v", i, m.Platform, host)
		}
	}
	if got := a.Names(); !reflect.DeepEqual(got, wantNames) {
		t.Errorf("Names() = %v, want %v", got, wantNames)
	}

	// manifest -> config, layer
	var man ocispec.Manifest
	if err := json.Unmarshal(blob(t, files, idx.Manifests[0]), &man); err != nil {
		t.Fatal(err)
	}
	if man.SchemaVersion != 2 || man.MediaType != ocispec.MediaTypeImageManifest || man.Config.MediaType != ocispec.MediaTypeImageConfig {
		t.Errorf("manifest: schema %d, media type %q, config %q", man.SchemaVersion, man.MediaType, man.Config.MediaType)
	}
	if len(man.Layers) != 1 || man.Layers[0].MediaType != ocispec.MediaTypeImageLayerGzip || man.Layers[0].Digest != a.Layer().Digest {
		t.Fatalf("manifest layers %+v, want one gzip layer %s", man.Layers, a.Layer().Digest)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(blob(t, files, man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != host.OS || cfg.Architecture != host.Architecture {
		t.Errorf("config platform %s/%s, want %s/%s", cfg.OS, cfg.Architecture, host.OS, host.Architecture)
	}
	c := cfg.Config
	if c.User != "1000:1000" || c.WorkingDir != "/workspace" || !reflect.DeepEqual(c.Cmd, []string{"/bin/bash"}) ||
		!reflect.DeepEqual(c.Env, []string{DefaultPath}) || c.Labels[LabelImage] != "test" || c.Labels["org.example.x"] != "y" {
		t.Errorf("config %+v: want user 1000:1000, workdir /workspace, cmd /bin/bash, the PATH, the labels", c)
	}
	if cfg.Created == nil || !cfg.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("created %v, want the epoch", cfg.Created)
	}

	// layer: its uncompressed digest is the config's diff ID.
	gz, err := gzip.NewReader(bytes.NewReader(blob(t, files, man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest.FromBytes(raw) || a.DiffID() != digest.FromBytes(raw) || cfg.RootFS.Type != "layers" {
		t.Fatalf("rootfs %+v (DiffID %s), want the layer's uncompressed digest %s", cfg.RootFS, a.DiffID(), digest.FromBytes(raw))
	}

	type entry struct {
		typ      byte
		mode     int64
		uid, gid int
		link     string
		data     string
	}
	got := map[string]entry{}
	var names []string
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
		}
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner names %q %q, want numeric owners only", h.Name, h.Uname, h.Gname)
		}
		data, _ := io.ReadAll(tr)
		e := entry{typ: h.Typeflag, mode: h.Mode & 0o7777, uid: h.Uid, gid: h.Gid, link: h.Linkname}
		if h.Name != "usr/bin/big" {
			e.data = string(data)
		} else if !bytes.Equal(data, bytes.Repeat([]byte("0123456789abcdef"), 64<<10)) {
			t.Errorf("usr/bin/big: %d bytes, not the file's content", len(data))
		}
		got[h.Name] = e
		names = append(names, h.Name)
	}
	wantOrder := []string{"bin", "empty/", "etc/", "etc/empty", "etc/fifo", "etc/passwd", "home/", "home/sandbox/",
		"tmp/", "usr/", "usr/bin/", "usr/bin/big", "usr/bin/tool", "usr/bin/tool2", "workspace/"}
	if !reflect.DeepEqual(names, wantOrder) {
		t.Errorf("layer entries\n%v\nwant\n%v", names, wantOrder)
	}
	want := map[string]entry{
		"bin":           {typ: tar.TypeSymlink, mode: 0o777, link: "usr/bin"},
		"etc/passwd":    {typ: tar.TypeReg, mode: 0o644, data: "root:x:0:0:root:/root:/bin/sh\n"},
		"etc/empty":     {typ: tar.TypeReg, mode: 0o600},
		"etc/fifo":      {typ: tar.TypeFifo, mode: 0o644},
		"tmp/":          {typ: tar.TypeDir, mode: 0o1777},
		"usr/bin/tool":  {typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\necho tool\n"},
		"usr/bin/tool2": {typ: tar.TypeLink, mode: 0o755, link: "usr/bin/tool"},
		"workspace/":    {typ: tar.TypeDir, mode: 0o755, uid: SandboxUID, gid: SandboxUID},
		"home/sandbox/": {typ: tar.TypeDir, mode: 0o755, uid: SandboxUID, gid: SandboxUID},
		"home/":         {typ: tar.TypeDir, mode: 0o755},
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
	}

	// Deterministic: the same tree gives the same bytes.
	b := newTestArchive(t, root, "shellbox-test-archive")
	var buf2 bytes.Buffer
	if _, err := b.WriteTo(&buf2); err != nil {
		t.Fatal(err)
	}
	if b.Manifest().Digest != a.Manifest().Digest || !bytes.Equal(buf.Bytes(), buf2.Bytes()) {
		t.Errorf("a second archive of the same tree differs: manifest %s vs %s", b.Manifest().Digest, a.Manifest().Digest)
	}

	// WriteFile writes the same bytes, and Close removes the layer file.
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := a.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	if onDisk, err := os.ReadFile(out); err != nil || !bytes.Equal(onDisk, buf.Bytes()) {
		t.Errorf("WriteFile: %v; same bytes as WriteTo: %v", err, bytes.Equal(onDisk, buf.Bytes()))
	}
	layer := a.layerPath
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layer); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close the layer file %s: %v", layer, err)
	}
	if _, err := a.WriteTo(io.Discard); err == nil {
		t.Error("WriteTo after Close: no error")
	}
}

// containerd's own importer (the one client.Import and ctr use) reads the
// archive, and the image resolves for this host's platform.
func TestArchiveContainerdImporter(t *testing.T) {
	a := newTestArchive(t, testRootfs(t), "example.org/team/shellbox-test-archive:v1")
	if got, want := a.Names(), []string{"example.org/team/shellbox-test-archive:v1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v, want %v (a full name is not repeated)", got, want)
	}
	store, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := a.WriteTo(pw)
		pw.CloseWithError(err)
	}()
	ctx := namespaces.WithNamespace(context.Background(), "shellbox-test")
	idx, err := archive.ImportIndex(ctx, store, pr)
	if err != nil {
		t.Fatal(err)
	}
	man, err := ctrimages.Manifest(ctx, store, idx, platforms.Default())
	if err != nil {
		t.Fatal(err)
	}
	if len(man.Layers) != 1 || man.Layers[0].Digest != a.Layer().Digest {
		t.Errorf("imported manifest layers %+v, want %s", man.Layers, a.Layer().Digest)
	}
	diffIDs, err := ctrimages.RootFS(ctx, store, man.Config)
	if err != nil || len(diffIDs) != 1 || diffIDs[0] != a.DiffID() {
		t.Errorf("imported rootfs %v (%v), want [%s]", diffIDs, err, a.DiffID())
	}
	info, err := store.Info(ctx, a.Layer().Digest)
	if err != nil || info.Size != a.Layer().Size {
		t.Errorf("layer in the content store: %+v, %v; want %d bytes", info, err, a.Layer().Size)
	}
}

func TestImageNames(t *testing.T) {
	for _, tc := range []struct {
		in    string
		names []string
		tag   string
		bad   bool
	}{
		{in: "shellbox-test:latest", names: []string{"shellbox-test:latest", "docker.io/library/shellbox-test:latest"}, tag: "latest"},
		{in: "shellbox-sandbox:bookworm", names: []string{"shellbox-sandbox:bookworm", "docker.io/library/shellbox-sandbox:bookworm"}, tag: "bookworm"},
		{in: "shellbox-test", names: []string{"shellbox-test:latest", "docker.io/library/shellbox-test:latest"}, tag: "latest"},
		{in: "team/img:1", names: []string{"team/img:1", "docker.io/team/img:1"}, tag: "1"},
		{in: "localhost:5000/img", names: []string{"localhost:5000/img:latest"}, tag: "latest"},
		{in: "docker.io/library/x:2", names: []string{"docker.io/library/x:2"}, tag: "2"},
		{in: "", bad: true},
		{in: "Upper:case", bad: true},
		{in: "x@sha256:" + strings.Repeat("a", 64), bad: true},
	} {
		names, tag, err := imageNames(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("imageNames(%q) = %v, want an error", tc.in, names)
			}
			continue
		}
		if err != nil || tag != tc.tag || !reflect.DeepEqual(names, tc.names) {
			t.Errorf("imageNames(%q) = %v %q %v, want %v %q", tc.in, names, tag, err, tc.names, tc.tag)
		}
	}
}

func TestDebianPlatform(t *testing.T) {
	for arch, want := range map[string]string{"amd64": "linux/amd64", "arm64": "linux/arm64", "armhf": "linux/arm/v7", "i386": "linux/386"} {
		p, err := DebianPlatform(arch)
		if err != nil || platforms.Format(p) != want {
			t.Errorf("DebianPlatform(%q) = %s, %v; want %s", arch, platforms.Format(p), err, want)
		}
	}
	if _, err := DebianPlatform("vax"); err == nil {
		t.Error("DebianPlatform(vax): no error")
	}
	if p, err := DebianPlatform(""); err != nil || p.OS != "linux" {
		t.Errorf("DebianPlatform(\"\") = %+v, %v; want the host's", p, err)
	}
}

func TestNewArchiveErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := NewArchive(ctx, filepath.Join(t.TempDir(), "missing"), ImageSpec{Name: "x"}); err == nil || !strings.Contains(err.Error(), "rootfs") {
		t.Errorf("missing rootfs: %v", err)
	}
	if _, err := NewArchive(ctx, t.TempDir(), ImageSpec{}); err == nil || !strings.Contains(err.Error(), "no image name") {
		t.Errorf("no name: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	tmp := t.TempDir()
	if _, err := NewArchive(cctx, testRootfs(t), ImageSpec{Name: "x", TempDir: tmp}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v, want context.Canceled", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("a failed archive left %d files in its temp dir", len(left))
	}
}

// requireContainerd returns the containerd tests import into: the daemon at
// $SHELLBOX_CONTAINERD_ADDRESS (.ci/setup-containerd.sh starts one), in
// namespace "shellbox". Without it the test is skipped, except under
// CI=true, where that fails.
func requireContainerd(t *testing.T) Containerd {
	t.Helper()
	to := Containerd{
		Address:     os.Getenv("SHELLBOX_CONTAINERD_ADDRESS"),
		Namespace:   "shellbox",
		Snapshotter: os.Getenv("SHELLBOX_CONTAINERD_SNAPSHOTTER"),
	}
	msg := ""
	if to.Address == "" {
		msg = "SHELLBOX_CONTAINERD_ADDRESS is not set: no containerd to import into (.ci/setup-containerd.sh starts one at /run/shellbox-containerd/containerd.sock)"
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		c, _, err := dialContainerd(ctx, to)
		if err != nil {
			msg = err.Error()
		} else {
			c.Close()
		}
	}
	if msg == "" {
		return to
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI=true, so this is a failure", msg)
	}
	t.Skip(msg + "; skipping (with CI=true this fails)")
	return to
}

// The test image built into the real containerd, under a test-only tag:
// both names resolve to one manifest, unpacked; a rebuild imports nothing;
// the archive file path imports the same image.
func TestBuildTestImageContainerd(t *testing.T) {
	to := requireContainerd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	tag := fmt.Sprintf("shellbox-test-images-%d-%s:latest", os.Getpid(), hex.EncodeToString(rnd[:]))
	names := []string{tag, "docker.io/library/" + tag}

	c, cctx, err := dialContainerd(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	removeImages := func() {
		// Not cctx: cleanup runs after the test's context is canceled.
		ctx := namespaces.WithNamespace(context.Background(), to.Namespace)
		for _, n := range names {
			if err := c.ImageService().Delete(ctx, n); err != nil && !errdefs.IsNotFound(err) {
				t.Errorf("removing test image %s: %v", n, err)
			}
		}
	}
	t.Cleanup(removeImages)

	var log bytes.Buffer
	start := time.Now()
	if err := BuildTestImage(ctx, TestOptions{Tag: tag, Containerd: &to}, &log); err != nil {
		t.Fatalf("BuildTestImage: %v\n%s", err, log.String())
	}
	t.Logf("build and import took %s:\n%s", time.Since(start).Round(time.Millisecond), log.String())

	var target digest.Digest
	var updated time.Time
	for i, n := range names {
		img, err := c.GetImage(cctx, n)
		if err != nil {
			t.Fatalf("GetImage(%s): %v", n, err)
		}
		if i == 0 {
			target = img.Target().Digest
			updated = img.Metadata().UpdatedAt
		} else if img.Target().Digest != target {
			t.Errorf("%s is %s, %s is %s: want one manifest", names[0], target, n, img.Target().Digest)
		}
		unpacked, err := img.IsUnpacked(cctx, to.Snapshotter)
		if err != nil || !unpacked {
			t.Errorf("%s unpacked for snapshotter %q: %v, %v", n, to.Snapshotter, unpacked, err)
		}
		if !reflect.DeepEqual(img.Labels(), map[string]string{LabelSource: "shellbox"}) {
			t.Errorf("%s record labels %v, want only %s=shellbox", n, img.Labels(), LabelSource)
		}
		spec, err := img.Spec(cctx)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Config.Labels[LabelImage] != "test" || spec.Config.User != "1000:1000" || spec.Config.WorkingDir != "/workspace" {
			t.Errorf("%s config %+v", n, spec.Config)
		}
	}

	// The same image again (deterministic: the same manifest) is up to
	// date: nothing imported, the image record is not touched.
	a, err := testArchive(ctx, tag, newProgress(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Manifest().Digest != target {
		t.Errorf("a second build has manifest %s, the first %s", a.Manifest().Digest, target)
	}
	if imported, err := a.ImportContainerd(ctx, to, false); err != nil || imported {
		t.Errorf("second import: imported %v, %v; want nothing imported", imported, err)
	}
	if img, err := c.GetImage(cctx, tag); err != nil || img.Metadata().UpdatedAt != updated || img.Target().Digest != target {
		t.Errorf("the up-to-date import changed the image (%v)", err)
	}

	// Another importer's label on the record (the Docker path of
	// setup-containerd.sh labels its own) is not this import: it is
	// imported again, and the stale label goes.
	stale := ctrimages.Image{Name: tag, Labels: map[string]string{LabelSource: "shellbox", "org.shellbox.docker-id": "sha256:x"}}
	if _, err := c.ImageService().Update(cctx, stale, "labels"); err != nil {
		t.Fatal(err)
	}
	if imported, err := a.ImportContainerd(ctx, to, false); err != nil || !imported {
		t.Errorf("import over a foreign label: imported %v, %v; want imported", imported, err)
	}
	if img, err := c.GetImage(cctx, tag); err != nil || !reflect.DeepEqual(img.Labels(), map[string]string{LabelSource: "shellbox"}) {
		t.Errorf("after an import over a foreign label: %v; want only %s=shellbox", err, LabelSource)
	}

	// Through a file (--output), then ImportContainerd of that file.
	removeImages()
	out := filepath.Join(t.TempDir(), "test-image.tar")
	if err := a.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	got, err := ImportContainerd(ctx, to, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ImportContainerd of the archive file took %s", time.Since(start).Round(time.Millisecond))
	if !reflect.DeepEqual(got, names) {
		t.Errorf("ImportContainerd named %v, want %v", got, names)
	}
	img, err := c.GetImage(cctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if img.Target().Digest != target {
		t.Errorf("from the file: manifest %s, want %s", img.Target().Digest, target)
	}
	if ok, err := img.IsUnpacked(cctx, to.Snapshotter); err != nil || !ok {
		t.Errorf("from the file: unpacked %v, %v", ok, err)
	}
}

// --output alone writes the archive and needs neither Docker nor containerd.
func TestBuildTestImageOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := BuildTestImage(ctx, TestOptions{Tag: "shellbox-test-output", Output: out}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files, _ := readArchive(t, f)
	var idx ocispec.Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil || len(idx.Manifests) != 2 ||
		idx.Manifests[0].Annotations[AnnotationImageName] != "shellbox-test-output:latest" {
		t.Fatalf("index.json %s: %v", files["index.json"], err)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(blob(t, files, idx.Manifests[0]), &man); err != nil {
		t.Fatal(err)
	}
	blob(t, files, man.Config)
	seen := layerHeaders(t, blob(t, files, man.Layers[0]))
	for _, want := range []struct {
		name     string
		uid, gid int
		mode     int64
	}{
		{"workspace/", 1000, 1000, -1}, {"home/sandbox/", 1000, 1000, -1}, {"etc/passwd", 0, 0, -1},
		{"usr/bin/bash", 0, 0, -1}, {"tmp/", 0, 0, 0o1777}, {"root/", 0, 0, 0o700},
	} {
		h := seen[want.name]
		if h == nil {
			t.Errorf("the test image has no %s", want.name)
			continue
		}
		if h.Uid != want.uid || h.Gid != want.gid || (want.mode >= 0 && h.Mode&0o7777 != want.mode) {
			t.Errorf("%s: %d:%d %o, want %d:%d %o", want.name, h.Uid, h.Gid, h.Mode&0o7777, want.uid, want.gid, want.mode)
		}
	}
	if h := seen["bin"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "usr/bin" {
		t.Errorf("bin: %+v, want a symlink to usr/bin", h)
	}
}

func TestImportContainerdErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sock := filepath.Join(t.TempDir(), "nothing.sock")
	_, err := ImportContainerd(ctx, Containerd{Address: sock}, filepath.Join(t.TempDir(), "missing.tar"))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing archive: %v", err)
	}
	a := newTestArchive(t, testRootfs(t), "shellbox-test-nowhere")
	_, err = a.ImportContainerd(ctx, Containerd{Address: sock}, false)
	if err == nil || !strings.Contains(err.Error(), sock) {
		t.Errorf("no daemon: %v, want an error naming %s", err, sock)
	}
	if _, err := a.ImportContainerd(ctx, Containerd{}, false); err == nil || !strings.Contains(err.Error(), "no containerd address") {
		t.Errorf("no address: %v", err)
	}
}
