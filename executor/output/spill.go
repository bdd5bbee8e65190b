package output

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// writeSlots, when set, bounds the spill-file writes in flight in this
// process (see LimitWrites).
var writeSlots atomic.Pointer[chan struct{}]

// LimitWrites bounds the spill-file writes in flight in this process to n
// (n <= 0: unbounded, the default). A file write is a system call that
// holds an OS thread while it runs, and the Go runtime starts another thread
// for the goroutines that wait meanwhile: a sandbox's agent, which must keep
// within a fixed number of threads, lets only a few writes hold one at a
// time; the others wait as goroutines, which hold none. Call it before any
// Spill is written.
func LimitWrites(n int) {
	if n <= 0 {
		writeSlots.Store(nil)
		return
	}
	ch := make(chan struct{}, n)
	writeSlots.Store(&ch)
}

// acquireWrite takes a write slot, if writes are bounded; the result gives it
// back.
func acquireWrite() (release func()) {
	slots := writeSlots.Load()
	if slots == nil {
		return func() {}
	}
	*slots <- struct{}{}
	return func() { <-*slots }
}

// Spill is the full output of one call: every stream of the call writes into
// the same Spill, so the file holds stdout and stderr interleaved in arrival
// order, as a terminal would show them.
//
// The file is created lazily. Up to threshold bytes are buffered in memory;
// the file (mode 0644, missing parent directories 0755) is created when the
// output crosses the threshold or when Materialize is called, and the buffered
// head is written first. So a call whose output stays small writes no file,
// and the file, once it exists, always starts at the first byte.
//
// The file keeps at most limit bytes: past that the rest is counted and
// dropped, and Err says so. A limit of 0 disables spilling.
//
// Writes never fail and never block on a reader: a failure to create or write
// the file is recorded (see Err) and later output is dropped, so the command
// keeps running. Writes do block on the disk, which bounds memory. A Spill of
// a Space (Space.NewSpill) that finds the disk full first deletes the oldest
// finished spill files of the Space, and once closed may itself be deleted
// for a newer one (Err then says so).
type Spill struct {
	mu        sync.Mutex
	dir, name string
	limit     int64
	threshold int

	head    []byte   // output buffered before the file exists
	f       *os.File // nil until materialised
	path    string   // set once the file was created
	written int64    // bytes produced
	kept    int64    // bytes accepted (in head or in the file), <= limit
	filed   int64    // bytes that reached the file
	wanted  bool     // materialisation was asked for or the threshold crossed
	err     error    // first failure; output is dropped after it
	closed  bool

	space   *Space // nil: not shared (no eviction)
	evicted bool   // the Space deleted the file after Close
}

// NewSpill returns a Spill that will write dir/name. threshold bounds the
// bytes held in memory before the file is created; limit caps the file.
func NewSpill(dir, name string, limit int64, threshold int) *Spill {
	return &Spill{dir: dir, name: name, limit: max(limit, 0), threshold: max(threshold, 0)}
}

// Write records p. It always returns len(p), nil.
func (s *Spill) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written += int64(len(p))
	if s.err != nil || s.closed || s.limit == 0 {
		return len(p), nil
	}
	q := p[:min(int64(len(p)), s.limit-s.kept)]
	s.kept += int64(len(q))
	if s.f == nil {
		if !s.wanted && s.written <= int64(s.threshold) {
			s.buffer(q)
			return len(p), nil
		}
		s.wanted = true
		s.open()
	}
	s.write(q)
	return len(p), nil
}

// buffer appends p to the head, growing it at most to the threshold (the
// caller checked that it fits).
func (s *Spill) buffer(p []byte) {
	if need := len(s.head) + len(p); need > cap(s.head) {
		nb := make([]byte, len(s.head), min(max(2*cap(s.head), need, 512), max(s.threshold, need)))
		copy(nb, s.head)
		s.head = nb
	}
	s.head = append(s.head, p...)
}

// Materialize creates the file now, if it does not exist yet, holding
// everything written so far, and keeps writing through to it. It is
// idempotent and returns the recorded failure, if any. After Close it does
// nothing.
func (s *Spill) Materialize() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.err
	}
	s.wanted = true
	if s.f == nil && s.err == nil && s.limit > 0 {
		s.open()
	}
	return s.err
}

// open creates the file and flushes the buffered head into it. Called with
// s.mu held.
func (s *Spill) open() {
	s.f, s.err = create(s.dir, s.name)
	for errors.Is(s.err, syscall.ENOSPC) && s.space != nil && s.space.evictOne() {
		s.f, s.err = create(s.dir, s.name)
	}
	if s.err != nil {
		if errors.Is(s.err, syscall.ENOSPC) {
			s.err = fmt.Errorf("%s; no spill file was written (%w)", spaceFull(s.dir), s.err)
		}
		s.head = nil
		return
	}
	s.path = s.f.Name()
	head := s.head
	s.head = nil
	s.write(head)
}

func (s *Spill) write(p []byte) {
	if len(p) == 0 || s.f == nil || s.err != nil {
		return
	}
	release := acquireWrite()
	n, err := s.f.Write(p)
	s.filed += int64(n)
	// Out of room: delete the oldest finished spill files until the rest
	// fits, or there is none left.
	for errors.Is(err, syscall.ENOSPC) && s.space != nil && s.space.evictOne() {
		p = p[n:]
		n, err = s.f.Write(p)
		s.filed += int64(n)
	}
	release()
	if err != nil {
		s.err = err
		if errors.Is(err, syscall.ENOSPC) {
			// The volume the spill files share is full: name its size, so
			// the model (and the operator) know which limit was hit.
			s.err = fmt.Errorf("%s; the first %d bytes are in %s", spaceFull(s.dir), s.filed, s.path)
		}
	}
}

// spaceFull names the full spill volume of dir and its size when known.
func spaceFull(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil && st.Blocks > 0 {
		return fmt.Sprintf("the session's spill space of %d bytes is full", int64(st.Blocks)*int64(st.Bsize))
	}
	return "the session's spill space is full"
}

// spaceSize names the spill volume of dir and its size when known.
func spaceSize(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil && st.Blocks > 0 {
		return fmt.Sprintf("the session's spill space is %d bytes", int64(st.Blocks)*int64(st.Bsize))
	}
	return "the session's spill space is full"
}

// Path is the spill file, or "" when none was created (small output, or the
// file could not be created).
func (s *Spill) Path() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.path
}

// Err says why the file does not hold the whole output, or is "" when it does
// (or when nobody asked for a file yet): the reason the file could not be
// written (e.g. "open /x/a.log: permission denied"), or that the limit was
// reached: "spill limit of <N> bytes reached; the first <N> bytes are in
// <path>".
func (s *Spill) Err() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return s.err.Error()
	case !s.wanted:
		return ""
	case s.limit == 0:
		return "spilling is disabled (spill limit is 0 bytes)"
	case s.written > s.limit && s.path != "":
		return fmt.Sprintf("spill limit of %d bytes reached; the first %d bytes are in %s", s.limit, s.limit, s.path)
	}
	return ""
}

// Stored is the number of bytes in the file so far.
func (s *Spill) Stored() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.filed
}

// Written is the number of bytes produced, kept or not.
func (s *Spill) Written() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written
}

// Close closes the file and releases the buffer. Later writes are counted and
// dropped. It returns the recorded failure or the error closing the file.
func (s *Spill) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.err
	}
	s.closed = true
	s.head = nil
	if s.f != nil {
		if err := s.f.Close(); err != nil && s.err == nil {
			s.err = err
		}
		if s.space != nil {
			s.space.add(s)
		}
	}
	return s.err
}

// create makes dir (and its missing parents, 0755 whatever the umask) and a
// new file name in it, 0644 whatever the umask: the file is read by the
// command's user, which need not be ours.
func create(dir, name string) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("invalid spill file name %q", name)
	}
	if err := mkdirAll(dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// mkdirAll is os.MkdirAll that gives the directories it creates mode 0755
// regardless of the umask, and leaves existing ones alone.
func mkdirAll(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrNotExist) {
		if parent := filepath.Dir(dir); parent != dir {
			if err := mkdirAll(parent); err != nil {
				return err
			}
		}
		err = os.Mkdir(dir, 0o755)
	}
	switch {
	case err == nil:
		return os.Chmod(dir, 0o755)
	case errors.Is(err, fs.ErrExist):
		if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	return err
}
