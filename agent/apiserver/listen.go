package apiserver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"syscall"
)

var umaskMu sync.Mutex

// Listen listens on a unix socket at path that only its owner can connect to
// (mode 0600): in a sandbox the agent is root and its commands are not, so
// they cannot drive the agent. A stale socket file at path is replaced;
// anything else there is an error.
//
// The mode is set by the umask at bind time, not by a chmod after it: there
// is no moment at which another user could connect, and gVisor refuses chmod
// (and stat) on a host-backed socket (runsc --host-uds). The umask is
// process-wide, so
// files other goroutines create during the bind get it too: call Listen at
// start-up.
func Listen(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("agentapi: listen %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("agentapi: listen %s: remove the stale socket: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("agentapi: listen %s: %w", path, err)
	}
	umaskMu.Lock()
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("agentapi: %w", err)
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrPermission) {
		// gVisor (runsc --host-uds=create) cannot stat the host socket it
		// made, from inside: the umask is all there is to go by.
		return l, nil
	}
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("agentapi: listen %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		l.Close()
		return nil, fmt.Errorf("agentapi: listen %s: socket mode %v lets others connect", path, fi.Mode().Perm())
	}
	return l, nil
}
