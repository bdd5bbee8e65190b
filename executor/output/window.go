package output

// window holds the last max bytes of a stream whose bytes are numbered from 0
// in write order. The byte at position i lives at buf[i%max]; while fewer than
// max bytes have been written buf is simply the stream so far, so small
// outputs cost small memory. cap(buf) never exceeds max. Not safe for
// concurrent use: the exported types lock around it.
type window struct {
	max   int
	buf   []byte
	total int64 // bytes ever written
}

func (w *window) write(p []byte) {
	if len(p) == 0 {
		return
	}
	if len(p) > w.max {
		// Only the last max bytes can survive this write.
		w.total += int64(len(p) - w.max)
		p = p[len(p)-w.max:]
	}
	end := w.total + int64(len(p))
	if end <= int64(w.max) {
		// Linear phase: positions 0..end map to themselves.
		w.grow(int(end))
		w.buf = append(w.buf, p...)
		w.total = end
		return
	}
	if len(w.buf) < w.max {
		w.grow(w.max)
		w.buf = w.buf[:w.max]
	}
	off := int(w.total % int64(w.max))
	n := copy(w.buf[off:], p)
	copy(w.buf, p[n:])
	w.total = end
}

// grow makes room for n bytes in buf without ever exceeding max.
func (w *window) grow(n int) {
	if n <= cap(w.buf) {
		return
	}
	c := max(2*cap(w.buf), n, 512)
	c = min(c, w.max)
	nb := make([]byte, len(w.buf), c)
	copy(nb, w.buf)
	w.buf = nb
}

// first is the position of the oldest byte still held.
func (w *window) first() int64 {
	return max(0, w.total-int64(w.max))
}

// bytes returns a copy of the held bytes at positions from..total.
func (w *window) bytes(from int64) []byte {
	from = max(from, w.first())
	if from >= w.total {
		return nil
	}
	out := make([]byte, w.total-from)
	if w.total <= int64(w.max) {
		copy(out, w.buf[from:w.total])
		return out
	}
	off := int(from % int64(w.max))
	n := copy(out, w.buf[off:])
	copy(out[n:], w.buf)
	return out
}
