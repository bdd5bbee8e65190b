package output

import "sync"

// Ring keeps the last n bytes written to it and one read cursor. Write never
// blocks and never grows memory past n bytes: when the reader falls behind,
// the oldest unread bytes are overwritten, and the next Read reports how many.
type Ring struct {
	mu     sync.Mutex
	w      window
	cursor int64 // position of the first byte not yet returned by Read
}

// NewRing returns a Ring that holds at most n bytes; n must be positive.
func NewRing(n int) *Ring {
	if n <= 0 {
		panic("output.NewRing: bound must be positive")
	}
	return &Ring{w: window{max: n}}
}

// Write appends p, overwriting the oldest bytes past the bound. It never
// fails.
func (r *Ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.w.write(p)
	r.mu.Unlock()
	return len(p), nil
}

// Read returns the bytes written since the previous Read that are still held,
// and lost: the bytes written since the previous Read that were overwritten
// before this one. len(data)+lost is exactly what was written in between.
func (r *Ring) Read() (data []byte, lost int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := max(r.cursor, r.w.first())
	lost = start - r.cursor
	data = r.w.bytes(start)
	r.cursor = r.w.total
	return data, lost
}

// Lost is the number of bytes the next Read will report lost so far: a
// writer checks it to react as soon as the reader fell behind.
func (r *Ring) Lost() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(0, r.w.first()-r.cursor)
}

// Total is the number of bytes ever written.
func (r *Ring) Total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.total
}
