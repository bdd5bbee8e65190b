package output

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Space is the room the spill files of one executor share (a sandbox's
// spill tmpfs, or a host directory's disk). When a Spill being written finds
// it full (ENOSPC), the Space deletes the oldest spill files of finished
// calls, one at a time, until the write fits: the newest outputs stay whole
// however long the session runs. A file is never deleted while its Spill is
// open, so a call never loses its own output to another's; a Spill whose
// file was deleted says so in its Err.
//
// Files enter the Space when their Spill closes, in that order (the oldest
// finished first).
type Space struct {
	mu       sync.Mutex
	finished []*Spill // closed, with a file on disk, oldest first
	evicted  int64
}

// NewSpace returns an empty Space.
func NewSpace() *Space { return &Space{} }

// NewSpill is NewSpill for a file in this space.
func (sp *Space) NewSpill(dir, name string, limit int64, threshold int) *Spill {
	s := NewSpill(dir, name, limit, threshold)
	s.space = sp
	return s
}

// Evicted is how many spill files were deleted to make room so far.
func (sp *Space) Evicted() int64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.evicted
}

// add records a closed Spill whose file exists. Called with s.mu held.
func (sp *Space) add(s *Spill) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.finished = append(sp.finished, s)
}

// evictOne deletes the oldest finished spill file; false when there is none
// left to delete. Lock order: the writing Spill's mu, then sp.mu, then the
// victim's mu (a closed Spill never waits for sp.mu while holding its own).
func (sp *Space) evictOne() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for len(sp.finished) > 0 {
		v := sp.finished[0]
		sp.finished[0] = nil
		sp.finished = sp.finished[1:]
		if v.evict() {
			sp.evicted++
			return true
		}
	}
	return false
}

// evict deletes the closed Spill's file and records why; false if it was
// not there to delete.
func (s *Spill) evict() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path == "" || s.evicted {
		return false
	}
	if err := os.Remove(s.path); err != nil {
		return false
	}
	s.evicted = true
	s.err = fmt.Errorf("%s was deleted to make room for newer output (%s)", s.path, spaceSize(s.dir))
	return true
}

// Adopt makes the regular files under dir (a spill directory:
// <dir>/<session>/<id>.log) the Space's oldest, by modification time: the
// spill files of an earlier process (a sandbox's agent that was restarted
// over the same spill space) are then evicted first. It returns how many it
// adopted. Call it before the Space's first Spill: a file it finds is
// adopted whoever writes it.
func (sp *Space) Adopt(dir string) (int, error) {
	type file struct {
		path string
		mod  time.Time
	}
	var files []file
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				files = append(files, file{path, fi.ModTime()})
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	slices.SortStableFunc(files, func(a, b file) int { return a.mod.Compare(b.mod) })
	adopted := make([]*Spill, 0, len(files))
	for _, f := range files {
		adopted = append(adopted, &Spill{dir: filepath.Dir(f.path), name: filepath.Base(f.path), path: f.path, closed: true, wanted: true, space: sp})
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.finished = append(adopted, sp.finished...)
	return len(adopted), nil
}
