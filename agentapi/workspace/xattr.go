package workspace

import (
	"bytes"
	"errors"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// userPrefix is the one xattr namespace a workspace carries.
const userPrefix = "user."

// paxXattr prefixes an xattr's name in a PAX record, as GNU tar and
// bsdtar write them.
const paxXattr = "SCHILY.xattr."

// xattrBuf is the buffer xattrs are read through: a name list and a value
// are each at most 64 KiB on Linux.
type xattrBuf [xattrMax]byte

// readXattrs returns the user. xattrs of the open file fd, name to value;
// none, and no error, where the filesystem has no xattrs. One removed
// between the listing and its read is left out.
func readXattrs(fd int, buf *xattrBuf) (map[string]string, error) {
	n, err := retry(func() (int, error) { return unix.Flistxattr(fd, buf[:]) })
	if unsupported(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range bytes.Split(buf[:n], []byte{0}) {
		if strings.HasPrefix(string(name), userPrefix) {
			names = append(names, string(name))
		}
	}
	var out map[string]string
	for _, name := range names {
		n, err := retry(func() (int, error) { return unix.Fgetxattr(fd, name, buf[:]) })
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = string(buf[:n])
	}
	return out, nil
}

// unsupported reports an xattr call the filesystem does not have.
func unsupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)
}

// retry runs fn again while it is interrupted.
func retry(fn func() (int, error)) (int, error) {
	for {
		n, err := fn()
		if err != syscall.EINTR {
			return n, err
		}
	}
}
