package mediatype

import "testing"

func TestIncludes(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"application/x-tar", true},
		{"Application/X-Tar; q=0.9", true},
		{"text/plain, application/x-tar", true},
		{"application/octet-stream", false},
		{"", false},
		{"application/x-tar;;", false},
	} {
		if got := Includes(c.v, "application/x-tar"); got != c.want {
			t.Errorf("Includes(%q) = %v, want %v", c.v, got, c.want)
		}
	}
}
