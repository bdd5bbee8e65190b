package output

import (
	"strings"
	"testing"
)

func TestTail(t *testing.T) {
	tests := []struct {
		name      string
		bound     int
		writes    []string
		want      string
		truncated bool
	}{
		{"nothing", 4, nil, "", false},
		{"empty write", 4, []string{""}, "", false},
		{"under bound", 4, []string{"ab"}, "ab", false},
		{"exactly bound", 4, []string{"ab", "cd"}, "abcd", false},
		{"one over", 4, []string{"abcd", "e"}, "bcde", true},
		{"single big write", 4, []string{"abcdefghij"}, "ghij", true},
		{"big write after small", 4, []string{"xy", "abcdefghij"}, "ghij", true},
		{"wraps many times", 3, []string{"a", "b", "c", "d", "e", "f", "g"}, "efg", true},
		{"straddles the wrap", 5, []string{"abc", "defg", "hi"}, "efghi", true},
		{"bound one", 1, []string{"abc", "", "d"}, "d", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := NewTail(tt.bound)
			var total int
			for _, w := range tt.writes {
				n, err := tl.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
				total += len(w)
				if c := cap(tl.w.buf); c > tt.bound {
					t.Fatalf("buffer capacity %d exceeds bound %d", c, tt.bound)
				}
			}
			if got := tl.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if got := tl.Total(); got != int64(total) {
				t.Errorf("Total() = %d, want %d", got, total)
			}
			if got := tl.Truncated(); got != tt.truncated {
				t.Errorf("Truncated() = %v, want %v", got, tt.truncated)
			}
		})
	}
}

// TestTailGrowsLazily checks that small output costs small memory.
func TestTailGrowsLazily(t *testing.T) {
	tl := NewTail(1 << 20)
	tl.Write([]byte("hello"))
	if c := cap(tl.w.buf); c > 4096 {
		t.Fatalf("5 bytes written, buffer capacity %d", c)
	}
	tl.Write([]byte(strings.Repeat("x", 3<<20)))
	if c := cap(tl.w.buf); c != 1<<20 {
		t.Fatalf("buffer capacity %d, want the bound", c)
	}
}
