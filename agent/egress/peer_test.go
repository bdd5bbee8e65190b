package egress

import (
	"net"
	"strings"
	"testing"
)

func TestHolders(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// (An error is right too where a process of this uid cannot be read,
	// as pid 1 of a container without CAP_SYS_PTRACE over it.)
	if hs, err := Holders(s, nil); len(hs) != 0 || (err != nil && !strings.Contains(err.Error(), "cannot read the fd links of process")) {
		t.Errorf("a connection of this process: %v %v, want no holder", hs, err)
	}
	if g, err := TreeGrant(s, nil, func(Holder) string { return "x" }); g != "" || err == nil {
		t.Errorf("TreeGrant without a holder: %q %v, want an error", g, err)
	}
	called := false
	Holders(s, func(fn func() error) error { called = true; return fn() })
	if !called {
		t.Error("Holders did not scan through asUser")
	}
}

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:0CEA":                         "127.0.0.1:3306",
		"0000000000000000FFFF00000100007F:1F90": "127.0.0.1:8080",
		"00000000000000000000000001000000:0050": "[::1]:80",
	} {
		got, err := parseProcAddr([]byte(in))
		if err != nil || got.String() != want {
			t.Errorf("parseProcAddr(%s) = %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007G:0050", "0100007F:10000", "01:0050"} {
		if _, err := parseProcAddr([]byte(bad)); err == nil {
			t.Errorf("parseProcAddr(%q): no error", bad)
		}
	}
}
