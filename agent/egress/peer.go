package egress

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/internal/procstatus"
)

// Who opened a connection: grants bound to process trees.
//
// A network grant is the call's, not the sandbox's: the proxy presents a
// grant's credential to the relay only for a connection whose every holder
// (each process with the client's socket open) belongs to the granted
// call's process tree. The proxy sees a loopback TCP connection; the
// kernel knows the rest:
//
//   - the client's socket is the line of /proc/net/tcp (or tcp6) whose local
//     address is the connection's remote one and whose remote address is
//     its local one, which names the socket's inode;
//   - its holders are the processes with a /proc/<pid>/fd/N link to
//     socket:[inode]; each one's supplementary groups are read from the
//     same open /proc/<pid> directory as its fd links, so a process that
//     exits and whose pid is reused in between is not mistaken for the
//     newcomer (the old directory answers ESRCH);
//   - the groups name the tree (executor/local's tag groups), or, where
//     the agent makes a cgroup per command (under gVisor, whose cgroupfs it
//     may write), the process's cgroup does (/proc/<pid>/cgroup, read from
//     the same directory): either is inherited by every process of the
//     tree and can be neither dropped nor joined by a command; the
//     executor says which grant, if any, that tree holds.
//
// Reading another process's fd links takes the ptrace read right, which
// the agent (root) gets through the asUser hook: on Linux by acting as the
// commands' user (executor/files AsUser), under gVisor, which checks the
// real ids there, by raising CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH on the
// lookup's thread (AsTracer). A holder that cannot be read (another user's
// process) or a lookup that fails gives no grant: the connection goes
// where the allowlist allows, as any other. On Linux a holder made
// non-dumpable (prctl) cannot be read either and so is not counted: that
// takes a granted process the attacker already controls; under gVisor
// CAP_SYS_PTRACE reads it too. Taking one over by writing its
// /proc/<pid>/mem is refused: each call runs in a Landlock domain of its
// own on runc (agent/landlock; where the kernel has Landlock ABI
// 2, else docs/security.md, Known limits), and gVisor's sentry refuses it.

// Holder is a process holding a socket open.
type Holder struct {
	PID     int
	Groups  []uint32 // supplementary groups
	Cgroups []byte   // its /proc/<pid>/cgroup (up to maxCgroupBytes)
}

// maxHolderFDs bounds the fd links read per process, and maxProcs the
// processes scanned: beyond them a lookup gives up (no grant).
// maxCgroupBytes bounds a holder's /proc/<pid>/cgroup: a line per
// hierarchy.
const (
	maxHolderFDs   = 1 << 16
	maxProcs       = 1 << 16
	maxCgroupBytes = 4096
)

// Holders returns the processes of this host (this sandbox) holding the
// client end of c, a TCP connection this process accepted from a local
// client. asUser, if not nil, runs fn with the right to read the fd links
// of the processes that may hold it (fn must stay on its goroutine).
func Holders(c net.Conn, asUser func(fn func() error) error) ([]Holder, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("not a TCP connection: %s", c.RemoteAddr())
	}
	inode, uid, err := socketInode(remote.AddrPort(), local.AddrPort())
	if err != nil {
		return nil, err
	}
	var hs []Holder
	scan := func() error {
		var err error
		hs, err = holdersOf(inode, uid)
		return err
	}
	if asUser != nil {
		err = asUser(scan)
	} else {
		err = scan()
	}
	return hs, err
}

// socketInode returns the inode and owner uid of the TCP socket whose local
// address is from and remote address to, from /proc/net/tcp and
// /proc/net/tcp6.
func socketInode(from, to netip.AddrPort) (inode uint64, uid uint32, err error) {
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		inode, uid, err := findSocket(name, from, to)
		if err != nil {
			return 0, 0, err
		}
		if inode != 0 {
			return inode, uid, nil
		}
	}
	return 0, 0, fmt.Errorf("no socket %s → %s in /proc/net/tcp{,6}", from, to)
}

// findSocket scans one /proc/net/tcp file, a line at a time (its size is
// the sandbox's to choose), for the socket from → to; 0 when absent.
func findSocket(name string, from, to netip.AddrPort) (inode uint64, uid uint32, err error) {
	f, err := os.Open(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && name == "/proc/net/tcp6" {
			// No IPv6 in this kernel (or sandbox).
			return 0, 0, nil
		}
		return 0, 0, fmt.Errorf("socket lookup: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 512), 4096)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
		fs := bytes.Fields(sc.Bytes())
		if len(fs) < 10 {
			continue
		}
		l, err1 := parseProcAddr(fs[1])
		r, err2 := parseProcAddr(fs[2])
		if err1 != nil || err2 != nil || l != from || r != to {
			continue
		}
		inode, err1 := strconv.ParseUint(string(fs[9]), 10, 64)
		uid, err2 := strconv.ParseUint(string(fs[7]), 10, 32)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("socket lookup: %s: bad line %q", name, sc.Bytes())
		}
		return inode, uint32(uid), nil
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("socket lookup: %s: %w", name, err)
	}
	return 0, 0, nil
}

// parseProcAddr parses an address of /proc/net/tcp{,6}: the address as
// 32-bit words in host byte order, in hex, a colon, the port in hex.
// IPv4-mapped IPv6 addresses come back as IPv4.
func parseProcAddr(b []byte) (netip.AddrPort, error) {
	a, p, ok := bytes.Cut(b, []byte(":"))
	if !ok || (len(a) != 8 && len(a) != 32) {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", b)
	}
	raw := make([]byte, len(a)/2)
	if _, err := hex.Decode(raw, a); err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", b)
	}
	port, err := strconv.ParseUint(string(p), 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port %q", b)
	}
	ip := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(ip[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// holdersOf lists the processes with an fd on socket inode, skipping those
// that exit meanwhile and those whose fds cannot be read: but when none is
// found and a process of the socket's owner uid could not be read, that
// is the error.
func holdersOf(inode uint64, uid uint32) ([]Holder, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("socket holders: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(maxProcs)
	if err != nil {
		return nil, fmt.Errorf("socket holders: %w", err)
	}
	want := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	self := os.Getpid()
	var out []Holder
	var denied error
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == self {
			continue
		}
		h, held, owner, err := holds(pid, want)
		if held {
			out = append(out, h)
		} else if denied == nil && owner == uid && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) {
			denied = fmt.Errorf("process %d: %w", pid, err)
		}
	}
	if len(out) == 0 && denied != nil {
		// Said, not swallowed: where reading a process's fd links takes
		// more than asUser gives (gVisor without CAP_SYS_PTRACE: a
		// Kubernetes pod), no connection can be attributed, and no grant
		// applies.
		return nil, fmt.Errorf("socket holders: cannot read the fd links of %w", denied)
	}
	return out, nil
}

// holds reports whether process pid has an fd linked to target, and if so
// its supplementary groups and cgroups, read through one open /proc/<pid>
// directory; owner is the uid owning /proc/<pid> (the process's, while it
// is dumpable) and err says why its fd links could not be read.
func holds(pid int, target string) (h Holder, held bool, owner uint32, err error) {
	dir, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Holder{}, false, 0, err
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		return Holder{}, false, 0, err
	}
	owner = st.Uid
	fdDir, err := unix.Openat(dir, "fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Holder{}, false, owner, err
	}
	fds := os.NewFile(uintptr(fdDir), "fd")
	defer fds.Close()
	names, _ := fds.Readdirnames(maxHolderFDs)
	buf := make([]byte, 64)
	found := false
	var linkErr error
	for _, n := range names {
		k, err := unix.Readlinkat(fdDir, n, buf)
		if err == nil && string(buf[:k]) == target {
			found = true
			break
		}
		if err != nil && linkErr == nil {
			linkErr = err
		}
	}
	if !found {
		return Holder{}, false, owner, linkErr
	}
	groups, err := readGroups(dir)
	if err != nil {
		return Holder{}, false, owner, err
	}
	cgroups, err := readAt(dir, "cgroup", maxCgroupBytes)
	if err != nil {
		return Holder{}, false, owner, err
	}
	return Holder{PID: pid, Groups: groups, Cgroups: cgroups}, true, owner, nil
}

// readGroups returns the supplementary groups of the process whose /proc
// directory is open as dir.
func readGroups(dir int) ([]uint32, error) {
	sfd, err := unix.Openat(dir, "status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(sfd), "status")
	defer f.Close()
	return procstatus.Groups(f)
}

// readAt reads file name of the directory open as dir, up to max bytes
// (a longer file is an error).
func readAt(dir int, name string, max int) ([]byte, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s: longer than %d bytes", name, max)
	}
	return b, nil
}

// TreeGrant returns the network grant of the process tree that holds the
// client end of c: grantOf maps a holder (its supplementary groups and
// cgroups) to its tree's grant ("" for none), and every holder must map to
// the same one. A connection held by a granted tree and by any other
// process (passed over a unix socket, or inherited) has none. asUser is as
// for Holders.
func TreeGrant(c net.Conn, asUser func(fn func() error) error, grantOf func(h Holder) string) (string, error) {
	hs, err := Holders(c, asUser)
	if err != nil {
		return "", err
	}
	if len(hs) == 0 {
		return "", errors.New("no process holds the client's socket")
	}
	g := grantOf(hs[0])
	for _, h := range hs[1:] {
		if grantOf(h) != g {
			return "", fmt.Errorf("the client's socket is held by processes of different calls (pids %d and %d)", hs[0].PID, h.PID)
		}
	}
	return g, nil
}
