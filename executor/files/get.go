package files

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"syscall"

	"github.com/shellbox/shellbox/executor"
)

// GetOptions say what a download is.
type GetOptions struct {
	// Tar: a tar of the path (a directory and everything below it, or a
	// single file), its entries named after the path's last element
	// ("src/", "src/main.go"). Otherwise the bytes of the regular file at
	// the path.
	Tar bool
	Limits
}

// Get streams p to the writer open returns. open is called once p was
// found and checked against the caps, with its Info (for a tar, Size is the
// total of the files' bytes); an error before open is the request's (the
// caller can still answer it), one after it a broken stream.
//
// Only regular files, directories and symlinks (as links, never followed
// below p) are in a tar; other entries (sockets, FIFOs, devices) are left
// out. A file that changes size while it is read breaks the stream rather
// than produce a tar whose header lies.
//
// Errors before open: p outside the root or through a symlink that leads
// out, a directory asked for as a file, a file that is not regular are
// executor.ErrInvalid; a missing p executor.ErrNotFound; over the caps
// ErrTooLarge.
func (t Tree) Get(ctx context.Context, p string, o GetOptions, open func(Info) (io.Writer, error)) error {
	abs, rel, err := t.resolve(p)
	if err != nil {
		return err
	}
	lim := o.Limits.withDefaults()
	return t.inRoot(func(r *root) error {
		// O_NONBLOCK: opening a FIFO to look at it must not wait for a
		// writer.
		var f *os.File
		if lim.NoSymlinks {
			f, err = r.openNoFollow(rel, abs, os.O_RDONLY|syscall.O_NONBLOCK)
		} else if f, err = r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0); err != nil {
			err = t.pathError(abs, err)
		}
		if err != nil {
			return err
		}
		if err := r.check(f, abs); err != nil {
			return err
		}
		defer f.Close()
		// Stat of the open file: the file read, whatever the path names
		// by now.
		fi, err := f.Stat()
		if err != nil {
			return t.pathError(abs, err)
		}
		info := infoOf(abs, fi)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && lim.OneLink && fi.Mode().IsRegular() && st.Nlink > 1 {
			return executor.Errorf(executor.ErrInvalid, "%s has %d links (hard links: other names of the same file): the tenant's files rules decide reads by path and cannot check the other names, so a file with more than one is not read", abs, st.Nlink)
		}
		switch {
		case fi.IsDir() && !o.Tar:
			return executor.Errorf(executor.ErrInvalid, "%s is a directory, not a file (ask for a tar: Accept: application/x-tar)", abs)
		case !fi.IsDir() && !fi.Mode().IsRegular():
			return executor.Errorf(executor.ErrInvalid, "%s is not a regular file (%s)", abs, fi.Mode().Type())
		case !fi.IsDir() && fi.Size() > lim.MaxBytes:
			return executor.Errorf(ErrTooLarge, "download of %s (%d bytes) exceeds the limit of %d bytes (policy files.maxBytes)", abs, fi.Size(), lim.MaxBytes)
		}
		if !o.Tar {
			w, err := open(info)
			if err != nil {
				return err
			}
			return copyFile(w, f, fi.Size(), abs)
		}
		base := path.Base(abs)
		if base == "/" {
			base = "root"
		}
		if !fi.IsDir() {
			w, err := open(info)
			if err != nil {
				return err
			}
			tw := tar.NewWriter(w)
			if err := writeFile(tw, base, f, fi, abs); err != nil {
				return err
			}
			return tw.Close()
		}
		// The directory just checked, not its path again.
		dr, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
		if err != nil {
			return t.pathError(abs, err)
		}
		defer dr.Close()
		f.Close()
		total, err := measure(ctx, dr, abs, lim)
		if err != nil {
			return err
		}
		info.Size = total
		w, err := open(info)
		if err != nil {
			return err
		}
		return writeTree(ctx, w, dr, base, abs, lim)
	})
}

// copyFile copies exactly size bytes of f to w.
func copyFile(w io.Writer, f *os.File, size int64, abs string) error {
	n, err := io.CopyBuffer(w, io.LimitReader(f, size), make([]byte, copyBuffer))
	if err != nil {
		return fmt.Errorf("download of %s: %w", abs, err)
	}
	if n != size {
		return fmt.Errorf("download of %s: the file shrank from %d to %d bytes while it was read", abs, size, n)
	}
	return nil
}

// measure walks the tree below dr, counting entries and bytes against the
// caps before anything is sent.
func measure(ctx context.Context, dr *os.Root, abs string, lim Limits) (int64, error) {
	var total int64
	entries := 0
	err := fs.WalkDir(dr.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		entries++
		if entries > lim.MaxEntries {
			return executor.Errorf(ErrTooLarge, "download of %s: more than %d entries (policy files.maxEntries)", abs, lim.MaxEntries)
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
			if total > lim.MaxBytes {
				return executor.Errorf(ErrTooLarge, "download of %s: more than %d bytes (policy files.maxBytes)", abs, lim.MaxBytes)
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return 0, err
		}
		if ctx.Err() != nil {
			return 0, executor.Aborted()
		}
		return 0, fmt.Errorf("download of %s: %w", abs, err)
	}
	return total, nil
}

// writeTree writes the tree below dr as a tar whose entries start with
// base.
func writeTree(ctx context.Context, w io.Writer, dr *os.Root, base, abs string, lim Limits) error {
	d, err := dr.Open(".")
	if err != nil {
		return fmt.Errorf("download of %s: %w", abs, err)
	}
	top, err := fdPath(d)
	d.Close()
	if err != nil {
		return fmt.Errorf("download of %s: %w", abs, err)
	}
	tw := tar.NewWriter(w)
	var total int64
	err = fs.WalkDir(dr.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := path.Join(base, p)
		switch {
		case d.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return tw.WriteHeader(header(name+"/", tar.TypeDir, fi))
		case d.Type()&fs.ModeSymlink != 0:
			fi, err := d.Info()
			if err != nil {
				return err
			}
			target, err := dr.Readlink(p)
			if err != nil {
				return err
			}
			h := header(name, tar.TypeSymlink, fi)
			h.Linkname = target
			return tw.WriteHeader(h)
		case d.Type().IsRegular():
			// O_NOFOLLOW: a symlink swapped in since the walk saw a file
			// is not followed.
			f, err := dr.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			// A directory on the way swapped for a symlink out since the
			// walk listed it: os.Root refuses it, except under gVisor.
			if real, err := fdPath(f); err != nil || !executor.Within(real, top) {
				return fmt.Errorf("%s left the directory while it was read", path.Join(abs, p))
			}
			fi, err := f.Stat()
			if err != nil || !fi.Mode().IsRegular() {
				return err
			}
			total += fi.Size()
			if total > lim.MaxBytes {
				return fmt.Errorf("download of %s: more than %d bytes (policy files.maxBytes): the files grew while they were sent", abs, lim.MaxBytes)
			}
			return writeFile(tw, name, f, fi, path.Join(abs, p))
		}
		return nil // sockets, FIFOs, devices: not in a tar
	})
	if err != nil {
		return fmt.Errorf("download of %s: %w", abs, err)
	}
	return tw.Close()
}

func header(name string, typ byte, fi fs.FileInfo) *tar.Header {
	h := &tar.Header{Typeflag: typ, Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	return h
}

// writeFile writes one regular file's entry.
func writeFile(tw *tar.Writer, name string, f *os.File, fi fs.FileInfo, abs string) error {
	h := header(name, tar.TypeReg, fi)
	h.Size = fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	return copyFile(tw, f, fi.Size(), abs)
}

// Open is Get for a caller that reads: it returns what p is and a body to
// read and Close (ctx must last until then). Get runs in a goroutine that
// writes into a pipe and ends when the body is read to its end or closed.
// A stream that breaks off fails the body's Read.
func (t Tree) Open(ctx context.Context, p string, o GetOptions) (Info, io.ReadCloser, error) {
	pr, pw := io.Pipe()
	infos := make(chan Info, 1)
	errs := make(chan error, 1)
	go func() {
		err := t.Get(ctx, p, o, func(info Info) (io.Writer, error) {
			infos <- info
			return pw, nil
		})
		if err == nil {
			pw.Close()
		} else {
			pw.CloseWithError(err)
		}
		errs <- err
	}()
	select {
	case info := <-infos:
		return info, pr, nil
	case err := <-errs:
		// open may have been called too (an empty file, or a stream that
		// broke at once): then the body tells.
		select {
		case info := <-infos:
			return info, pr, nil
		default:
		}
		return Info{}, nil, err
	}
}
