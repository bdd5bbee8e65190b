//go:build !unix

package secrets

import "io/fs"

// inode is 0 where the platform has none: size and mtime decide alone.
func inode(fs.FileInfo) uint64 { return 0 }
