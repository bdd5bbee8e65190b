package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
)

// LabelSource is set on the image records (not the image config) this
// package imports into containerd, with the value "shellbox". Import
// replaces a record's labels: another importer's (such as the
// org.shellbox.docker-id of .ci/setup-containerd.sh's Docker path) would
// otherwise survive on a record that now names a different manifest.
const LabelSource = "org.shellbox.image.source"

var importLabels = map[string]string{LabelSource: "shellbox"}

// Containerd is the containerd an image is imported into.
type Containerd struct {
	Address     string // its socket, e.g. /run/containerd/containerd.sock
	Namespace   string // default "shellbox"
	Snapshotter string // the snapshotter images are unpacked for; "" = containerd's default
}

func (c Containerd) withDefaults() Containerd {
	if c.Namespace == "" {
		c.Namespace = "shellbox"
	}
	return c
}

// ImportContainerd imports the image archive at archivePath (an OCI image
// layout tar as Archive writes, or a `docker save` tar) into containerd and
// unpacks every image it names for to.Snapshotter, so the first sandbox
// needs no unpack. It returns the names of the images created or updated.
func ImportContainerd(ctx context.Context, to Containerd, archivePath string) ([]string, error) {
	f, err := os.Open(archivePath)
	if err != nil {
		return nil, fmt.Errorf("containerd import: %w", err)
	}
	defer f.Close()
	to = to.withDefaults()
	c, ctx, err := dialContainerd(ctx, to)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return importUnpack(ctx, c, to, f)
}

// ImportContainerd streams the archive into containerd and unpacks it, as
// the function ImportContainerd does, unless containerd already has every
// name of the archive pointing at this manifest, unpacked (unless force).
// It reports whether it imported.
func (a *Archive) ImportContainerd(ctx context.Context, to Containerd, force bool) (bool, error) {
	to = to.withDefaults()
	c, ctx, err := dialContainerd(ctx, to)
	if err != nil {
		return false, err
	}
	defer c.Close()
	if !force {
		current, err := a.inContainerd(ctx, c, to)
		if err != nil {
			return false, err
		}
		if current {
			return false, nil
		}
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		_, err := a.WriteTo(pw)
		pw.CloseWithError(err)
		written <- err
	}()
	_, err = importUnpack(ctx, c, to, pr)
	if err == nil {
		// The importer stops at the tar's end marker: let the writer finish.
		_, _ = io.Copy(io.Discard, pr)
	}
	pr.CloseWithError(errors.New("import ended")) // unblocks the writer if the import stopped reading
	if werr := <-written; err == nil && werr != nil {
		err = werr
	}
	return err == nil, err
}

// inContainerd reports whether every name of a is the archive's manifest
// in containerd, unpacked for to.Snapshotter, with exactly the labels an
// import sets.
func (a *Archive) inContainerd(ctx context.Context, c *client.Client, to Containerd) (bool, error) {
	for _, name := range a.names {
		img, err := c.GetImage(ctx, name)
		if errdefs.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("containerd import: image %s: %w", name, err)
		}
		if img.Target().Digest != a.manifest.Digest || !maps.Equal(img.Labels(), importLabels) {
			return false, nil
		}
		unpacked, err := img.IsUnpacked(ctx, to.Snapshotter)
		if err != nil {
			return false, fmt.Errorf("containerd import: image %s: %w", name, err)
		}
		if !unpacked {
			return false, nil
		}
	}
	return true, nil
}

// Ping checks that containerd answers at to.Address, so a build can fail
// before it spends minutes on a rootfs it cannot deliver.
func (to Containerd) Ping(ctx context.Context) error {
	c, _, err := dialContainerd(ctx, to.withDefaults())
	if err != nil {
		return err
	}
	return c.Close()
}

func dialContainerd(ctx context.Context, to Containerd) (*client.Client, context.Context, error) {
	if to.Address == "" {
		return nil, nil, errors.New("containerd import: no containerd address")
	}
	if strings.HasPrefix(to.Address, "/") {
		// A missing socket fails now, not after the dial timeout.
		if _, err := os.Stat(to.Address); err != nil {
			return nil, nil, fmt.Errorf("containerd import: containerd at %s: %w (is it running? .ci/setup-containerd.sh starts one)", to.Address, err)
		}
	}
	c, err := client.New(to.Address, client.WithDefaultNamespace(to.Namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("containerd import: containerd at %s: %w", to.Address, err)
	}
	ctx = namespaces.WithNamespace(ctx, to.Namespace)
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Version(vctx); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("containerd import: containerd at %s does not answer: %w", to.Address, err)
	}
	return c, ctx, nil
}

// importUnpack imports the archive r and unpacks the images it names.
func importUnpack(ctx context.Context, c *client.Client, to Containerd, r io.Reader) ([]string, error) {
	imgs, err := c.Import(ctx, r, client.WithImageLabels(importLabels))
	if err != nil {
		return nil, fmt.Errorf("containerd import into namespace %s at %s: %w", to.Namespace, to.Address, err)
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("containerd import: the archive names no image (index.json has no %s annotation)", AnnotationImageName)
	}
	var names []string
	unpacked := map[string]bool{}
	for _, img := range imgs {
		names = append(names, img.Name)
		if unpacked[img.Target.Digest.String()] {
			continue
		}
		if err := client.NewImage(c, img).Unpack(ctx, to.Snapshotter); err != nil {
			return names, fmt.Errorf("containerd import: unpacking %s for snapshotter %q: %w", img.Name, to.Snapshotter, err)
		}
		unpacked[img.Target.Digest.String()] = true
	}
	return names, nil
}
