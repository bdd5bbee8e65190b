package output

import (
	"bytes"
	"testing"
)

func TestRing(t *testing.T) {
	type read struct {
		data string
		lost int64
	}
	// Each step writes w (if non-empty) and then, if read is non-nil, reads.
	type step struct {
		w    string
		read *read
	}
	r := func(data string, lost int64) *read { return &read{data, lost} }
	tests := []struct {
		name  string
		bound int
		steps []step
	}{
		{"empty read", 4, []step{{"", r("", 0)}}},
		{"read what was written", 4, []step{{"ab", r("ab", 0)}, {"cd", r("cd", 0)}, {"", r("", 0)}}},
		{"cursor survives wrap", 4, []step{{"abc", r("abc", 0)}, {"de", r("de", 0)}, {"fgh", r("fgh", 0)}}},
		{"lost bytes counted", 4, []step{{"abcdef", r("cdef", 2)}}},
		{"lost across writes", 3, []step{{"ab", nil}, {"cd", nil}, {"ef", r("def", 3)}, {"", r("", 0)}}},
		{"partly read then overrun", 4, []step{{"ab", r("ab", 0)}, {"cdefgh", r("efgh", 2)}}},
		{"exactly the bound unread", 4, []step{{"ab", r("ab", 0)}, {"cdef", r("cdef", 0)}}},
		{"huge write", 2, []step{{"x", r("x", 0)}, {"0123456789", r("89", 8)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rg := NewRing(tt.bound)
			for i, s := range tt.steps {
				rg.Write([]byte(s.w))
				if s.read == nil {
					continue
				}
				if lost := rg.Lost(); lost != s.read.lost {
					t.Errorf("step %d: Lost() = %d, want %d", i, lost, s.read.lost)
				}
				data, lost := rg.Read()
				if string(data) != s.read.data || lost != s.read.lost {
					t.Errorf("step %d: Read() = %q, %d; want %q, %d", i, data, lost, s.read.data, s.read.lost)
				}
			}
		})
	}
}

// FuzzRing drives a Ring with writes and reads taken from the fuzz input and
// checks it against the whole stream: memory stays within the bound, every
// read returns the newest unread bytes, and read+lost adds up to the total.
func FuzzRing(f *testing.F) {
	f.Add(uint8(4), []byte("\x03abc\x00\x09xyzxyzxyz\x00"))
	f.Add(uint8(1), []byte("\x05hello\x00\x00\x01a"))
	f.Add(uint8(200), bytes.Repeat([]byte("\x7fz"), 40))
	f.Fuzz(func(t *testing.T, bound uint8, ops []byte) {
		n := int(bound)%64 + 1
		rg := NewRing(n)
		var stream []byte // everything written
		var cursor int    // how much of stream the reads accounted for
		var accounted int64
		for len(ops) > 0 {
			op := int(ops[0])
			ops = ops[1:]
			if op == 0 {
				data, lost := rg.Read()
				if len(data) > n {
					t.Fatalf("read %d bytes from a ring of %d", len(data), n)
				}
				if int64(len(data))+lost != int64(len(stream)-cursor) {
					t.Fatalf("read %d + lost %d, but %d bytes were written since the last read", len(data), lost, len(stream)-cursor)
				}
				if want := stream[len(stream)-len(data):]; !bytes.Equal(data, want) {
					t.Fatalf("read %q, want the newest bytes %q", data, want)
				}
				accounted += int64(len(data)) + lost
				cursor = len(stream)
				continue
			}
			// A write of op bytes, taken from ops and padded to size.
			w := make([]byte, op)
			copy(w, ops)
			ops = ops[min(op, len(ops)):]
			rg.Write(w)
			stream = append(stream, w...)
			if c := cap(rg.w.buf); c > n {
				t.Fatalf("ring of %d holds a buffer of %d", n, c)
			}
			if rg.Total() != int64(len(stream)) {
				t.Fatalf("Total() = %d, want %d", rg.Total(), len(stream))
			}
		}
		data, lost := rg.Read()
		accounted += int64(len(data)) + lost
		if accounted != int64(len(stream)) {
			t.Fatalf("reads and losses account for %d bytes, %d were written", accounted, len(stream))
		}
	})
}
