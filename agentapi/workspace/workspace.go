package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/klauspost/compress/zstd"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/internal/clip"
)

// Limits cap one Pack, Unpack, Export or Import; zero fields take the
// defaults. The type is the wire's, so the agent's endpoints and their
// client share it.
type Limits = agentapi.WorkspaceLimits

// Stats say what a stream carried, and what it could not.
type Stats = agentapi.WorkspaceStats

// Defaults of the limits, for a caller that sets none (the server sets
// the session's disk size).
const (
	DefaultMaxBytes   = 16 << 30
	DefaultMaxEntries = 1_000_000
)

// Bounds of the tree's shape, whatever the limits. A stream deeper or with
// longer names than these is refused on both sides, so that what Pack
// writes Unpack takes.
const (
	// MaxDepth bounds the levels below the root: each holds a descriptor
	// or two while it is walked.
	MaxDepth = 256
	// PathMax bounds an entry's name and a link's target (Linux's
	// PATH_MAX), NameMax one component.
	PathMax = 4096
	NameMax = 255
)

const (
	// copyBuffer is the size of a stream's one copy buffer.
	copyBuffer = 256 << 10
	// holeBlock is the unit Unpack punches holes by: a block of zeros
	// this long, at this alignment, is skipped.
	holeBlock = 4096
	// window is zstd's window when packing (every stream Pack wrote);
	// maxWindow the largest a stream may ask for when unpacked, the
	// decoder's memory twice over (its history: newDecoder).
	window    = 8 << 20
	maxWindow = 16 << 20
	// xattrMax bounds an xattr's value (Linux's XATTR_SIZE_MAX) and the
	// list of a file's xattr names (XATTR_LIST_MAX).
	xattrMax = 64 << 10
)

func withDefaults(l Limits) Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	return l
}

// fits reports whether size more bytes after used stay within max
// (0 <= used <= max). It compares with the room left: used+size
// overflows for a size near 2^63 (a sparse file on tmpfs, a crafted
// header), and a negative sum would pass.
func fits(used, size, max int64) bool {
	return size <= max-used
}

// newEncoder is the stream's compressor: one frame with its checksum, an
// 8 MiB window, two blocks in flight (the pack's reading and the
// compression overlap; more buys nothing on the agent's share of CPU).
func newEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(window),
		zstd.WithEncoderConcurrency(2), zstd.WithEncoderCRC(true))
}

// newDecoder is the stream's decompressor: in the caller's goroutine, the
// window bounded, the checksum checked. Not in low-memory mode: that keeps
// the window and 1 MiB after it, so every MiB decoded moves the whole
// window down (8 MiB copied per MiB: an eighth of a restore's CPU); out of
// it the history is twice the window, moved once per window, so at most
// twice maxWindow.
func newDecoder(r io.Reader) (*zstd.Decoder, error) {
	return zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow),
		zstd.WithDecoderMaxMemory(maxWindow), zstd.WithDecoderLowmem(false))
}

// aborted is the error of a walk whose context ended.
func aborted(what, root string, err error) error {
	return errdefs.Errorf(errdefs.ErrAborted, "workspace: %s %s aborted: %w", what, root, err)
}

// noSpace reports a full filesystem.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// rootError classes a failure to open the root a walk starts from.
func rootError(what, root string, err error) error {
	if errors.Is(err, syscall.ENOENT) {
		return errdefs.Errorf(errdefs.ErrNotFound, "workspace: %s %s: no such directory", what, root)
	}
	if errors.Is(err, syscall.ENOTDIR) {
		return errdefs.Errorf(errdefs.ErrInvalid, "workspace: %s %s: not a directory", what, root)
	}
	return fmt.Errorf("workspace: %s %s: %w", what, root, err)
}

// shown shortens a name for a message (on a rune boundary).
func shown(name string) string { return clip.To(name, 200) }

// countReader counts what passes, and keeps the first error of its reader
// other than io.EOF: the source's, as apart from the decoder's.
type countReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// checkContext fails once ctx is done.
func checkContext(ctx context.Context, what, root string) error {
	if err := ctx.Err(); err != nil {
		return aborted(what, root, err)
	}
	return nil
}
