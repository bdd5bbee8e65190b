package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/shellbox/shellbox/executor"
)

func TestWorkdir(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	root := e.cfg.Root
	for _, d := range []string{"sub/deep"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.WriteFile(filepath.Join(root, "file"), nil, 0o644))
	must(t, os.Symlink("/", filepath.Join(root, "toroot")))
	must(t, os.Symlink("..", filepath.Join(root, "dotdot")))
	must(t, os.Symlink("sub/deep", filepath.Join(root, "inlink")))
	must(t, os.Symlink(filepath.Join(root, "sub"), filepath.Join(root, "abslink")))
	must(t, os.Symlink("loop", filepath.Join(root, "loop")))
	must(t, os.Symlink(filepath.Join(root, "toroot"), filepath.Join(root, "abstoroot")))
	must(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))

	outside := func(wd string) error { return executor.WorkdirOutside(wd, root) }
	missing := executor.WorkdirMissing
	tests := []struct {
		name    string
		workdir string
		pwd     string // the real directory the command runs in
		err     error
	}{
		{"default is the root", "", root, nil},
		{"relative", "sub", root + "/sub", nil},
		{"relative, two levels", "sub/deep", root + "/sub/deep", nil},
		{"absolute inside", root + "/sub", root + "/sub", nil},
		{"dot-dot that stays inside", "sub/deep/..", root + "/sub", nil},
		{"symlink inside the root", "inlink", root + "/sub/deep", nil},
		{"dot-dot escape", "../../etc", "", outside("../../etc")},
		{"absolute outside", "/etc", "", outside("/etc")},
		{"symlink to /", "toroot", "", outside(root + "/toroot")},
		{"through a symlink to /", "toroot/etc", "", outside(root + "/toroot/etc")},
		{"symlink to ..", "dotdot", "", outside(root + "/dotdot")},
		{"absolute symlink inside the root", "abslink", root + "/sub", nil},
		{"through an absolute symlink", "abslink/deep", root + "/sub/deep", nil},
		{"absolute symlink to /", "abstoroot", "", outside(root + "/abstoroot")},
		{"fifo", "fifo", "", missing(root + "/fifo")},
		{"missing", "nope", "", missing(root + "/nope")},
		{"a file", "file", "", missing(root + "/file")},
		{"symlink loop", "loop", "", missing(root + "/loop")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := runErr(t, e, executor.Request{Command: "pwd; echo $PWD; pwd -P", Workdir: tt.workdir})
			if tt.err != nil {
				if err == nil || err.Error() != tt.err.Error() || !errors.Is(err, executor.ErrInvalid) {
					t.Fatalf("got %v (result %+v), want %v", err, res, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := tt.pwd + "\n" + tt.pwd + "\n" + tt.pwd + "\n"; res.Stdout != want {
				t.Errorf("stdout %q (stderr %q), want %q", res.Stdout, res.Stderr, want)
			}
		})
	}
}

// TestWorkdirSpecOutside checks the run-time check on a spec that did not go
// through Resolve.
func TestWorkdirSpecOutside(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupOff)
	spec, err := e.Resolve(context.Background(), executor.Request{Session: session, Command: "pwd"})
	if err != nil {
		t.Fatal(err)
	}
	spec.Workdir = "/etc"
	_, err = e.Run(context.Background(), spec)
	if want := executor.WorkdirOutside("/etc", spec.Root); err == nil || err.Error() != want.Error() {
		t.Fatalf("Run = %v, want %v", err, want)
	}
	spec.Root = filepath.Join(e.cfg.Root, "gone")
	spec.Workdir = spec.Root
	_, err = e.Run(context.Background(), spec)
	if want := executor.WorkdirMissing(spec.Root); err == nil || err.Error() != want.Error() {
		t.Fatalf("Run = %v, want %v", err, want)
	}
}

// TestWorkdirRootSymlink: a Root reached through a symlink runs commands in
// its real path.
func TestWorkdirRootSymlink(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(real, link))
	e := newExec(t, CgroupOff, func(c *Config) { c.Root = link })
	res := run(t, e, executor.Request{Command: "echo $PWD; pwd -P"})
	if want := real + "\n" + real + "\n"; res.Stdout != want {
		t.Errorf("stdout %q, want %q", res.Stdout, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
