package images

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/platforms"
	distref "github.com/distribution/reference"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/shellbox/shellbox/internal/iocount"
	"golang.org/x/sys/unix"
)

// AnnotationImageName is the index.json annotation containerd (client.Import,
// `ctr images import`) and Docker's containerd image store name an imported
// image after; org.opencontainers.image.ref.name carries only the tag, as
// the OCI layout's grammar allows no ':' there.
const AnnotationImageName = "io.containerd.image.name"

// DefaultPath is the PATH of every image built here.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ImageSpec says what an image built from a root file system directory is.
// The zero value of each field but Name is the setting `docker import` gets
// from this package: the standard PATH, CMD ["/bin/bash"], USER 1000:1000,
// WORKDIR /workspace, the host's platform.
type ImageSpec struct {
	// Name is the image's name, e.g. "shellbox-test:latest" (":latest" is
	// added when there is no tag). index.json names the manifest twice, as
	// given and normalized ("docker.io/library/shellbox-test:latest"), so it
	// is found under either name whatever the importer.
	Name       string
	Labels     map[string]string
	Env        []string // default [DefaultPath]
	Cmd        []string // default ["/bin/bash"]
	User       string   // default "1000:1000"
	WorkingDir string   // default "/workspace"
	// Created is the image's creation time; zero is the Unix epoch, which
	// keeps the archive deterministic.
	Created time.Time
	// Comment goes into the image's history.
	Comment string
	// Platform of the image; zero is the host's.
	Platform ocispec.Platform

	// Owner, when set, gives the owner of each entry of the layer (its
	// slash-separated path relative to the root, without "./") instead of
	// the file system's: a rootfs built without root can still hold
	// root-owned files.
	Owner func(name string) (uid, gid int)
	// MTime, when not nil, is the modification time of every entry
	// (deterministic layers); nil keeps the files' own.
	MTime *time.Time
	// TempDir holds the layer while the archive exists; default os.TempDir().
	TempDir string
}

// Archive is an OCI image built from a root file system directory: one
// gzipped layer, held in a temporary file, and its config, manifest and
// index. WriteTo streams it as an OCI image layout tar (oci-layout,
// index.json, blobs/sha256/...), which `ctr images import`, containerd's
// client.Import and ImportContainerd read. Close removes the layer file.
type Archive struct {
	layerPath                      string
	layer, config, manifest        ocispec.Descriptor
	diffID                         digest.Digest
	configJSON, manifestJSON, idxJ []byte
	names                          []string
	mtime                          time.Time
	cleanup                        func() error // run by Close, after the layer is removed
}

// NewArchive writes the layer of rootfs (sorted entries, numeric owners,
// hard links kept, security.capability xattrs kept, sockets left out) to a
// temporary file, hashing it as it goes, so memory stays bounded whatever
// the size of the tree, and builds the image's config, manifest and index.
func NewArchive(ctx context.Context, rootfs string, spec ImageSpec) (_ *Archive, err error) {
	names, tag, err := imageNames(spec.Name)
	if err != nil {
		return nil, err
	}
	spec.defaults()
	if fi, err := os.Stat(rootfs); err != nil {
		return nil, fmt.Errorf("image archive: rootfs: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("image archive: rootfs %s is not a directory", rootfs)
	}

	f, err := os.CreateTemp(spec.TempDir, "shellbox-layer-*.tar.gz")
	if err != nil {
		return nil, fmt.Errorf("image archive: %w", err)
	}
	a := &Archive{layerPath: f.Name(), names: names, mtime: spec.Created}
	defer func() {
		if err != nil {
			f.Close()
			a.Close()
		}
	}()

	// file <- bufio <- (sha256 of the blob) <- gzip <- (sha256 of the tar) <- tar
	blobHash, diffHash := sha256.New(), sha256.New()
	buf := bufio.NewWriterSize(f, 1<<20)
	counted := &iocount.Writer{W: io.MultiWriter(buf, blobHash)}
	gz, err := gzip.NewWriterLevel(counted, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(io.MultiWriter(gz, diffHash))
	if err := writeLayer(ctx, tw, rootfs, spec); err != nil {
		return nil, fmt.Errorf("image archive: layer of %s: %w", rootfs, err)
	}
	for _, step := range []func() error{tw.Close, gz.Close, buf.Flush, f.Sync, f.Close} {
		if err := step(); err != nil {
			return nil, fmt.Errorf("image archive: layer: %w", err)
		}
	}
	a.diffID = digest.NewDigest(digest.SHA256, diffHash)
	a.layer = ocispec.Descriptor{
		MediaType: ocispec.MediaTypeImageLayerGzip,
		Digest:    digest.NewDigest(digest.SHA256, blobHash),
		Size:      counted.N,
	}

	created := spec.Created.UTC()
	img := ocispec.Image{
		Created:  &created,
		Platform: spec.Platform,
		Config: ocispec.ImageConfig{
			User:       spec.User,
			Env:        spec.Env,
			Cmd:        spec.Cmd,
			WorkingDir: spec.WorkingDir,
			Labels:     spec.Labels,
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{a.diffID}},
		History: []ocispec.History{{
			Created:   &created,
			CreatedBy: "shellbox image build (rootfs directory)",
			Comment:   spec.Comment,
		}},
	}
	if a.configJSON, err = json.Marshal(img); err != nil {
		return nil, err
	}
	a.config = blobDescriptor(ocispec.MediaTypeImageConfig, a.configJSON)

	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    a.config,
		Layers:    []ocispec.Descriptor{a.layer},
	}
	if a.manifestJSON, err = json.Marshal(m); err != nil {
		return nil, err
	}
	a.manifest = blobDescriptor(ocispec.MediaTypeImageManifest, a.manifestJSON)
	a.manifest.Platform = &spec.Platform

	idx := ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
	}
	for _, name := range names {
		d := a.manifest
		d.Annotations = map[string]string{
			AnnotationImageName:       name,
			ocispec.AnnotationRefName: tag,
		}
		idx.Manifests = append(idx.Manifests, d)
	}
	if a.idxJ, err = json.Marshal(idx); err != nil {
		return nil, err
	}
	return a, nil
}

// Names are the names index.json gives the image.
func (a *Archive) Names() []string { return append([]string(nil), a.names...) }

// Manifest is the descriptor of the image's manifest.
func (a *Archive) Manifest() ocispec.Descriptor { return a.manifest }

// Layer is the descriptor of the image's one (gzipped) layer.
func (a *Archive) Layer() ocispec.Descriptor { return a.layer }

// DiffID is the digest of the uncompressed layer.
func (a *Archive) DiffID() digest.Digest { return a.diffID }

// Close removes the layer's temporary file.
func (a *Archive) Close() error {
	var errs []error
	if a.layerPath != "" {
		if err := os.Remove(a.layerPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		a.layerPath = ""
	}
	if a.cleanup != nil {
		errs = append(errs, a.cleanup())
		a.cleanup = nil
	}
	return errors.Join(errs...)
}

// WriteTo writes the OCI image layout tar to w: oci-layout, the blobs
// (layer, config, manifest), index.json. It can be called more than once.
func (a *Archive) WriteTo(w io.Writer) (int64, error) {
	if a.layerPath == "" {
		return 0, errors.New("image archive: closed")
	}
	cw := &iocount.Writer{W: w}
	tw := tar.NewWriter(cw)
	layout, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	hdr := func(name string, size int64, dir bool) *tar.Header {
		h := &tar.Header{Name: name, Size: size, Mode: 0o644, ModTime: a.mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if dir {
			h.Mode, h.Typeflag = 0o755, tar.TypeDir
		}
		return h
	}
	writeBytes := func(name string, data []byte) error {
		if err := tw.WriteHeader(hdr(name, int64(len(data)), false)); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	err := func() error {
		if err := writeBytes(ocispec.ImageLayoutFile, layout); err != nil {
			return err
		}
		for _, d := range []string{ocispec.ImageBlobsDir + "/", ocispec.ImageBlobsDir + "/sha256/"} {
			if err := tw.WriteHeader(hdr(d, 0, true)); err != nil {
				return err
			}
		}
		f, err := os.Open(a.layerPath)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := tw.WriteHeader(hdr(blobPath(a.layer.Digest), a.layer.Size, false)); err != nil {
			return err
		}
		if n, err := io.Copy(tw, f); err != nil {
			return err
		} else if n != a.layer.Size {
			return fmt.Errorf("layer file %s changed: %d bytes, want %d", a.layerPath, n, a.layer.Size)
		}
		if err := writeBytes(blobPath(a.config.Digest), a.configJSON); err != nil {
			return err
		}
		if err := writeBytes(blobPath(a.manifest.Digest), a.manifestJSON); err != nil {
			return err
		}
		if err := writeBytes(ocispec.ImageIndexFile, a.idxJ); err != nil {
			return err
		}
		return tw.Close()
	}()
	if err != nil {
		return cw.N, fmt.Errorf("image archive: %w", err)
	}
	return cw.N, nil
}

// WriteFile writes the archive to path (through a temporary file in the
// same directory, renamed when complete).
func (a *Archive) WriteFile(path string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	buf := bufio.NewWriterSize(tmp, 1<<20)
	if _, err := a.WriteTo(buf); err != nil {
		return err
	}
	if err := buf.Flush(); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	return nil
}

func (s *ImageSpec) defaults() {
	if len(s.Env) == 0 {
		s.Env = []string{DefaultPath}
	}
	if len(s.Cmd) == 0 {
		s.Cmd = []string{"/bin/bash"}
	}
	if s.User == "" {
		s.User = fmt.Sprintf("%d:%d", SandboxUID, SandboxUID)
	}
	if s.WorkingDir == "" {
		s.WorkingDir = "/workspace"
	}
	if s.Created.IsZero() {
		s.Created = time.Unix(0, 0)
	}
	if s.Platform.OS == "" {
		s.Platform = platforms.DefaultSpec()
	}
	if s.TempDir == "" {
		s.TempDir = os.TempDir()
	}
}

// imageNames returns name with a default tag, its normalized form when that
// differs, and the tag.
func imageNames(name string) ([]string, string, error) {
	if name == "" {
		return nil, "", errors.New("image archive: no image name")
	}
	ref, err := distref.ParseNormalizedNamed(name)
	if err != nil {
		return nil, "", fmt.Errorf("image archive: image name %q: %w", name, err)
	}
	ref = distref.TagNameOnly(ref)
	tagged, ok := ref.(distref.Tagged)
	if !ok {
		return nil, "", fmt.Errorf("image archive: image name %q: a tag is needed, not a digest", name)
	}
	given := name
	if distref.FamiliarString(ref) != name && ref.String() != name {
		// No tag was given.
		given = name + ":" + tagged.Tag()
	}
	names := []string{given}
	if full := ref.String(); full != given {
		names = append(names, full)
	}
	return names, tagged.Tag(), nil
}

// DebianPlatform is the OCI platform of a Debian architecture name
// (debootstrap --arch); the host's for "".
func DebianPlatform(arch string) (ocispec.Platform, error) {
	if arch == "" {
		return platforms.DefaultSpec(), nil
	}
	p := ocispec.Platform{OS: "linux"}
	switch arch {
	case "amd64", "arm64", "ppc64le", "s390x", "riscv64", "mips64le":
		p.Architecture = arch
	case "i386":
		p.Architecture = "386"
	case "armhf":
		p.Architecture, p.Variant = "arm", "v7"
	case "armel":
		p.Architecture, p.Variant = "arm", "v5"
	default:
		return p, fmt.Errorf("unknown Debian architecture %q", arch)
	}
	return platforms.Normalize(p), nil
}

func blobDescriptor(mediaType string, data []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
}

func blobPath(d digest.Digest) string {
	return ocispec.ImageBlobsDir + "/" + d.Algorithm().String() + "/" + d.Encoded()
}

// writeLayer writes the tree under root to tw in name order.
func writeLayer(ctx context.Context, tw *tar.Writer, root string, spec ImageSpec) error {
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{}
	copyBuf := make([]byte, 256<<10)
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		name := filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil // tar has no sockets
		}
		var target string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(path); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return err
		}
		h.Name = name
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if spec.MTime != nil {
			h.ModTime = *spec.MTime
		} else {
			h.ModTime = h.ModTime.Truncate(time.Second)
		}
		if spec.Owner != nil {
			h.Uid, h.Gid = spec.Owner(name)
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st != nil && fi.Mode().IsRegular() && st.Nlink > 1 {
			key := inode{uint64(st.Dev), uint64(st.Ino)}
			if first, ok := links[key]; ok {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				links[key] = name
			}
		}
		if cap, err := lgetxattr(path, "security.capability"); err == nil && len(cap) > 0 {
			h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": string(cap)}
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if h.Typeflag != tar.TypeReg || h.Size == 0 {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.CopyBuffer(tw, io.LimitReader(f, h.Size), copyBuf)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if n != h.Size {
			return fmt.Errorf("%s: changed while archived (%d bytes, want %d)", name, n, h.Size)
		}
		return nil
	})
}

// lgetxattr reads one extended attribute of path (not following a
// symlink); a missing attribute or a file system without them is nil.
func lgetxattr(path, attr string) ([]byte, error) {
	buf := make([]byte, 128)
	for {
		n, err := unix.Lgetxattr(path, attr, buf)
		switch {
		case errors.Is(err, unix.ERANGE) && len(buf) < 64<<10:
			buf = make([]byte, len(buf)*4)
			continue
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
			return nil, nil
		case err != nil:
			return nil, err
		}
		return buf[:n], nil
	}
}
