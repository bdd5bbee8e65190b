package mountinfo_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/internal/mountinfo"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/tab\011x`: "/tab\tx", `/plain`: "/plain", `/bad\09`: `/bad\09`, `/end\04`: `/end\04`} {
		if got := mountinfo.Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnder(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "a b")
	os.Mkdir(sub, 0o755)
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (not root?): %v", err)
	}
	defer unix.Unmount(sub, unix.MNT_DETACH)
	got, err := mountinfo.Under(dir)
	if err != nil || !slices.Equal(got, []string{sub}) {
		t.Errorf("Under(%s) = %v, %v; want [%s]", dir, got, err, sub)
	}
}
