package sandboxed_test

import (
	"archive/tar"
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/tools"
)

// TestPutTarDirectories: a tar of directories, shaped as
// `python3 -m venv` makes one (directories, .keep files, the relative
// symlink lib64 -> lib) beside a git repository's empty directory, goes
// into the existing /workspace (merged) and into a new directory (renamed
// in whole), on runc and on gVisor: each directory with the tar's mode and
// time, the user's. Under gVisor every directory's mode failed with EPERM
// (os.Root.Chmod asks fchmodat2, which Docker's seccomp profile denies
// there; runc answers ENOSYS and Go falls back).
func TestPutTarDirectories(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			t.Run(runtime, func(t *testing.T) { putTarDirectories(t, e, runtime) })
		}
	})
}

func putTarDirectories(t *testing.T, e enginetest.Engine, runtime string) {
	r := sandboxedtest.New(t, e, runtime, executor.DefaultLimits())
	ts, err := tools.New(r.Exec, tools.Config{Home: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	const s = "venv"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fa, err := r.Exec.Files(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	dir := func(name string, mode int64) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: old}
	}
	file := func(name, body string) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: old}
	}
	bodies := map[string]string{"venv/pyvenv.cfg": "home = /usr/bin\n", "repo/.git/HEAD": "ref: refs/heads/main\n"}
	hdrs := []*tar.Header{
		dir("venv/", 0o755),
		dir("venv/bin/", 0o755),
		file("venv/bin/activate", ""),
		dir("venv/include/", 0o755),
		dir("venv/include/python3.11/", 0o755),
		file("venv/include/python3.11/.keep", ""),
		dir("venv/lib/", 0o755),
		dir("venv/lib/python3.11/", 0o755),
		dir("venv/lib/python3.11/site-packages/", 0o755),
		file("venv/lib/python3.11/site-packages/.keep", ""),
		{Typeflag: tar.TypeSymlink, Name: "venv/lib64", Linkname: "lib", Mode: 0o777, ModTime: old},
		file("venv/pyvenv.cfg", bodies["venv/pyvenv.cfg"]),
		dir("repo/", 0o755),
		dir("repo/.git/", 0o755),
		file("repo/.git/HEAD", bodies["repo/.git/HEAD"]),
		dir("repo/.git/objects/", 0o755),
		dir("repo/.git/objects/pack/", 0o750),
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(bodies[h.Name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	tarball := b.Bytes()

	// Into the existing /workspace: merged.
	w, err := fa.PutFile(ctx, "/workspace", bytes.NewReader(tarball), files.PutOptions{Tar: true})
	if err != nil {
		t.Fatalf("upload into /workspace: %v", err)
	}
	if w.Files != 5 || w.Dirs != 11 || w.Links != 1 {
		t.Errorf("written %+v, want 5 files, 11 directories, 1 link", w)
	}
	// Into a directory that does not exist: renamed in whole.
	if _, err := fa.PutFile(ctx, "/workspace/fresh", bytes.NewReader(tarball), files.PutOptions{Tar: true}); err != nil {
		t.Fatalf("upload into a new directory: %v", err)
	}

	// The tree twice (merged, renamed in), then the directories' times
	// (fresh has no entry of its own in the tar: 0755, the upload's time),
	// then a file reached through lib64.
	const list = `cd /workspace && for d in . fresh; do (cd $d && find venv repo -printf '%p %M %U:%G %l\n' | sed 's/ $//' | LC_ALL=C sort); done
stat -c '%Y %a %n' venv/lib fresh/venv/lib && stat -c '%a %n' fresh && cat venv/lib64/python3.11/site-packages/.keep venv/pyvenv.cfg`
	res := sandboxedtest.Call(t, ts, s, "bash", sandboxedtest.Bash(list))
	tree := `repo drwxr-xr-x 1000:1000
repo/.git drwxr-xr-x 1000:1000
repo/.git/HEAD -rw-r--r-- 1000:1000
repo/.git/objects drwxr-xr-x 1000:1000
repo/.git/objects/pack drwxr-x--- 1000:1000
venv drwxr-xr-x 1000:1000
venv/bin drwxr-xr-x 1000:1000
venv/bin/activate -rw-r--r-- 1000:1000
venv/include drwxr-xr-x 1000:1000
venv/include/python3.11 drwxr-xr-x 1000:1000
venv/include/python3.11/.keep -rw-r--r-- 1000:1000
venv/lib drwxr-xr-x 1000:1000
venv/lib/python3.11 drwxr-xr-x 1000:1000
venv/lib/python3.11/site-packages drwxr-xr-x 1000:1000
venv/lib/python3.11/site-packages/.keep -rw-r--r-- 1000:1000
venv/lib64 lrwxrwxrwx 1000:1000 lib
venv/pyvenv.cfg -rw-r--r-- 1000:1000
`
	stamp := strconv.FormatInt(old.Unix(), 10)
	want := tree + tree + stamp + " 755 venv/lib\n" + stamp + " 755 fresh/venv/lib\n755 fresh\nhome = /usr/bin"
	if res.IsError || res.Text != want {
		t.Errorf("in the sandbox:\n%s\nwant:\n%s", res.Text, want)
	}
}
