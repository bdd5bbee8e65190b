package agentapi

// WorkspaceLimits cap one workspace export or import (GET and PUT
// /v1/workspace; the stream is package agent/workspace's). Zero fields
// take the agent's defaults (agent/workspace.DefaultMaxBytes,
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
