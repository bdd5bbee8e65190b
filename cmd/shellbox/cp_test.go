package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/server/servertest"
)

// TestCp: shellbox cp both ways, files and directories, against the local
// backend and against a server, with the refusals as errors.
func TestCp(t *testing.T) {
	root, _ := isolateLocal(t)
	local := t.TempDir()
	os.MkdirAll(filepath.Join(local, "src/sub"), 0o755)
	os.WriteFile(filepath.Join(local, "src/a.txt"), []byte("a"), 0o600)
	os.WriteFile(filepath.Join(local, "src/sub/b.txt"), []byte("b"), 0o644)
	os.Symlink("a.txt", filepath.Join(local, "src/link"))
	big := bytes.Repeat([]byte("0123456789"), 300_000)
	os.WriteFile(filepath.Join(local, "big.bin"), big, 0o644)

	b := servertest.NewLocalBackend(t)
	srv := servertest.Start(t, b, nil)
	remote := []string{"--server", srv.URL, "--token", servertest.TokenAcme}
	for name, c := range map[string]struct {
		flags []string
		root  string
	}{"local": {nil, root}, "server": {remote, filepath.Join(b.Dir, "acme", "root")}} {
		t.Run(name, func(t *testing.T) {
			cp := func(args ...string) (string, int) {
				t.Helper()
				_, errs, code := cli(t, "", append(append([]string{"cp"}, c.flags...), args...)...)
				return errs, code
			}
			out := t.TempDir()
			for _, args := range [][]string{
				{filepath.Join(local, "big.bin"), "s1:in/"},                       // in/ does not exist: created, the file goes in it
				{filepath.Join(local, "big.bin"), "s1:in/renamed.bin"},            // a name
				{filepath.Join(local, "src"), "s1:tree"},                          // a new directory
				{filepath.Join(local, "src"), "s1:tree"},                          // now into it: tree/src
				{"s1:tree", filepath.Join(out, "tree")},                           // out, as a new directory
				{"s1:in/renamed.bin", out},                                        // into an existing directory
				{"s1:" + c.root + "/tree/src/sub/b.txt", filepath.Join(out, "b")}, // absolute path
			} {
				if errs, code := cp(args...); code != 0 {
					t.Fatalf("cp %q: exit %d: %s", args, code, errs)
				}
			}
			for p, want := range map[string]string{
				filepath.Join(c.root, "in/big.bin"):         string(big),
				filepath.Join(c.root, "in/renamed.bin"):     string(big),
				filepath.Join(c.root, "tree/a.txt"):         "a",
				filepath.Join(c.root, "tree/src/sub/b.txt"): "b",
				filepath.Join(out, "tree/sub/b.txt"):        "b",
				filepath.Join(out, "tree/src/a.txt"):        "a",
				filepath.Join(out, "renamed.bin"):           string(big),
				filepath.Join(out, "b"):                     "b",
			} {
				if got, err := os.ReadFile(p); err != nil || string(got) != want {
					t.Errorf("%s: %.20q, %v", p, got, err)
				}
			}
			if fi, err := os.Stat(filepath.Join(c.root, "tree/a.txt")); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("mode of tree/a.txt: %v, %v", fi, err)
			}
			if l, _ := os.Readlink(filepath.Join(out, "tree/link")); l != "a.txt" {
				t.Errorf("link -> %q", l)
			}
			for _, c2 := range []struct {
				args []string
				want string
			}{
				{[]string{"s1:../x", out}, "outside the session root"},
				{[]string{filepath.Join(local, "big.bin"), "s1:/etc/x"}, "/etc/x is outside the session root"},
				{[]string{filepath.Join(local, "src"), "s1:in/big.bin"}, "it is a file"},
				{[]string{"s1:nope", out}, "no such file or directory: nope"},
				{[]string{"a", "b"}, "one of SRC and DST must be SESSION:PATH"},
			} {
				if errs, code := cp(c2.args...); code == 0 || !strings.Contains(errs, c2.want) {
					t.Errorf("cp %q: exit %d, %q; want an error with %q", c2.args, code, errs, c2.want)
				}
			}
		})
	}
}
