package agentapi

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/shellbox/shellbox/executor"
)

// Spill reads the spill file path (as executor.Result.SpillPath and
// executor.Output.SpillPath name it: an absolute path inside the agent's
// spill directory) from byte offset, at most limit bytes; limit <= 0, or
// over MaxResponseBytes, reads at most MaxResponseBytes. To page, call again
// with offset advanced by what was read; fewer bytes than asked for mean the
// end of the file as it was when the agent opened it (a running task's spill
// file may grow later).
//
// The body streams: the caller reads it and must Close it, and ctx must
// last until then. A missing file is executor.ErrNotFound ("no such spill
// file: <path>"), a path outside the spill directory or a file that is not
// a regular one executor.ErrInvalid; an agent that cannot be reached, or a
// body cut short, executor.ErrUnavailable (from Read); an agent without the
// endpoint (older, or started without a spill directory) answers
// executor.ErrInvalid "agent: no such endpoint: GET /v1/spill".
func (c *Client) Spill(ctx context.Context, path string, offset, limit int64) (io.ReadCloser, error) {
	if limit <= 0 || limit > MaxResponseBytes {
		limit = MaxResponseBytes
	}
	q := url.Values{"path": {path}, "offset": {strconv.FormatInt(offset, 10)}, "limit": {strconv.FormatInt(limit, 10)}}
	const op = "/v1/spill"
	resp, err := c.send(ctx, http.MethodGet, op+"?"+q.Encode(), op, nil, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, c.errorAnswer(ctx, http.MethodGet, op, resp)
	}
	if resp.ContentLength > limit {
		resp.Body.Close()
		return nil, executor.Errorf(executor.ErrUnavailable, "agent at %s: GET %s: answer of %d bytes, over the %d asked for", c.socket, op, resp.ContentLength, limit)
	}
	return &spillBody{c: c, ctx: ctx, body: resp.Body, r: io.LimitReader(resp.Body, limit)}, nil
}

// spillBody is a spill answer's body: bounded by the limit asked for, and
// failing with the package's error classes.
type spillBody struct {
	c    *Client
	ctx  context.Context
	body io.ReadCloser
	r    io.Reader
}

func (b *spillBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = b.c.readError(b.ctx, http.MethodGet, "/v1/spill", err)
	}
	return n, err
}

func (b *spillBody) Close() error { return b.body.Close() }
