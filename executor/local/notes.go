package local

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// maxNotes bounds the lines one call's noteWriter writes; the rest are
// dropped (the agent's log has them all).
const maxNotes = 16

// noteWriter writes lines into a call's stderr pipe through a write end of
// its own (Config.ExecGuard's note): they flow through the same pump as the
// command's own output, so they are bounded, streamed and spilled alike.
type noteWriter struct {
	mu sync.Mutex
	f  *os.File // nil once closed
	n  int
}

// newNoteWriter duplicates w, a pipe's write end.
func newNoteWriter(w *os.File) (*noteWriter, error) {
	fd, err := unix.FcntlInt(w.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &noteWriter{f: os.NewFile(uintptr(fd), "notes")}, nil
}

// write writes line (a newline added if it has none), unless closed or
// past maxNotes.
func (n *noteWriter) write(line string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil || n.n >= maxNotes {
		return
	}
	n.n++
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line += "\n"
	}
	n.f.WriteString(line)
}

// close closes the write end: the pipe reaches its end when the command's
// own ends are closed too.
func (n *noteWriter) close() {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f != nil {
		n.f.Close()
		n.f = nil
	}
}
