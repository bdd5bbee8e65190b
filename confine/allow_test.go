package confine

import (
	"strings"
	"testing"
)

func TestAllowlist(t *testing.T) {
	a, err := NewAllowlist([]string{
		"pypi-mirror.internal:443",
		"*.corp.example:443",
		"10.0.0.7:5432",
		"[fd00::7]:5432",
		"Any-Port.example.:*",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		target string
		want   bool
	}{
		{"pypi-mirror.internal:443", true},
		{"PYPI-MIRROR.internal:443", true},
		{"pypi-mirror.internal.:443", true},
		{"pypi-mirror.internal:80", false},
		{"evil.pypi-mirror.internal:443", false},
		{"pypi-mirror.internal.evil:443", false},
		{"a.corp.example:443", true},
		{"a.b.corp.example:443", true},
		{"corp.example:443", false},
		{"xcorp.example:443", false},
		{"a.corp.example:80", false},
		{"10.0.0.7:5432", true},
		{"10.0.0.7:5433", false},
		{"[::ffff:10.0.0.7]:5432", true},
		{"[fd00::7]:5432", true},
		{"[fd00:0::7]:5432", true},
		{"[fd00::8]:5432", false},
		{"any-port.example:1", true},
		{"any-port.example:65535", true},
		{"any-port.example:0", false},
		{"any-port.example:65536", false},
		{"any-port.example", false},
		{"any-port.example:http", false},
		{"", false},
		{":443", false},
		{"pypi mirror.internal:443", false},
		{"[10.0.0.7]:5432", true}, // brackets are only syntax
		{"a.corp.example%0a:443", false},
		{"10.0.0.7.:5432", false}, // a name, not the address
		{"127.1:5432", false},     // numeric forms resolvers take for addresses
		{"2130706433:5432", false},
		{"0x7f.1:5432", false},
	} {
		if got := a.Allows(c.target); got != c.want {
			t.Errorf("Allows(%q) = %v, want %v", c.target, got, c.want)
		}
	}
	var none *Allowlist
	if none.Allows("pypi-mirror.internal:443") {
		t.Error("a nil allowlist allows")
	}
}

func TestAllowlistEntries(t *testing.T) {
	for _, c := range []struct{ entry, err string }{
		{"example.com", "is not host:port"},
		{":443", "is not host:port"},
		{"example.com:0", "port must be 1-65535 or *"},
		{"example.com:99999", "port must be 1-65535 or *"},
		{"example.com:https", "port must be 1-65535 or *"},
		{"exa mple.com:443", "is not a host name"},
		{"*.*.example.com:443", "is not a host name"},
		{"ex*ample.com:443", "is not a host name"},
		{"*:443", "is not a host name"},
		{"[fe80::1%eth0]:443", "zone"},
		{"example..com:443", "is not a host name"},
		{"127.1:80", "is not a host name"},
		{"2130706433:80", "is not a host name"},
		{"mirror.0x7f:80", "is not a host name"},
		{"example.com:443", ""},
		{"*.example.com:*", ""},
		{"[::1]:8080", ""},
	} {
		err := ParseEntry(c.entry)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("ParseEntry(%q) = %v, want nil", c.entry, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseEntry(%q) = %v, want an error containing %q", c.entry, err, c.err)
		}
	}
	if _, err := NewAllowlist([]string{"ok.example:1", "bad"}); err == nil || !strings.Contains(err.Error(), "entry 1") {
		t.Errorf("NewAllowlist with a bad second entry: %v", err)
	}
}

func FuzzAllows(f *testing.F) {
	for _, s := range []string{"pypi-mirror.internal:443", "[fd00::7]:5432", "a.corp.example:443", "x:*", "%:1"} {
		f.Add(s)
	}
	a, err := NewAllowlist([]string{"pypi-mirror.internal:443", "*.corp.example:443", "10.0.0.7:5432"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a.Allows(s)
		ParseEntry(s)
	})
}
