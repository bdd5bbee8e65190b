package workspace

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/internal/iocount"
)

// Pack writes the tree under root to w as a workspace stream (see the
// package doc): what it keeps, skips and counts, how it walks. It reads
// what it packs as the calling thread may (the agent calls it as the
// sandbox user); a file it cannot read fails the pack, named. The stream
// is whole only when Pack returns nil: on an error, w has a prefix the
// reader refuses (no end of archive, no end of frame).
//
// Errors: past lim.MaxEntries or lim.MaxBytes (apparent sizes) is
// errdefs.ErrTooLarge; a file replaced or shrunk while read
// errdefs.ErrUnavailable (try again once the workspace is quiet); a
// missing root errdefs.ErrNotFound; ctx ending errdefs.ErrAborted; w's own
// errors are wrapped as they are.
func Pack(ctx context.Context, root string, w io.Writer, lim Limits) (Stats, error) {
	lim = withDefaults(lim)
	r, err := os.OpenRoot(root)
	if err != nil {
		return Stats{}, rootError("pack", root, err)
	}
	defer r.Close()
	cw := &iocount.Writer{W: w}
	zw, err := newEncoder(cw)
	if err != nil {
		return Stats{}, fmt.Errorf("workspace: pack %s: %w", root, err)
	}
	p := &packer{ctx: ctx, root: root, lim: lim, tw: tar.NewWriter(zw), links: map[fileID]string{}, buf: make([]byte, copyBuffer), xbuf: new(xattrBuf)}
	wk := &walker{ctx: ctx, what: "pack", root: root, maxNames: lim.MaxEntries, visit: p.visit}
	err = checkContext(ctx, "pack", root)
	if err == nil {
		err = wk.walk(r)
	}
	if err == nil {
		if err = p.tw.Close(); err != nil {
			err = p.writeError(err)
		}
	}
	if err != nil {
		// A failed pack must not end its frame: what w has is then a
		// stream cut short, which every reader refuses. The encoder
		// finishes into nothing.
		zw.Reset(io.Discard)
		zw.Close()
	} else if err = zw.Close(); err != nil {
		err = p.writeError(err)
	}
	p.st.Stream = cw.N
	return p.st, err
}

// fileID names an inode.
type fileID struct{ dev, ino uint64 }

// packer is one Pack in progress.
type packer struct {
	ctx   context.Context
	root  string
	lim   Limits
	tw    *tar.Writer
	st    Stats
	links map[fileID]string // the first name met of each file with more than one
	buf   []byte
	xbuf  *xattrBuf
}

func (p *packer) fail(rel string, err error) error {
	return fmt.Errorf("workspace: pack %s: %s: %w", p.root, shown(rel), err)
}

func (p *packer) writeError(err error) error {
	return fmt.Errorf("workspace: pack %s: write the stream: %w", p.root, err)
}

// visit packs one entry of the walk.
func (p *packer) visit(n *node) error {
	switch n.st.Mode & syscall.S_IFMT {
	case syscall.S_IFSOCK:
		p.st.Sockets++
		return nil
	case syscall.S_IFCHR, syscall.S_IFBLK:
		p.st.Devices++
		return nil
	}
	p.st.Entries++
	if p.st.Entries > p.lim.MaxEntries {
		return errdefs.Errorf(errdefs.ErrTooLarge, "workspace: pack %s: %s: more than %d entries (the limit)", p.root, shown(n.rel), p.lim.MaxEntries)
	}
	if len(n.rel) > PathMax {
		return errdefs.Errorf(errdefs.ErrInvalid, "workspace: pack %s: %s: a name of %d bytes, longer than PATH_MAX (%d)", p.root, shown(n.rel), len(n.rel), PathMax)
	}
	hdr := &tar.Header{Name: n.rel, Mode: int64(n.st.Mode & 0o7777), Uid: int(n.st.Uid), Gid: int(n.st.Gid),
		ModTime: time.Unix(n.st.Mtim.Sec, n.st.Mtim.Nsec), Format: tar.FormatPAX}
	switch n.st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, n.rel+"/"
		p.st.Dirs++
		return p.withXattrs(n, hdr, nil)
	case syscall.S_IFLNK:
		target, err := n.parent.Readlink(n.name)
		if err != nil {
			if errors.Is(err, syscall.EINVAL) {
				err = errChanged
			}
			return p.fail(n.rel, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		p.st.Symlinks++
		return p.header(hdr)
	case syscall.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		p.st.Fifos++
		return p.header(hdr)
	}
	// A regular file. A second name of an inode is a hard link to the
	// first.
	if n.st.Nlink > 1 {
		id := fileID{dev: n.st.Dev, ino: n.st.Ino}
		if first, ok := p.links[id]; ok {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			p.st.HardLinks++
			return p.header(hdr)
		}
		p.links[id] = n.rel
	}
	size := n.st.Size
	if !fits(p.st.Bytes, size, p.lim.MaxBytes) {
		return errdefs.Errorf(errdefs.ErrTooLarge, "workspace: pack %s: %s (%d bytes) takes the workspace past the limit of %d bytes (apparent sizes, holes included)",
			p.root, shown(n.rel), size, p.lim.MaxBytes)
	}
	p.st.Bytes += size
	p.st.Files++
	hdr.Typeflag, hdr.Size = tar.TypeReg, size
	return p.withXattrs(n, hdr, func(f *os.File) error { return p.data(f, n.rel, size) })
}

// withXattrs opens n, writes hdr with n's user. xattrs, then body's
// data, if any.
func (p *packer) withXattrs(n *node, hdr *tar.Header, body func(f *os.File) error) error {
	f, err := n.open()
	if err != nil {
		return p.fail(n.rel, err)
	}
	defer f.Close()
	xs, err := readXattrs(int(f.Fd()), p.xbuf)
	if err != nil {
		return p.fail(n.rel, fmt.Errorf("read its xattrs: %w", err))
	}
	for k, v := range xs {
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords[paxXattr+k] = v
	}
	p.st.Xattrs += len(xs)
	if err := p.header(hdr); err != nil {
		return err
	}
	if body == nil {
		return nil
	}
	return body(f)
}

func (p *packer) header(hdr *tar.Header) error {
	if err := p.tw.WriteHeader(hdr); err != nil {
		return p.writeError(err)
	}
	return nil
}

// zeros are what a hole is written as.
var zeros [copyBuffer]byte

// data writes the first size bytes of f: its data as read, its holes as
// zeros never read (lseek SEEK_DATA, SEEK_HOLE; a filesystem without them
// is all data). A file that ends before size shrank meanwhile; one that
// grew is counted, its first size bytes packed.
func (p *packer) data(f *os.File, rel string, size int64) error {
	fd := int(f.Fd())
	seekable := true
	for off := int64(0); off < size; {
		data, hole := off, size
		if seekable {
			d, err := unix.Seek(fd, off, unix.SEEK_DATA)
			switch {
			case errors.Is(err, unix.ENXIO): // nothing but a hole from off on
				d = size
			case err != nil: // no SEEK_DATA here
				seekable, d = false, off
			}
			data = min(d, size)
			if seekable && data < size {
				if h, err := unix.Seek(fd, data, unix.SEEK_HOLE); err == nil {
					hole = min(h, size)
				}
			}
		}
		if err := checkContext(p.ctx, "pack", p.root); err != nil {
			return err
		}
		for off < data {
			n := min(data-off, int64(len(zeros)))
			if _, err := p.tw.Write(zeros[:n]); err != nil {
				return p.writeError(err)
			}
			off += n
			p.st.Holes += n
			// A hole is up to MaxBytes of zeros that cost no read: the
			// context is checked as often as in the data.
			if err := checkContext(p.ctx, "pack", p.root); err != nil {
				return err
			}
		}
		for off < hole {
			n := min(hole-off, int64(len(p.buf)))
			got, err := f.ReadAt(p.buf[:n], off)
			if got < int(n) {
				if err == nil || errors.Is(err, io.EOF) {
					return p.shrank(rel, size, off+int64(got))
				}
				return p.fail(rel, err)
			}
			if _, err := p.tw.Write(p.buf[:n]); err != nil {
				return p.writeError(err)
			}
			off += n
			if err := checkContext(p.ctx, "pack", p.root); err != nil {
				return err
			}
		}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return p.fail(rel, err)
	}
	switch {
	case st.Size < size:
		// Read as holes past its new end: the zeros packed are not its.
		return p.shrank(rel, size, st.Size)
	case st.Size > size:
		p.st.Grown++
	}
	return nil
}

func (p *packer) shrank(rel string, from, to int64) error {
	return errdefs.Errorf(errdefs.ErrUnavailable, "workspace: pack %s: %s shrank while being read (%d bytes, then %d); try again once the workspace is quiet",
		p.root, shown(rel), from, to)
}
