package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
)

// putReader is what a Put reads its stream through: it hashes and counts
// the bytes, stops at ctx's end, and remembers the stream's own error so Put
// can return it as it is (a store client may wrap or replace it).
type putReader struct {
	ctx  context.Context
	r    io.Reader
	h    hash.Hash
	n    int64
	rerr error // the stream's error, not io.EOF
}

func newPutReader(ctx context.Context, r io.Reader) *putReader {
	return &putReader{ctx: ctx, r: r, h: sha256.New()}
}

func (p *putReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	p.h.Write(b[:n])
	p.n += int64(n)
	if err != nil && err != io.EOF && p.rerr == nil {
		p.rerr = err
	}
	return n, err
}

// sum is the sha256 of what was read, hex.
func (p *putReader) sum() string { return hex.EncodeToString(p.h.Sum(nil)) }

// failure returns why a Put failed, given the store's error err: ctx's end
// or the stream's error when either came first (the store's error is then
// their consequence), else err; nil when err is nil.
func (p *putReader) failure(err error) error {
	switch {
	case err == nil:
		return nil
	case p.ctx.Err() != nil:
		return p.ctx.Err()
	case p.rerr != nil:
		return fmt.Errorf("reading the stream: %w", p.rerr)
	}
	return err
}

// verifier is Get's reader: it passes the stored bytes through, hashing and
// counting them, and ends with io.EOF only when they are the snapshot Put
// recorded. Errors are sticky.
type verifier struct {
	ctx  context.Context
	rc   io.ReadCloser
	info Info
	// readErr classifies an error of rc (the store's own terms).
	readErr func(error) error
	h       hash.Hash
	n       int64
	err     error
}

func newVerifier(ctx context.Context, rc io.ReadCloser, info Info, readErr func(error) error) *verifier {
	return &verifier{ctx: ctx, rc: rc, info: info, readErr: readErr, h: sha256.New()}
}

func (v *verifier) Read(b []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if err := v.ctx.Err(); err != nil {
		v.err = fmt.Errorf("snapshot %s: reading: %w", v.name(), err)
		return 0, v.err
	}
	n, err := v.rc.Read(b)
	v.n += int64(n)
	if v.n > v.info.Size {
		// Never hand over more than was stored: the extra bytes are not the
		// snapshot's.
		n -= int(v.n - v.info.Size)
		v.h.Write(b[:n])
		v.err = fmt.Errorf("snapshot %s: %w: longer than the %d bytes recorded", v.name(), ErrCorrupt, v.info.Size)
		return n, v.err
	}
	v.h.Write(b[:n])
	switch {
	case err == io.EOF:
		v.err = v.check()
		return n, v.err
	case err != nil:
		if v.ctx.Err() != nil {
			err = v.ctx.Err()
		}
		v.err = fmt.Errorf("snapshot %s: reading: %w", v.name(), v.readErr(err))
		return n, v.err
	}
	return n, nil
}

// check compares what was read, all of it, with the record.
func (v *verifier) check() error {
	if v.n < v.info.Size {
		return fmt.Errorf("snapshot %s: %w: truncated: %d of %d bytes", v.name(), ErrCorrupt, v.n, v.info.Size)
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.info.SHA256 {
		return fmt.Errorf("snapshot %s: %w: sha256 %s, recorded %s", v.name(), ErrCorrupt, got, v.info.SHA256)
	}
	return io.EOF
}

func (v *verifier) Close() error { return v.rc.Close() }

func (v *verifier) name() string { return name(v.info.Tenant, v.info.Session, v.info.ID) }
