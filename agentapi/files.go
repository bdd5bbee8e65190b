package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/internal/mediatype"
)

// Content types of the files endpoints.
const (
	// ContentTar is a tar stream: a directory (or a file with its name and
	// mode).
	ContentTar = "application/x-tar"
	// ContentBytes is a file's bytes.
	ContentBytes = "application/octet-stream"
	// HeaderFile carries, on a download, the files.Info of what was asked
	// for as JSON (for a directory, Size is the total of its files).
	HeaderFile = "Shellbox-File"
)

// IsTar reports whether a Content-Type or Accept value asks for a tar.
func IsTar(v string) bool { return mediatype.Includes(v, ContentTar) }

// filesQuery is the query of a files request: the path and the caps.
func filesQuery(p string, l files.Limits) string {
	q := url.Values{"path": {p}}
	if l.MaxBytes > 0 {
		q.Set("max", strconv.FormatInt(l.MaxBytes, 10))
	}
	if l.MaxEntries > 0 {
		q.Set("entries", strconv.Itoa(l.MaxEntries))
	}
	if l.NoSymlinks {
		q.Set("nosymlinks", "1")
	}
	if l.OneLink {
		q.Set("onelink", "1")
	}
	return q.Encode()
}

// PutFile uploads body to path in the agent's session root: the bytes of a
// file, or with o.Tar a tar stream whose entries go into the directory at
// path. The body streams (bounded memory); the agent enforces o's caps
// while it reads, and writes atomically (see package files). A body whose
// Read fails aborts the request: the agent sees the upload cut and leaves
// nothing.
//
// Errors are the agent's, of their class: executor.ErrInvalid (a path
// outside the root, a symlink out, a directory where a file is expected, a
// bad tar, a cut upload), files.ErrTooLarge, files.ErrNoSpace; an agent
// without the endpoint answers executor.ErrInvalid "agent: no such
// endpoint: PUT /v1/files".
func (c *Client) PutFile(ctx context.Context, path string, body io.Reader, o files.PutOptions) (files.Written, error) {
	const op = "/v1/files"
	target := op + "?" + filesQuery(path, o.Limits)
	if o.Mode != 0 {
		target += "&mode=" + strconv.FormatUint(uint64(o.Mode.Perm()), 8)
	}
	ct := ContentBytes
	if o.Tar {
		ct = ContentTar
	}
	var wr files.Written
	err := c.upload(ctx, target, op, ct, body, &wr)
	var be *bodyError
	if errors.As(err, &be) {
		return files.Written{}, be.cut("upload of "+path, "nothing was written")
	}
	if err != nil {
		return files.Written{}, err
	}
	return wr, nil
}

// upload PUTs body, of contentType, to target and decodes the agent's
// JSON answer into out. A failure of body itself is a *bodyError, for the
// caller to word (cut); one of the connection or the agent is classed as
// send's.
func (c *Client) upload(ctx context.Context, target, op, contentType string, body io.Reader, out any) error {
	resp, err := c.sendBody(ctx, http.MethodPut, target, op, map[string]string{"Content-Type": contentType}, markBody{body})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxSmallBytes))
	if err != nil {
		return c.readError(ctx, http.MethodPut, op, err)
	}
	if resp.StatusCode/100 != 2 {
		return c.statusError(http.MethodPut, op, resp, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return executor.Errorf(executor.ErrUnavailable, "agent at %s: PUT %s: bad answer: %w", c.socket, op, err)
	}
	return nil
}

// GetFile downloads path from the agent's session root: a regular file's
// bytes, or with o.Tar a tar of path (see files.Tree.Get). It returns what
// path is and the body, which streams: the caller reads it and must Close
// it, and ctx must last until then. A stream the agent broke off fails its
// Read with executor.ErrUnavailable; it never ends early with io.EOF.
func (c *Client) GetFile(ctx context.Context, path string, o files.GetOptions) (files.Info, io.ReadCloser, error) {
	const op = "/v1/files"
	h := map[string]string{"Accept": ContentBytes}
	if o.Tar {
		h["Accept"] = ContentTar
	}
	resp, err := c.sendBody(ctx, http.MethodGet, op+"?"+filesQuery(path, o.Limits), op, h, nil)
	if err != nil {
		return files.Info{}, nil, err
	}
	if resp.StatusCode/100 != 2 {
		return files.Info{}, nil, c.errorAnswer(ctx, http.MethodGet, op, resp)
	}
	var info files.Info
	if err := json.Unmarshal([]byte(resp.Header.Get(HeaderFile)), &info); err != nil {
		resp.Body.Close()
		return files.Info{}, nil, executor.Errorf(executor.ErrUnavailable, "agent at %s: GET %s: bad %s header: %w", c.socket, op, HeaderFile, err)
	}
	return info, &streamBody{c: c, ctx: ctx, body: resp.Body, op: op}, nil
}

// StatFile describes path in the agent's session root, without following
// a final symlink; a missing path is executor.ErrNotFound.
func (c *Client) StatFile(ctx context.Context, path string) (files.Info, error) {
	var info files.Info
	err := c.doBounded(ctx, http.MethodGet, "/v1/files/stat?"+url.Values{"path": {path}}.Encode(), nil, nil, &info)
	return info, err
}

// sendBody is send with a raw body (nil: none).
func (c *Client) sendBody(ctx context.Context, method, target, op string, header map[string]string, body io.Reader) (*http.Response, error) {
	req, err := c.request(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return c.roundTrip(ctx, req, method, op)
}

// errorAnswer is the error of resp, a non-2xx answer to a streaming
// request, whose body it reads (bounded) and closes.
func (c *Client) errorAnswer(ctx context.Context, method, op string, resp *http.Response) error {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxSmallBytes))
	if err != nil {
		return c.readError(ctx, method, op, err)
	}
	return c.statusError(method, op, resp, b)
}

// bodyError marks a failure of an upload's body, as opposed to the
// connection's.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// cut is the error of an upload (what) whose body failed: the upload was
// cut, and the agent keeps nothing (left says what is left). An error of a
// class (the caller's own cap) stays as it is.
func (e *bodyError) cut(what, left string) error {
	if classified(e.err) {
		return e.err
	}
	return executor.Errorf(executor.ErrInvalid, "%s interrupted: %v; %s", what, e.err, left)
}

// markBody marks its reader's errors as the body's.
type markBody struct{ r io.Reader }

func (m markBody) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	if err != nil && err != io.EOF {
		err = &bodyError{err}
	}
	return n, err
}

// classified reports an error of one of the wire classes.
func classified(err error) bool {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return true
		}
	}
	return false
}

// streamBody is a download's body, failing with the package's classes.
type streamBody struct {
	c    *Client
	ctx  context.Context
	body io.ReadCloser
	op   string
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil && err != io.EOF {
		err = b.c.readError(b.ctx, http.MethodGet, b.op, err)
	}
	return n, err
}

func (b *streamBody) Close() error { return b.body.Close() }
