// Package workspace streams a session's workspace out of its sandbox and
// back into one, on the sandbox side of the wall (DESIGN.md §7, durable
// sessions): Pack writes the tree under a root as one stream, Unpack
// restores a stream into an empty directory, Import restores one into a
// live workspace and swaps it in only when whole, and Manifest lists a
// tree so that one can be compared before and after (Diff). The agent
// serves Export and Import as GET and PUT /v1/workspace (agent/apiserver).
//
// # The stream
//
// A PAX tar, zstd-compressed (one frame with its content checksum, so a
// flipped bit is refused when the frame ends). Entries come in walk
// order: the root "./" first, then each directory's entries sorted by
// name, a directory's entry before what it holds, and what it holds all
// together; the same tree gives the same tar.
//
// What it keeps:
//   - directories, regular files, symlinks (the target as it is, absolute
//     or climbing out: it is text, never followed here or on restore, and
//     resolves in the sandbox it is restored into), hard links (by dev and
//     inode: the first name the walk meets is the file, later names are
//     tar hard-link entries to it) and FIFOs (made again, empty);
//   - numeric owners (no names), the mode's twelve bits (setuid, setgid,
//     sticky), mtimes to the nanosecond, and the xattrs of the user.
//     namespace (SCHILY.xattr.user.*) where the filesystem has them; where
//     it has none (an older tmpfs) there are none, and no error.
//
// What it does not: sockets and device nodes are skipped and counted
// (Stats.Sockets, Stats.Devices): a socket means nothing without the
// process listening on it, gone with the sandbox, and a device is nothing
// the sandbox's user could have made (nodev, no CAP_MKNOD). xattrs of the
// other namespaces (security., trusted., system.: file capabilities, ACLs,
// SELinux labels) are not the session's to carry, neither read nor
// restored. atimes, ctimes and inode numbers are not kept.
//
// # Sparse files
//
// Pack asks the filesystem where a file's data is (lseek SEEK_DATA and
// SEEK_HOLE) and reads only that; holes go into the tar as zeros it never
// reads, which zstd turns into a few bytes per 128 KiB. Unpack skips every
// 4 KiB block of zeros it is given and sets the size at the end, so holes
// are holes again (so is a block of written zeros, which reads the same).
// The tar stays one that any tar reads. The price is that holes pass
// through the compressor and decompressor as zeros, so a file counts
// toward Limits.MaxBytes by its apparent size, holes included, on both
// sides: a crafted terabyte-sparse file is refused by its size before a
// byte of it is read or written, and the work of a stream is bounded by
// the limits. Chosen over GNU sparse headers, which archive/tar cannot
// write and, reading, expands into zeros anyway.
//
// # Confinement
//
// Both sides walk one component at a time. A directory is opened as an
// os.Root from its parent's (nothing it names can leave it), each entry
// is named by one component in its directory, and nothing is followed: a
// symlink in the tree is read as a link; one a process swaps in meanwhile
// is caught by comparing the opened file with the Lstat that chose it
// (Pack), or is never reached (Unpack creates with O_EXCL and sets times
// with AT_SYMLINK_NOFOLLOW). Nothing opened can block: a file is opened
// with O_NONBLOCK and a directory with O_DIRECTORY, so a FIFO swapped in
// for either fails the open (for reading, a FIFO's open waits for a
// writer).
//
// Unpack treats its stream as hostile. It refuses, naming the entry and
// why (errdefs.ErrInvalid): a name that is not canonical and relative
// (absolute, "..", ".", "a//b", a NUL) or longer than PATH_MAX; an entry
// whose parent is not the directory the stream is filling (the stream
// descends only into directories it made, in walk order, so nothing is
// ever written through a symlink, whatever it points at, and a finished
// directory is never reopened); a name met twice; a hard link whose target
// is not a regular file the stream made before; an entry type Pack does
// not write (devices, sparse, global headers, ...); a PAX record Pack does
// not write, an xattr outside user.; data after the end of the archive; a
// cut or corrupt stream. More than Limits.MaxEntries entries is
// errdefs.ErrTooLarge; contents past Limits.MaxBytes are errdefs.ErrNoSpace,
// as a full disk (ENOSPC, EDQUOT) is.
//
// # Owners, modes and times
//
// Unpack chowns each entry to its recorded owner where the process may
// (CAP_CHOWN: root, not under setfsuid); where it may not the entry stays
// the unpacking user's and Stats.OwnersKept counts it. A file gets its
// xattrs, owner, mode and mtime once its contents are in (a 0000 file is
// written first); a directory gets its own when the stream leaves it,
// deepest first, so a 0555 directory is still filled, and the root last.
// xattrs are restored best effort (Stats.XattrsSkipped).
//
// Pack must be able to read what it packs: run as the workspace's owner
// (the agent packs as the sandbox user, files.AsUser), a file or
// directory that user cannot read (mode 0000) fails the pack, naming it;
// with CAP_DAC_READ_SEARCH (root) it is packed.
//
// # An empty directory, and Import
//
// Unpack restores only into an empty directory: it merges nothing and
// overwrites nothing, and a failure leaves a partial tree its caller
// removes. Import is the caller that restores into a live workspace: it
// unpacks into a fresh scratch directory inside the workspace (the
// workspace is a mount point: a scratch beside it would be on another
// filesystem, and the root itself cannot be renamed), and only once the
// whole stream is in, moves the old entries aside and the new ones in,
// gives the root the stream's mode, owner and mtime, and removes the old.
// A failure before the swap, or during it (rolled back), leaves the
// workspace as it was. Both copies live on the workspace's filesystem
// until the swap, so an import needs room for both: resume restores into
// an empty workspace. Commands running meanwhile see the swap as renames.
// Export and Import remove what an interrupted Import left
// (".shellbox-import-*", ".shellbox-replaced-*" in the root).
//
// # Bounds
//
// Memory is a fixed copy buffer per stream and zstd's state: an 8 MiB
// window and two blocks in flight written (36 MiB of heap measured for a
// pack of 100 MiB or of 256 MiB), at most a 16 MiB window accepted, kept
// twice over (the history moves down once per window, not once per MiB:
// 32 MiB measured for an unpack of Pack's 8 MiB window), so a crafted
// frame cannot ask for more than 32 MiB.
// Beyond that, what follows the tree's shape: the names of the
// directories being walked, the first names of files with hard links,
// and the open directories' recorded metadata (Limits.MaxEntries bounds
// them all). No file is ever held in memory. The depth is at most
// MaxDepth levels, each holding a descriptor or two while it is walked.
package workspace
