package local

import (
	"fmt"
	"testing"
)

func TestParseGroups(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want string
	}{
		{"Name:\tx\nGroups:\t4 24 2000000000 \nNgid:\t0\n", "[4 24 2000000000]"},
		{"Groups:\t\n", "[]"},
		{"Groups:\t  \n", "[]"}, // gVisor
	} {
		g, err := parseGroups([]byte(tt.in))
		if err != nil || fmt.Sprint(g) != tt.want {
			t.Errorf("parseGroups(%q) = %v, %v; want %s", tt.in, g, err, tt.want)
		}
	}
	if _, err := parseGroups([]byte("Name:\tx\n")); err == nil {
		t.Error("no Groups line: no error")
	}
}
