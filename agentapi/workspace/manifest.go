package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Entry is one entry of a Manifest: what a restore must reproduce.
type Entry struct {
	// Path is relative to the root, slash-separated; "." is the root.
	Path string `json:"path"`
	// Type is one of the Type* constants.
	Type string `json:"type"`
	// Mode is the mode's twelve permission bits (setuid, setgid, sticky
	// and rwx for each).
	Mode uint32 `json:"mode"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	// Size and SHA256 (hex) are a regular file's.
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Target is a symlink's.
	Target string `json:"target,omitempty"`
	// Link is the hard-link group of a regular file with more than one
	// name in the tree: the path its walk met first (walk order, as
	// Pack's), the same for every name; "" for a file of one name.
	Link  string    `json:"link,omitempty"`
	MTime time.Time `json:"mtime"`
	// Xattrs are its user. xattrs, name to value.
	Xattrs map[string]string `json:"xattrs,omitempty"`
}

// Types of Entry.Type.
const (
	TypeDir     = "dir"
	TypeFile    = "file"
	TypeSymlink = "symlink"
	TypeFifo    = "fifo"
	TypeSocket  = "socket"
	TypeDevice  = "device"
)

// Manifest lists the tree under root, sorted by path, for comparing a
// workspace before and after (Diff). It walks as Pack does (nothing
// followed, sockets and devices listed too) and reads every regular file
// to hash it. It holds the whole list: it is for tests and checks, not
// for trees of millions of entries.
func Manifest(root string) ([]Entry, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, rootError("manifest", root, err)
	}
	defer r.Close()
	var out []Entry
	names := map[fileID][]int{} // entries of each inode with more than one name
	buf, xbuf := make([]byte, copyBuffer), new(xattrBuf)
	wk := &walker{ctx: context.Background(), what: "manifest", root: root}
	wk.visit = func(n *node) error {
		e := Entry{Path: n.rel, Mode: n.st.Mode & 0o7777, UID: int(n.st.Uid), GID: int(n.st.Gid), MTime: time.Unix(n.st.Mtim.Sec, n.st.Mtim.Nsec).UTC()}
		var err error
		switch n.st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			e.Type = TypeDir
			err = e.read(n, xbuf, nil)
		case syscall.S_IFREG:
			e.Type, e.Size = TypeFile, n.st.Size
			if n.st.Nlink > 1 {
				id := fileID{dev: n.st.Dev, ino: n.st.Ino}
				names[id] = append(names[id], len(out))
			}
			err = e.read(n, xbuf, buf)
		case syscall.S_IFLNK:
			e.Type = TypeSymlink
			e.Target, err = n.parent.Readlink(n.name)
		case syscall.S_IFIFO:
			e.Type = TypeFifo
		case syscall.S_IFSOCK:
			e.Type = TypeSocket
		default:
			e.Type = TypeDevice
		}
		if err != nil {
			return wk.fail(n.rel, err)
		}
		out = append(out, e)
		return nil
	}
	if err := wk.walk(r); err != nil {
		return nil, err
	}
	for _, idx := range names {
		if len(idx) > 1 {
			for _, i := range idx {
				out[i].Link = out[idx[0]].Path
			}
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// read fills e's xattrs and, given a buffer, its content's hash.
func (e *Entry) read(n *node, xbuf *xattrBuf, buf []byte) error {
	f, err := n.open()
	if err != nil {
		return err
	}
	defer f.Close()
	if e.Xattrs, err = readXattrs(int(f.Fd()), xbuf); err != nil {
		return err
	}
	if buf == nil {
		return nil
	}
	h := sha256.New()
	if _, err := io.CopyBuffer(h, io.LimitReader(f, e.Size), buf); err != nil {
		return err
	}
	e.SHA256 = hex.EncodeToString(h.Sum(nil))
	return nil
}

// Diff lists how after differs from before, a line a difference, by
// path: "p: mode 0644 before, 0600 after", "p: file before, missing
// after", "p: missing before, dir after". None: the same tree.
func Diff(before, after []Entry) []string {
	b, a := index(before), index(after)
	paths := slices.Sorted(maps.Keys(b))
	for p := range a {
		if _, ok := b[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out []string
	for _, p := range paths {
		x, inB := b[p]
		y, inA := a[p]
		switch {
		case !inA:
			out = append(out, fmt.Sprintf("%s: %s before, missing after", p, x.Type))
			continue
		case !inB:
			out = append(out, fmt.Sprintf("%s: missing before, %s after", p, y.Type))
			continue
		}
		diff := func(field, was, is string) {
			if was != is {
				out = append(out, fmt.Sprintf("%s: %s %s before, %s after", p, field, was, is))
			}
		}
		diff("type", x.Type, y.Type)
		diff("mode", fmt.Sprintf("%04o", x.Mode), fmt.Sprintf("%04o", y.Mode))
		diff("owner", fmt.Sprintf("%d:%d", x.UID, x.GID), fmt.Sprintf("%d:%d", y.UID, y.GID))
		diff("size", fmt.Sprint(x.Size), fmt.Sprint(y.Size))
		diff("sha256", x.SHA256, y.SHA256)
		diff("target", x.Target, y.Target)
		diff("hard links", group(x.Link), group(y.Link))
		diff("mtime", x.MTime.Format(time.RFC3339Nano), y.MTime.Format(time.RFC3339Nano))
		diff("xattrs", xattrText(x.Xattrs), xattrText(y.Xattrs))
	}
	return out
}

func index(m []Entry) map[string]Entry {
	out := make(map[string]Entry, len(m))
	for _, e := range m {
		out[e.Path] = e
	}
	return out
}

func group(link string) string {
	if link == "" {
		return "none"
	}
	return link
}

func xattrText(x map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(x)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, x[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
