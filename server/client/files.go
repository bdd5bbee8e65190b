package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"

	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/server"
)

// PutOptions describe an upload.
type PutOptions struct {
	// Tar: body is a tar stream whose entries go into the directory at the
	// path (created if missing, merged into otherwise).
	Tar bool
	// Mode is a file's permission bits (0: the server's 0644).
	Mode fs.FileMode
	// Size, if > 0, is body's length, sent as Content-Length: a server
	// refuses an upload over its cap before reading it.
	Size int64
}

func filesPath(session, p string) string {
	return "/v1/sessions/" + url.PathEscape(session) + "/files?" + url.Values{"path": {p}}.Encode()
}

// PutFile uploads body to path in the session's sandbox (created on first
// use): a file's bytes, or with o.Tar a tar of a directory's entries. It
// streams; nothing is visible in the sandbox unless all of it arrived. A
// refusal is an *Error: 400 invalid (outside the root, a symlink out, a
// directory where a file is expected), 403 not_allowed (policy), 413
// too_large (over the policy's cap), 507 no_space.
func (c *Client) PutFile(ctx context.Context, session, path string, body io.Reader, o PutOptions) (files.Written, error) {
	target := filesPath(session, path)
	if o.Mode != 0 {
		target += "&mode=" + strconv.FormatUint(uint64(o.Mode.Perm()), 8)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+target, body)
	if err != nil {
		return files.Written{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", server.ContentBytes)
	if o.Tar {
		req.Header.Set("Content-Type", server.ContentTar)
	}
	if o.Size > 0 {
		req.ContentLength = o.Size
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return files.Written{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return files.Written{}, err
	}
	if resp.StatusCode/100 != 2 {
		return files.Written{}, errorOf(resp.StatusCode, b)
	}
	var w files.Written
	if err := json.Unmarshal(b, &w); err != nil {
		return files.Written{}, fmt.Errorf("malformed upload answer: %q", clip(b))
	}
	return w, nil
}

// GetFile downloads path from the session's sandbox: a regular file's
// bytes, or with tar a tar of path (a directory, or one file) whose entries
// are named after path's last element. The caller reads and closes the
// body; a stream the server broke off fails its Read rather than end early.
func (c *Client) GetFile(ctx context.Context, session, path string, tar bool) (files.Info, io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+filesPath(session, path), nil)
	if err != nil {
		return files.Info{}, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", server.ContentBytes)
	if tar {
		req.Header.Set("Accept", server.ContentTar)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return files.Info{}, nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return files.Info{}, nil, errorOf(resp.StatusCode, b)
	}
	var info files.Info
	if err := json.Unmarshal([]byte(resp.Header.Get(server.HeaderFile)), &info); err != nil {
		resp.Body.Close()
		return files.Info{}, nil, fmt.Errorf("download of %s: bad %s header: %w", path, server.HeaderFile, err)
	}
	return info, resp.Body, nil
}

// StatFile describes path in the session's sandbox (a final symlink not
// followed); a missing path is an *Error with Status 404.
func (c *Client) StatFile(ctx context.Context, session, path string) (files.Info, error) {
	var info files.Info
	err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(session)+"/files/stat?"+url.Values{"path": {path}}.Encode(), nil, &info)
	return info, err
}
