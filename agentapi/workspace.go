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
)

// WorkspaceLimits cap one workspace export or import (GET and PUT
// /v1/workspace; the stream is package agentapi/workspace's). Zero fields
// take the agent's defaults (agentapi/workspace.DefaultMaxBytes,
// DefaultMaxEntries).
type WorkspaceLimits struct {
	// MaxBytes caps the bytes of the workspace's regular files by their
	// apparent sizes, holes included (they travel as zeros). Past it an
	// export is files.ErrTooLarge and an import files.ErrNoSpace, as a
	// full disk is.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// MaxEntries caps the entries: the root, directories, files, links,
	// FIFOs. Past it either is files.ErrTooLarge.
	MaxEntries int `json:"maxEntries,omitempty"`
}

// WorkspaceStats say what a workspace export or import carried, and what
// it could not.
type WorkspaceStats struct {
	// Entries counts the stream's entries, the root included; Dirs,
	// Files, Symlinks, HardLinks (second and later names of a file) and
	// Fifos count them by kind.
	Entries   int `json:"entries"`
	Dirs      int `json:"dirs"`
	Files     int `json:"files"`
	Symlinks  int `json:"symlinks"`
	HardLinks int `json:"hardLinks"`
	Fifos     int `json:"fifos"`
	// Bytes is the regular files' apparent sizes, holes included; Holes
	// the part of it that was not read (export: the filesystem's holes)
	// or not written (import: blocks of zeros, holes again).
	Bytes int64 `json:"bytes"`
	Holes int64 `json:"holes"`
	// Stream is the size of the compressed stream.
	Stream int64 `json:"stream"`
	// Xattrs counts the user. xattrs carried.
	Xattrs int `json:"xattrs"`
	// Sockets and Devices count what an export skipped: a socket means
	// nothing without its listener, a device is not the session's.
	Sockets int `json:"sockets,omitempty"`
	Devices int `json:"devices,omitempty"`
	// Grown counts files that grew while they were exported: the stream
	// holds their first bytes, as many as they had when opened.
	Grown int `json:"grown,omitempty"`
	// OwnersKept counts the entries an import could not give their
	// recorded owner (the agent may not chown): they are the importing
	// user's.
	OwnersKept int `json:"ownersKept,omitempty"`
	// XattrsSkipped counts the xattrs an import could not set (the
	// filesystem has none, or refused one).
	XattrsSkipped int `json:"xattrsSkipped,omitempty"`
}

// The workspace endpoints' content type and trailer.
const (
	// ContentWorkspace is a workspace stream: a PAX tar in one zstd
	// frame (package agentapi/workspace).
	ContentWorkspace = "application/zstd"
	// HeaderWorkspaceStats is the trailer of an export: its
	// WorkspaceStats as JSON, sent once the stream is whole.
	HeaderWorkspaceStats = "Shellbox-Workspace-Stats"
)

// workspaceQuery is the query of a workspace request: its caps.
func workspaceQuery(l WorkspaceLimits) string {
	q := url.Values{}
	if l.MaxBytes > 0 {
		q.Set("max", strconv.FormatInt(l.MaxBytes, 10))
	}
	if l.MaxEntries > 0 {
		q.Set("entries", strconv.Itoa(l.MaxEntries))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// ExportWorkspace streams the agent's workspace out (GET /v1/workspace):
// the whole session root as one stream, for a suspend to store. The
// stream is the caller's to read and Close, and ctx must last until then.
// It is whole only once Read returned io.EOF: then Stats says what it
// holds and what was left out (sockets, devices). A stream the agent broke
// off (a file it could not read, a limit passed midway, the agent gone)
// fails its Read with executor.ErrUnavailable, never io.EOF.
//
// Errors before the stream: files.ErrTooLarge (past lim, when the agent
// can tell at once), executor.ErrUnavailable (another export or import in
// progress, the agent unreachable); an agent without the endpoint answers
// executor.ErrInvalid "agent: no such endpoint: GET /v1/workspace".
func (c *Client) ExportWorkspace(ctx context.Context, lim WorkspaceLimits) (*WorkspaceExport, error) {
	const op = "/v1/workspace"
	resp, err := c.sendBody(ctx, http.MethodGet, op+workspaceQuery(lim), op, map[string]string{"Accept": ContentWorkspace}, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, c.errorAnswer(ctx, http.MethodGet, op, resp)
	}
	return &WorkspaceExport{c: c, resp: resp, body: &streamBody{c: c, ctx: ctx, body: resp.Body, op: op}}, nil
}

// WorkspaceExport is the stream of an export.
type WorkspaceExport struct {
	c     *Client
	resp  *http.Response
	body  io.ReadCloser
	stats WorkspaceStats
}

// Read reads the stream. At its end it reads the stats the agent sends
// once the stream is whole: a stream that ends without them was broken
// off, and fails.
func (e *WorkspaceExport) Read(p []byte) (int, error) {
	n, err := e.body.Read(p)
	if err == io.EOF {
		if jerr := json.Unmarshal([]byte(e.resp.Trailer.Get(HeaderWorkspaceStats)), &e.stats); jerr != nil {
			return n, executor.Errorf(executor.ErrUnavailable, "agent at %s: GET /v1/workspace: the stream ended without its %s trailer: it was broken off", e.c.socket, HeaderWorkspaceStats)
		}
	}
	return n, err
}

// Close closes the stream; before its end, the agent's export stops.
func (e *WorkspaceExport) Close() error { return e.body.Close() }

// Stats says what the stream held, once Read returned io.EOF.
func (e *WorkspaceExport) Stats() WorkspaceStats { return e.stats }

// ImportWorkspace replaces the content of the agent's workspace with a
// stream an export wrote (PUT /v1/workspace), for a resume. The body
// streams (bounded memory); the agent restores it into a scratch
// directory and swaps it in only once whole: on any error the workspace is
// as it was. A body whose Read fails aborts the request, and the agent
// keeps nothing of it: it removes what it restored once it sees the
// upload cut, which may be just after ImportWorkspace returned (an import
// meanwhile is refused as in progress).
//
// Errors are the agent's, of their class: executor.ErrInvalid (a stream
// cut, corrupt or hostile, naming the entry and why), files.ErrTooLarge
// (past lim.MaxEntries), files.ErrNoSpace (past lim.MaxBytes, or the
// workspace's filesystem full), executor.ErrUnavailable (another export or
// import in progress).
func (c *Client) ImportWorkspace(ctx context.Context, body io.Reader, lim WorkspaceLimits) (WorkspaceStats, error) {
	const op = "/v1/workspace"
	var st WorkspaceStats
	err := c.upload(ctx, op+workspaceQuery(lim), op, ContentWorkspace, body, &st)
	var be *bodyError
	if errors.As(err, &be) {
		return WorkspaceStats{}, be.cut("workspace import", "the workspace is as it was")
	}
	if err != nil {
		return WorkspaceStats{}, err
	}
	return st, nil
}
