package output

import "sync"

// Tail keeps the last n bytes written to it and counts every byte. Its memory
// never exceeds n bytes and grows only as output arrives.
type Tail struct {
	mu sync.Mutex
	w  window
}

// NewTail returns a Tail that keeps the last n bytes; n must be positive.
func NewTail(n int) *Tail {
	if n <= 0 {
		panic("output.NewTail: bound must be positive")
	}
	return &Tail{w: window{max: n}}
}

// Write keeps the end of p. It never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.w.write(p)
	t.mu.Unlock()
	return len(p), nil
}

// Bytes returns a copy of the kept tail.
func (t *Tail) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.w.bytes(0)
}

// String returns the kept tail.
func (t *Tail) String() string { return string(t.Bytes()) }

// Total is the number of bytes ever written.
func (t *Tail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.w.total
}

// Truncated reports that the kept tail is shorter than what was written.
func (t *Tail) Truncated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.w.total > int64(t.w.max)
}
